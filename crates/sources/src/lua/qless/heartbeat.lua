-- heartbeat: a qless worker's heartbeat of job ARGV[2]: while ARGV[3] holds it (running in
-- queue ARGV[4]), its lock is extended by the queue's heartbeat setting.
-- KEYS[1] ql:j:JID  KEYS[2] ql:q:Q-locks  KEYS[3] ql:w:W:jobs  KEYS[4] ql:config
-- ARGV[1] now  ARGV[2] jid  ARGV[3] worker  ARGV[4] queue  ARGV[5] the pop's id
-- Returns {'held', heartbeat seconds}, {'gone'} (the job was cancelled) or {'lost'} (put
-- elsewhere, failed, or given to another worker).
local now = tonumber(ARGV[1])
local jid, worker, queue = ARGV[2], ARGV[3], ARGV[4]
local status = holds(KEYS[1], worker, queue, ARGV[5])
if status ~= 'held' then
    return {status}
end
local heartbeat = heartbeat_of(KEYS[4], queue)
local expires = now + heartbeat
redis.call('hset', KEYS[1], 'expires', expires)
redis.call('zadd', KEYS[3], expires, jid)
redis.call('zadd', KEYS[2], expires, jid)
return {'held', tostring(heartbeat)}
