-- told: note that jobs of this function no longer hold for a dependent in another function
-- (or their batch): the dependent has ended (`release DEPENDENCY` in a notify), or the
-- batch has counted the job's end. Until then a finished job outlives its retention (at
-- most 7 days): a dependent whose news was lost still finds it when it re-checks its links,
-- and one that runs late still reads its output. Idempotent. Many at once, as
-- `resolve`.
--
-- KEYS: jobs expires stats events
-- ARGV[1]  the function name
-- ARGV[2..] pairs, 1..MAX_TELLS_PER_CALL of them: a finished job's number, and the id of a
--          dependent it no longer holds for ('G:M'), or 'batch ID' for the job's batch
--
-- Returns: how many of the dependents were still to be told.

local n = (#ARGV - 1) / 2
if n < 1 or n ~= math.floor(n) or n > MAX_TELLS_PER_CALL then
  return redis.error_reply('BADARGS told: 1..' .. MAX_TELLS_PER_CALL .. ' pairs of a job number and a dependent')
end
for i = 0, n - 1 do
  local number, dependent = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if not job_number(number) or (not split_id(dependent) and not string.match(dependent, '^batch %x+$')) then
    return redis.error_reply('BADARGS told: ' .. tostring(number) .. ' ' .. tostring(dependent)
      .. ': the number must be a job number, the dependent a job id (FUNCTION:NUMBER) or a batch (batch ID)')
  end
end

-- Only the record's other fields change (its `untold` list): the record is rewritten as
-- text, its hot fields untouched, as `complete` does (a record in the former layout is
-- loaded and saved whole).
local numbers = {}
for i = 0, n - 1 do numbers[#numbers + 1] = ARGV[2 + 2 * i] end
local raws = hmget(K.jobs, numbers)
-- Written together at the end: the records, and the expiry of those told at last.
local texts, written, back = {}, {}, {}
local told = 0
for i = 0, n - 1 do
  local number, dependent = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local raw = texts[number] or raws[i + 1]
  local f = raw and record_fields(raw)
  if f and f[R_OTHERS] ~= '' then
    local others = cjson.decode(f[R_OTHERS])
    if list_drop(others, 'untold', dependent) then
      f[R_OTHERS] = (next(others) and cjson.encode(others)) or ''
      if not texts[number] then written[#written + 1] = number end
      texts[number] = record_text(f)
      if not others.untold and f[R_FINISHED] ~= '' then
        -- Its stay may have been stretched for the dependent: back to its own retention.
        local keep = tonumber(f[R_RETENTION]) or 0
        local failed_keep = tonumber(f[R_RETENTION + 1]) or 0
        if f[R_STATE] == 'failed' and failed_keep > keep then keep = failed_keep end
        back[#back + 1] = int(tonumber(f[R_FINISHED]) + keep)
        back[#back + 1] = number
      end
      told = told + 1
    end
  elseif raw and not f then
    local record = load(number)
    if list_drop(record, 'untold', dependent) then
      save(number, record)
      if not record.untold and record.finished_ms then
        redis.call('ZADD', K.expires, int(record.finished_ms + retention_of(record)), number)
      end
      told = told + 1
    end
  end
end
local pairs_out = {}
for _, number in ipairs(written) do
  pairs_out[#pairs_out + 1] = number
  pairs_out[#pairs_out + 1] = texts[number]
end
call_chunked('HSET', K.jobs, pairs_out)
call_chunked('ZADD', K.expires, back)
return told
