-- outcomes: how jobs of this function stand, for a dependent reading its dependencies
-- (`wasmgear:job/dependencies`): each one's state, the size of its output and its error,
-- without the outputs themselves (`output` reads those a piece at a time), so that a job
-- with many dependencies reads only what it asks for.
--
-- KEYS: jobs output stats events
-- ARGV[1]  the function name
-- ARGV[2]  n: how many jobs, 1..MAX_OUTCOMES
-- ARGV[3..2+n]  their numbers
--
-- Returns: n entries {state, output_bytes, error}, in the order asked: state `missing` for a
--          job not kept (never made, or forgotten after its retention); output_bytes 0 unless
--          it succeeded with its output kept; error the message it failed or was cancelled
--          with, or false.

local n = whole(ARGV[2], 1, MAX_OUTCOMES)
if not n or #ARGV ~= 2 + n then
  return redis.error_reply('BADARGS outcomes: give a count of 1..' .. MAX_OUTCOMES .. ' and as many job numbers')
end
local numbers = {}
for i = 1, n do
  local number = ARGV[2 + i]
  if not job_number(number) then
    return redis.error_reply('BADARGS outcomes: ' .. tostring(number) .. ' is not a job number')
  end
  numbers[i] = number
end

-- Read from the records' text: only a failed or cancelled job's other fields are decoded
-- (for its error).
local raws = hmget(K.jobs, numbers)
local answers = {}
for i, number in ipairs(numbers) do
  local raw = raws[i]
  local f = raw and record_fields(raw)
  -- A record in the former layout is decoded whole.
  local record = raw and not f and decode(raw)
  local state = (f and f[R_STATE]) or (record and record.state)
  if not state then
    answers[i] = { 'missing', 0, false }
  else
    local size = 0
    if state == 'succeeded' then size = redis.call('HSTRLEN', K.output, number) end
    local message = false
    if ENDED[state] == 'unsuccessful' then
      record = record or (f[R_OTHERS] ~= '' and cjson.decode(f[R_OTHERS])) or {}
      if type(record.error) == 'table' then message = record.error.message or false end
    end
    answers[i] = { state, size, message }
  end
end
return answers
