-- fail: record a leased job's failure; retry it later or fail it for good, exactly once.
--
-- Fenced by the lease token like `complete` (and, like it, the same report sent again is
-- answered as the first was). A retryable failure with attempts left puts
-- the job back as `scheduled` after the backoff; otherwise the job ends `failed`, in the
-- failure group named by its error class (or `cancelled`, for class `cancelled` or when a
-- client asked for cancellation), keeping its error and attempt history. Jobs waiting on it
-- are cancelled.
--
-- KEYS: jobs logs ready scheduled leased waiting expires uniq failed counts stats config events work groups group_ready group_running group_config dedup dedup_exp expiring
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  error class (`guest-error`, `trap`, `timed-out`, ...), the failure group
-- ARGV[5]  error message
-- ARGV[6]  1 if another attempt may succeed, else 0
-- ARGV[7]  backoff before the next attempt, ms (chosen by the caller, jitter included)
-- ARGV[8]  this attempt's log lines (text, may be empty)
-- ARGV[9]  the version (content hash) of the plugin that ran the attempt ('' if unknown)
--
-- Returns: {1, state, notify} when accepted, state 'scheduled' (will retry), 'failed' or
--          'cancelled' (notify: see lib.lua); {0, reason, {}} when refused ('missing' or
--          'stale').
-- Publishes: `finish` with the final state when the job ends; `retry` when it will run again.

if #ARGV ~= 9 then return redis.error_reply('BADARGS fail: it takes 9 arguments, not ' .. #ARGV) end
local number, token = ARGV[2], ARGV[3]
local class, message, retryable, backoff_ms = ARGV[4], ARGV[5], ARGV[6] == '1', whole(ARGV[7], 0, MAX_DURATION_MS)
local log_text, version = ARGV[8], ARGV[9]
if not backoff_ms or (ARGV[6] ~= '0' and ARGV[6] ~= '1') or class == '' or not short(class, MAX_KEY_BYTES)
  or not fits_record(version) then
  return redis.error_reply(string.format('BADARGS fail: the error class must be 1 to %d bytes, retryable 0 or 1, the backoff a whole number of ms in 0..%d, the version without "|"',
    MAX_KEY_BYTES, MAX_DURATION_MS))
end

local record = load(number)
if not record then return { 0, 'missing', {} } end
-- Reported before by this lease (sent again after its reply was lost): the same answer.
if record.state ~= 'running' and record.token == token then return { 1, record.state, {} } end
if record.state ~= 'running' or record.token ~= token then return { 0, 'stale', {} } end

add_history(record, class, message, version)
stat_time('run', NOW - record.started_ms)
stat_count('failures')
record.error = { class = class, message = message }
append_log(number, record.attempt, log_text)
local retry = retryable and record.attempt < record.max_attempts and not record.cancel_requested_ms
-- (A sequence's job keeps its group's slot through the backoff: the next job of the group
-- must not overtake it.)
GROUP.unlease(number, record, retry)

if retry then
  -- The token stays until the next lease: it says which lease's report scheduled the retry.
  record.worker, record.lease_until_ms, record.unconfirmed = nil, nil, nil
  stat_count('retries')
  make_scheduled(number, record, NOW + backoff_ms)
  save(number, record)
  publish({ event = 'retry', id = id_of(number), attempt = record.attempt, at_ms = NOW + backoff_ms })
  return { 1, 'scheduled', {} }
end

local state = 'failed'
if class == 'cancelled' or record.cancel_requested_ms then state = 'cancelled' end
finish(number, record, state, record.error, K.leased)
record.token = token
save(number, record)
settle()
return { 1, state, NOTIFY }
