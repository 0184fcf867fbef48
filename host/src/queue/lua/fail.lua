-- fail: record a leased job's failure; retry it later or fail it for good, exactly once.
--
-- Fenced by the lease token like `complete`. A retryable failure with attempts left puts
-- the job back as `scheduled` after the backoff; otherwise the job ends `failed` (or
-- `cancelled`, for class `cancelled` or when a client asked for cancellation), keeping its
-- error and attempt history.
--
-- KEYS[1]  wg:{F}:jobs       hash    number -> job record (JSON)
-- KEYS[2]  wg:{F}:leased     zset    number scored by lease expiry (ms)
-- KEYS[3]  wg:{F}:scheduled  zset    number scored by ready time (ms)
-- KEYS[4]  wg:{F}:expires    zset    number scored by deletion time (ms)
-- KEYS[5]  wg:{F}:events     channel
-- KEYS[6]  wg:{F}:logs       hash    number -> the job's log (text, newest 256 KiB)
--
-- ARGV[1]  function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  error class (`guest-error`, `trap`, `timed-out`, ...), the failure group
-- ARGV[5]  error message
-- ARGV[6]  1 if another attempt may succeed, else 0
-- ARGV[7]  backoff before the next attempt, ms (chosen by the caller, jitter included)
-- ARGV[8]  this attempt's log lines (text, may be empty)
-- ARGV[9]  the version (content hash) of the plugin that ran the attempt ('' if unknown)
--
-- Returns: {1, state} when accepted, state 'scheduled' (will retry), 'failed' or
--          'cancelled'; {0, reason} when refused ('missing' or 'stale').
-- Publishes: `finish` with the final state when the job ends; `retry` when it will run again.

local jobs_key, leased_key, scheduled_key, expires_key, channel, logs_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local fn, number, token = ARGV[1], ARGV[2], ARGV[3]
local class, message, retryable, backoff_ms = ARGV[4], ARGV[5], ARGV[6] == '1', tonumber(ARGV[7])
local log_text, version = ARGV[8], ARGV[9]

-- Appends this attempt's log to the job's log, keeping at most MAX_LOG bytes (the newest).
local MAX_LOG = 262144
local function append_log(logs_key, number, attempt, text)
  if text == '' then return end
  local log = (redis.call('HGET', logs_key, number) or '') .. '--- attempt ' .. attempt .. ' ---\n' .. text
  if #log > MAX_LOG then log = string.sub(log, #log - MAX_LOG + 1) end
  redis.call('HSET', logs_key, number, log)
end


local raw = redis.call('HGET', jobs_key, number)
if not raw then return { 0, 'missing' } end
local record = cjson.decode(raw)
if record.state ~= 'running' or record.token ~= token then return { 0, 'stale' } end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = fn .. ':' .. number

local history = record.history or {}
history[#history + 1] = {
  attempt = record.attempt, worker = record.worker, started_ms = record.started_ms,
  ended_ms = now, outcome = class, message = message, version = version,
}
record.history = history
record.error = { class = class, message = message }
append_log(logs_key, number, record.attempt, log_text)
record.worker, record.token, record.lease_until_ms = nil, nil, nil
redis.call('ZREM', leased_key, number)

if retryable and record.attempt < record.max_attempts and not record.cancel_requested_ms then
  record.state = 'scheduled'
  record.run_at_ms = now + backoff_ms
  redis.call('ZADD', scheduled_key, now + backoff_ms, number)
  redis.call('HSET', jobs_key, number, cjson.encode(record))
  redis.call('PUBLISH', channel, cjson.encode({ event = 'retry', id = id, attempt = record.attempt, at_ms = now + backoff_ms }))
  return { 1, 'scheduled' }
end

if class == 'cancelled' or record.cancel_requested_ms then record.state = 'cancelled' else record.state = 'failed' end
record.finished_ms = now
redis.call('HSET', jobs_key, number, cjson.encode(record))
redis.call('ZADD', expires_key, now + record.retention_ms, number)
redis.call('PUBLISH', channel, cjson.encode({ event = 'finish', id = id, state = record.state }))
return { 1, record.state }
