-- complete: store a leased job's output and mark it succeeded, exactly once.
--
-- Fenced by the lease token: a worker that no longer holds the lease (it expired and the
-- job was reclaimed, or the job was already finished) is refused and changes nothing.
--
-- KEYS[1]  wg:{F}:jobs     hash    number -> job record (JSON)
-- KEYS[2]  wg:{F}:leased   zset    number scored by lease expiry (ms)
-- KEYS[3]  wg:{F}:output   hash    number -> output bytes
-- KEYS[4]  wg:{F}:expires  zset    number scored by deletion time (ms)
-- KEYS[5]  wg:{F}:events   channel
-- KEYS[6]  wg:{F}:logs     hash    number -> the job's log (text, newest 256 KiB)
--
-- ARGV[1]  function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  output bytes
-- ARGV[5]  this attempt's log lines (text, may be empty)
-- ARGV[6]  the version (content hash) of the plugin that ran the attempt ('' if unknown)
--
-- Returns: {1, 'succeeded'} when accepted; {0, reason} when refused, reason one of
--          'missing' (no such job) or 'stale' (the token does not hold the job's lease).
-- Publishes: {"event":"finish","id":"F:N","state":"succeeded"}.

local jobs_key, leased_key, output_key, expires_key, channel, logs_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local fn, number, token, output, log_text = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local version = ARGV[6]

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

local history = record.history or {}
history[#history + 1] = {
  attempt = record.attempt, worker = record.worker, started_ms = record.started_ms,
  ended_ms = now, outcome = 'succeeded', version = version,
}
record.history = history
record.state = 'succeeded'
record.finished_ms = now
record.error = nil
record.worker, record.token, record.lease_until_ms = nil, nil, nil
redis.call('HSET', jobs_key, number, cjson.encode(record))
redis.call('HSET', output_key, number, output)
append_log(logs_key, number, record.attempt, log_text)
redis.call('ZREM', leased_key, number)
redis.call('ZADD', expires_key, now + record.retention_ms, number)
redis.call('PUBLISH', channel, cjson.encode({ event = 'finish', id = fn .. ':' .. number, state = 'succeeded' }))
return { 1, 'succeeded' }
