-- release: the worker is stopping: job ARGV[2], not run, waits again in its queue with its
-- priority, no retry used.
-- KEYS[1] ql:j:JID  KEYS[2] ql:q:Q-work  KEYS[3] ql:q:Q-locks  KEYS[4] ql:w:W:jobs
-- ARGV[1] now  ARGV[2] jid  ARGV[3] worker  ARGV[4] queue  ARGV[5] the pop's id
-- Returns 1, or 0 when the worker no longer holds the job (nothing changes).
local now = tonumber(ARGV[1])
local jid, worker, queue = ARGV[2], ARGV[3], ARGV[4]
if holds(KEYS[1], worker, queue, ARGV[5]) ~= 'held' then
    return 0
end
redis.call('zrem', KEYS[3], jid)
redis.call('zrem', KEYS[4], jid)
redis.call('zadd', KEYS[2], work_score(now, redis.call('hget', KEYS[1], 'priority')), jid)
redis.call('hset', KEYS[1], 'state', 'waiting', 'worker', '', 'expires', 0)
redis.call('hdel', KEYS[1], 'wasmgear-lease')
return 1
