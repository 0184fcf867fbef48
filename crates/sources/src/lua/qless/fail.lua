-- fail: a qless worker's fail of job ARGV[2]: failed for good in group ARGV[6] with message
-- ARGV[7] (kept until a user retries or cancels it), listed in `ql:f:GROUP`.
-- KEYS[1] ql:j:JID  KEYS[2] ql:failures  KEYS[3] ql:tracked
-- ARGV[1] now  ARGV[2] jid  ARGV[3] worker  ARGV[4] queue  ARGV[5] the pop's id
-- ARGV[6] group  ARGV[7] message
-- Returns 1, or 0 when the worker no longer holds the job (nothing changes).
local now = tonumber(ARGV[1])
local jid, worker, queue = ARGV[2], ARGV[3], ARGV[4]
if holds(KEYS[1], worker, queue, ARGV[5]) ~= 'held' then
    return 0
end
fail_job(now, jid, queue, worker, ARGV[6], ARGV[7], KEYS[2], KEYS[3])
redis.call('hdel', KEYS[1], 'wasmgear-lease')
return 1
