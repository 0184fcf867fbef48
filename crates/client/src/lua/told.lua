-- told: note that a dependent in another function has been told that this function's job
-- ended (the last of the steps of a dependency across functions; see `link` and
-- `resolve`). Until every such dependent has been told, the finished job outlives its
-- retention (at most 7 days), so that a dependent whose news was lost still finds it when
-- it re-checks its links. Idempotent.
--
-- KEYS: jobs expires stats events
-- ARGV[1]  the function name
-- ARGV[2]  the finished job's number
-- ARGV[3]  the dependent's id ('G:M'), or 'batch ID' for the job's batch
--
-- Returns: 1 when the dependent was still to be told, else 0.

local number, dependent = ARGV[2], ARGV[3]
if not split_id(dependent or '') and not string.match(dependent or '', '^batch %x+$') then
  return redis.error_reply('BADARGS told: the dependent must be a job id (FUNCTION:NUMBER) or a batch (batch ID)')
end

local record = load(number)
if not record or not contains(record.untold, dependent) then return 0 end
local left = {}
for _, d in ipairs(record.untold) do if d ~= dependent then left[#left + 1] = d end end
record.untold = list_or_nil(left)
save(number, record)
if not record.untold and record.finished_ms then
  -- Its stay may have been stretched for the dependent: back to its own retention.
  redis.call('ZADD', K.expires, int(record.finished_ms + retention_of(record)), number)
end
return 1
