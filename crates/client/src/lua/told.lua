-- told: note that dependents in other functions (or batches) have been told that jobs of
-- this function ended (the last of the steps of a dependency across functions; see `link`
-- and `resolve`). Until every such dependent has been told, a finished job outlives its
-- retention (at most 7 days), so that a dependent whose news was lost still finds it when
-- it re-checks its links. Idempotent. Many at once, as `resolve`.
--
-- KEYS: jobs expires stats events
-- ARGV[1]  the function name
-- ARGV[2..] pairs, 1..MAX_TELLS_PER_CALL of them: a finished job's number, and the id of a
--          dependent that has been told ('G:M'), or 'batch ID' for the job's batch
--
-- Returns: how many of the dependents were still to be told.

local n = (#ARGV - 1) / 2
if n < 1 or n ~= math.floor(n) or n > MAX_TELLS_PER_CALL then
  return redis.error_reply('BADARGS told: 1..' .. MAX_TELLS_PER_CALL .. ' pairs of a job number and a dependent')
end
for i = 0, n - 1 do
  local number, dependent = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if not job_number(number) or (not split_id(dependent) and not string.match(dependent, '^batch %x+$')) then
    return redis.error_reply('BADARGS told: the dependent must be a job id (FUNCTION:NUMBER) or a batch (batch ID)')
  end
end

local told = 0
for i = 0, n - 1 do
  local number, dependent = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local record = load(number)
  if record and contains(record.untold, dependent) then
    local left = {}
    for _, d in ipairs(record.untold) do if d ~= dependent then left[#left + 1] = d end end
    record.untold = list_or_nil(left)
    save(number, record)
    if not record.untold and record.finished_ms then
      -- Its stay may have been stretched for the dependent: back to its own retention.
      redis.call('ZADD', K.expires, int(record.finished_ms + retention_of(record)), number)
    end
    told = told + 1
  end
end
return told
