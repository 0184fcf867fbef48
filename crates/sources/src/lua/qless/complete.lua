-- complete: a qless worker's complete of job ARGV[2], with the plugin's output kept in the
-- job hash's `output` field. The job leaves its queue, its run time joins the day's
-- statistics, it is listed in `ql:completed` (the oldest trimmed past `jobs-history` seconds
-- and `jobs-history-count` jobs), and dependents waiting on it alone start waiting.
-- KEYS[1] ql:j:JID  KEYS[2] ql:q:Q-work  KEYS[3] ql:q:Q-locks  KEYS[4] ql:q:Q-scheduled
-- KEYS[5] ql:w:W:jobs  KEYS[6] ql:completed  KEYS[7] ql:j:JID-dependents  KEYS[8] ql:tracked
-- KEYS[9] ql:config
-- ARGV[1] now  ARGV[2] jid  ARGV[3] worker  ARGV[4] queue  ARGV[5] the pop's id
-- ARGV[6] output
-- Returns 1, or 0 when the worker no longer holds the job (nothing changes).
local now = tonumber(ARGV[1])
local jid, worker, queue = ARGV[2], ARGV[3], ARGV[4]
if holds(KEYS[1], worker, queue, ARGV[5]) ~= 'held' then
    return 0
end
history(now, jid, 'done')
redis.call('zrem', KEYS[2], jid)
redis.call('zrem', KEYS[3], jid)
redis.call('zrem', KEYS[4], jid)
local since = tonumber(redis.call('hget', KEYS[1], 'time') or now) or now
add_stat(now, queue, 'run', now - since)
redis.call('zrem', KEYS[5], jid)
if is_tracked(KEYS[8], jid) then
    publish('completed', jid)
end
publish('log', cjson.encode({jid = jid, event = 'completed', queue = queue}))
local retries = redis.call('hget', KEYS[1], 'retries')
redis.call('hset', KEYS[1], 'state', 'complete', 'worker', '', 'failure', '{}', 'queue', '',
    'expires', 0, 'remaining', retries, 'time', string.format('%.20f', now),
    'output', ARGV[6])
redis.call('hdel', KEYS[1], 'wasmgear-lease')

-- Completed jobs are kept for a while, and only so many.
redis.call('zadd', KEYS[6], now, jid)
local function forget(old)
    for _, tag in ipairs(cjson.decode(redis.call('hget', job_key(old), 'tags') or '[]')) do
        redis.call('zrem', QL .. 't:' .. tag, old)
        redis.call('zincrby', QL .. 'tags', -1, tag)
    end
    redis.call('del', job_key(old), job_key(old) .. '-history')
end
local oldest = now - setting(KEYS[9], 'jobs-history')
for _, old in ipairs(redis.call('zrangebyscore', KEYS[6], 0, oldest)) do
    forget(old)
end
redis.call('zremrangebyscore', KEYS[6], 0, oldest)
local keep = setting(KEYS[9], 'jobs-history-count')
for _, old in ipairs(redis.call('zrange', KEYS[6], 0, -1 - keep)) do
    forget(old)
end
redis.call('zremrangebyrank', KEYS[6], 0, -1 - keep)

-- Dependents with nothing else to wait for start waiting in their queues.
for _, dependent in ipairs(redis.call('smembers', KEYS[7])) do
    local dependencies = job_key(dependent) .. '-dependencies'
    redis.call('srem', dependencies, jid)
    if redis.call('scard', dependencies) == 0 then
        local in_queue, priority = unpack(redis.call('hmget', job_key(dependent), 'queue', 'priority'))
        if in_queue and in_queue ~= '' then
            redis.call('zrem', QL .. 'q:' .. in_queue .. '-depends', dependent)
            redis.call('zadd', QL .. 'q:' .. in_queue .. '-work', work_score(now, priority), dependent)
            redis.call('hset', job_key(dependent), 'state', 'waiting')
        end
    end
end
redis.call('del', KEYS[7])
return 1
