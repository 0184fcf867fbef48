-- batch_done: count the end of one of a batch's jobs, once (the caller of the script that
-- ended it sends it, as it tells dependents in other functions; the upkeep sends it again
-- for a job whose news was lost). Idempotent.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- ARGV[1]  the job's id (G:N)
-- ARGV[2]  the state it ended in: succeeded, failed, cancelled or expired (counted as failed)
--
-- Returns: the callbacks now due ('success', 'complete'; see batch_settle); none for a
-- batch that is gone.

local STATES = { succeeded = 'succeeded', failed = 'failed', cancelled = 'cancelled', expired = 'failed' }
local counted = STATES[ARGV[2] or '']
if not split_id(ARGV[1] or '') or not counted then
  return redis.error_reply('BADBATCH batch_done takes a job id and succeeded, failed, cancelled or expired')
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
if redis.call('HSETNX', KEYS[3], ARGV[1], counted) == 1 then
  redis.call('HINCRBY', KEYS[1], counted, 1)
  if redis.call('PTTL', KEYS[3]) < 0 then
    redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[1]))
  end
end
return batch_settle(KEYS[1])
