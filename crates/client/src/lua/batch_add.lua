-- batch_add: add jobs to an open batch, before they are written (their numbers reserved with
-- `reserve`, so that none can end before it counts): a job that is never written reads as
-- missing, and the upkeep counts it cancelled once its reservation has lapsed.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- ARGV     the jobs' ids (G:N), at least one
--
-- Returns: the batch's total afterwards. Or the error `NOBATCH` (no such batch), `CONFLICT`
-- (it is closed), or `BADBATCH` (an id that is no job id, or more than MAX_BATCH_JOBS jobs),
-- having written nothing.

if #ARGV == 0 then return redis.error_reply('BADBATCH give the ids of the jobs to add') end
for _, id in ipairs(ARGV) do
  if not split_id(id) then return redis.error_reply('BADBATCH ' .. id .. ' is not a job id (FUNCTION:NUMBER)') end
end
local open, total = unpack(redis.call('HMGET', KEYS[1], 'open', 'total'))
if not open then return redis.error_reply('NOBATCH no such batch (never opened, or forgotten)') end
if open ~= '1' then return redis.error_reply('CONFLICT the batch is closed: no job can be added to it') end
if tonumber(total) + #ARGV > MAX_BATCH_JOBS then
  return redis.error_reply('BADBATCH a batch has at most ' .. MAX_BATCH_JOBS .. ' jobs')
end
local i = 1
while i <= #ARGV do
  local last = math.min(i + 999, #ARGV)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, last))
  i = last + 1
end
redis.call('HSET', KEYS[1], 'added_ms', string.format('%d', clock_ms()))
for _, key in ipairs(KEYS) do
  if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, string.format('%d', BATCH_MAX_MS)) end
end
return redis.call('HINCRBY', KEYS[1], 'total', #ARGV)
