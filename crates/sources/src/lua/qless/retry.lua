-- retry: a qless worker's retry of job ARGV[2]: one retry fewer remains; the job waits
-- ARGV[6] seconds in the queue's scheduled set (or waits at once when 0), its failure noted
-- (group ARGV[7], message ARGV[8]); with no retry left it fails in that group.
-- KEYS[1] ql:j:JID  KEYS[2] ql:q:Q-work  KEYS[3] ql:q:Q-locks  KEYS[4] ql:q:Q-scheduled
-- KEYS[5] ql:w:W:jobs  KEYS[6] ql:failures  KEYS[7] ql:tracked
-- ARGV[1] now  ARGV[2] jid  ARGV[3] worker  ARGV[4] queue  ARGV[5] the pop's id
-- ARGV[6] delay seconds  ARGV[7] group  ARGV[8] message
-- Returns the retries left (negative: failed), or false when the worker no longer holds the
-- job (nothing changes).
local now = tonumber(ARGV[1])
local jid, worker, queue = ARGV[2], ARGV[3], ARGV[4]
local delay = tonumber(ARGV[6])
if holds(KEYS[1], worker, queue, ARGV[5]) ~= 'held' then
    return false
end
local remaining = redis.call('hincrby', KEYS[1], 'remaining', -1)
redis.call('hdel', KEYS[1], 'grace', 'wasmgear-lease')
redis.call('zrem', KEYS[3], jid)
redis.call('zrem', KEYS[5], jid)
if remaining < 0 then
    fail_job(now, jid, queue, worker, ARGV[7], ARGV[8], KEYS[6], KEYS[7])
    return remaining
end
if delay > 0 then
    redis.call('zadd', KEYS[4], now + delay, jid)
    redis.call('hset', KEYS[1], 'state', 'scheduled')
else
    redis.call('zadd', KEYS[2], work_score(now, redis.call('hget', KEYS[1], 'priority')), jid)
    redis.call('hset', KEYS[1], 'state', 'waiting')
end
redis.call('hset', KEYS[1], 'worker', '', 'expires', 0, 'failure', cjson.encode({
    group = ARGV[7], message = ARGV[8], when = math.floor(now), worker = worker}))
return remaining
