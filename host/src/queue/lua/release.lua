-- release: hand a leased job back unrun (the worker is shutting down), without counting
-- the attempt. The job goes back to the ready set at its old place.
--
-- A job whose cancellation was asked for is not handed back: it ends `cancelled`.
--
-- KEYS[1]  wg:{F}:jobs     hash     number -> job record (JSON)
-- KEYS[2]  wg:{F}:leased   zset     number scored by lease expiry (ms)
-- KEYS[3]  wg:{F}:ready    zset     number scored by priority, then number
-- KEYS[4]  wg:{F}:expires  zset     number scored by deletion time (ms)
-- KEYS[5]  wg:{F}:events   channel
--
-- ARGV[1]  function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
--
-- Returns: {1, 'queued'} when handed back, {1, 'cancelled'} when it ended cancelled;
--          {0, 'stale'} / {0, 'missing'} when the token does not hold the job's lease.

local jobs_key, leased_key, ready_key, expires_key, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local fn, number, token = ARGV[1], ARGV[2], ARGV[3]

local PRIORITY_BASE = 1000
local NUMBER_SPAN = 1099511627776 -- 2^40

local raw = redis.call('HGET', jobs_key, number)
if not raw then return { 0, 'missing' } end
local record = cjson.decode(raw)
if record.state ~= 'running' or record.token ~= token then return { 0, 'stale' } end
redis.call('ZREM', leased_key, number)

if record.cancel_requested_ms then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  record.state = 'cancelled'
  record.finished_ms = now
  record.worker, record.token, record.lease_until_ms = nil, nil, nil
  record.error = { class = 'cancelled', message = 'cancelled while running' }
  redis.call('HSET', jobs_key, number, cjson.encode(record))
  redis.call('ZADD', expires_key, now + record.retention_ms, number)
  redis.call('PUBLISH', channel, cjson.encode({ event = 'finish', id = fn .. ':' .. number, state = 'cancelled' }))
  return { 1, 'cancelled' }
end

record.state = 'queued'
record.attempt = record.attempt - 1
record.worker, record.token, record.lease_until_ms, record.started_ms = nil, nil, nil, nil
record.progress = nil
redis.call('HSET', jobs_key, number, cjson.encode(record))
redis.call('ZADD', ready_key, (PRIORITY_BASE - record.priority) * NUMBER_SPAN + tonumber(number), number)
return { 1, 'queued' }
