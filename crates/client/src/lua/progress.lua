-- progress: store a running job's latest progress and publish it.
--
-- KEYS: jobs stats config events work
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  units done (a decimal whole number, 0 to 2^64-1)
-- ARGV[5]  units in all (0: unknown; same range)
-- ARGV[6]  message ('' for none)
--
-- Returns: 1 when stored; 0 when the token does not hold the job's lease (nothing changes).
-- Publishes: {"event":"progress","id":"F:N","seq":S,"done":"D","total":"T","message":M}
--            (D and T as decimal strings), where
--            S counts the job's progress reports from 1 over all attempts, so a reader can
--            put them in order.

local number, token = ARGV[2], ARGV[3]
local function units(s) return type(s) == 'string' and #s <= 20 and string.find(s, '^%d+$') ~= nil end
if not (units(ARGV[4]) and units(ARGV[5]) and short(ARGV[6], MAX_PROGRESS_MESSAGE_BYTES)) then
  return redis.error_reply('BADARGS progress: done and total must be decimal whole numbers (at most 20 digits), the message at most '
    .. MAX_PROGRESS_MESSAGE_BYTES .. ' bytes')
end

local record = load(number)
if not record then return 0 end
if record.state ~= 'running' or record.token ~= token then return 0 end

-- progress_seq is never reset (not even by a retry), so readers can order reports.
record.progress_seq = (record.progress_seq or 0) + 1
record.unconfirmed = nil -- the worker has the job: the attempt counts (see `lease`)
-- The counts stay the decimal strings they came as: a Lua number would lose digits past
-- 2^53, and cjson would write 10^14 and more in exponent form.
local progress = { seq = record.progress_seq, done = ARGV[4], total = ARGV[5] }
if ARGV[6] ~= '' then progress.message = ARGV[6] end
record.progress = progress
save(number, record)
publish({
  event = 'progress', id = id_of(number), seq = progress.seq,
  done = progress.done, total = progress.total, message = progress.message,
})
return 1
