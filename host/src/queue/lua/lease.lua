-- lease: hand up to N runnable jobs of one function to a worker, atomically.
--
-- On the way it (1) deletes finished jobs whose retention is over, (2) moves scheduled jobs
-- that are due to the ready set, and (3) reclaims jobs whose lease expired (their worker
-- died): back to ready while attempts remain, else failed for good with class `lease-lost`
-- (or cancelled, if a client asked for that while it ran).
--
-- KEYS[1]  wg:{F}:ready      zset    number scored by priority, then number
-- KEYS[2]  wg:{F}:scheduled  zset    number scored by ready time (ms)
-- KEYS[3]  wg:{F}:leased     zset    number scored by lease expiry (ms)
-- KEYS[4]  wg:{F}:jobs       hash    number -> job record (JSON)
-- KEYS[5]  wg:{F}:input      hash    number -> input bytes
-- KEYS[6]  wg:{F}:output     hash    number -> output bytes
-- KEYS[7]  wg:{F}:expires    zset    number scored by deletion time (ms)
-- KEYS[8]  wg:{F}:events     channel
-- KEYS[9]  wg:{F}:logs       hash    number -> the job's log
--
-- ARGV[1]  function name
-- ARGV[2]  worker id (recorded on the job)
-- ARGV[3]  token prefix, unique per call; each lease's token is PREFIX:NUMBER:ATTEMPT
-- ARGV[4]  the most jobs to lease (>= 1)
-- ARGV[5]  lease duration, ms
-- ARGV[6]  timeout (ms) given to jobs enqueued without one (the serving plugin's default)
-- ARGV[7]  attempts given to jobs enqueued without a number (the plugin's default)
--
-- Returns: {leases, wait_ms}: leases is an array, each {number, attempt, max_attempts,
--          timeout_ms, created_ms, token, input}; wait_ms is how long until the next
--          scheduled job falls due or the next lease expires (-1: nothing pending), so an
--          idle worker knows when to call again.
-- Publishes: `start` for each leased job, `finish` for each job failed by reclaim.

local ready_key, scheduled_key, leased_key, jobs_key, input_key, output_key, expires_key, channel, logs_key =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local fn, worker, token_prefix = ARGV[1], ARGV[2], ARGV[3]
local want, lease_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local default_timeout_ms, default_max_attempts = tonumber(ARGV[6]), tonumber(ARGV[7])

local PRIORITY_BASE = 1000
local NUMBER_SPAN = 1099511627776 -- 2^40
local BATCH = 100

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function make_ready(number, record)
  redis.call('ZADD', ready_key, (PRIORITY_BASE - record.priority) * NUMBER_SPAN + tonumber(number), number)
end

-- (1) Forget finished jobs whose retention is over.
for _, number in ipairs(redis.call('ZRANGEBYSCORE', expires_key, '-inf', now, 'LIMIT', 0, BATCH)) do
  redis.call('HDEL', jobs_key, number)
  redis.call('HDEL', input_key, number)
  redis.call('HDEL', output_key, number)
  redis.call('HDEL', logs_key, number)
  redis.call('ZREM', expires_key, number)
end

-- (2) Promote scheduled jobs that are due.
for _, number in ipairs(redis.call('ZRANGEBYSCORE', scheduled_key, '-inf', now, 'LIMIT', 0, BATCH)) do
  redis.call('ZREM', scheduled_key, number)
  local raw = redis.call('HGET', jobs_key, number)
  if raw then
    local record = cjson.decode(raw)
    record.state = 'queued'
    record.run_at_ms = nil
    redis.call('HSET', jobs_key, number, cjson.encode(record))
    make_ready(number, record)
  end
end

-- (3) Reclaim jobs whose worker stopped renewing the lease (a job whose cancellation was
--     asked for ends cancelled instead).
for _, number in ipairs(redis.call('ZRANGEBYSCORE', leased_key, '-inf', now, 'LIMIT', 0, BATCH)) do
  redis.call('ZREM', leased_key, number)
  local raw = redis.call('HGET', jobs_key, number)
  if raw then
    local record = cjson.decode(raw)
    local history = record.history or {}
    history[#history + 1] = {
      attempt = record.attempt, worker = record.worker, started_ms = record.started_ms,
      ended_ms = now, outcome = 'lease-lost',
    }
    record.history = history
    record.worker, record.token, record.lease_until_ms = nil, nil, nil
    if record.cancel_requested_ms then
      record.state = 'cancelled'
      record.finished_ms = now
      record.error = { class = 'cancelled', message = 'cancelled while running; its worker stopped renewing its lease' }
      redis.call('ZADD', expires_key, now + record.retention_ms, number)
      redis.call('PUBLISH', channel, cjson.encode({ event = 'finish', id = fn .. ':' .. number, state = 'cancelled' }))
    elseif record.attempt < record.max_attempts then
      record.state = 'queued'
      make_ready(number, record)
    else
      record.state = 'failed'
      record.finished_ms = now
      record.error = { class = 'lease-lost', message = 'the worker running the job stopped renewing its lease' }
      redis.call('ZADD', expires_key, now + record.retention_ms, number)
      redis.call('PUBLISH', channel, cjson.encode({ event = 'finish', id = fn .. ':' .. number, state = 'failed' }))
    end
    redis.call('HSET', jobs_key, number, cjson.encode(record))
  end
end

-- (4) Lease the best ready jobs.
local leases = {}
local popped = redis.call('ZPOPMIN', ready_key, want)
-- ZPOPMIN answers member, score, member, score, ...
for i = 1, #popped, 2 do
  local number = popped[i]
  local raw = redis.call('HGET', jobs_key, number)
  if raw then
    local record = cjson.decode(raw)
    -- 0 means "the function's default": the first worker to lease the job fixes it.
    if record.timeout_ms == 0 then record.timeout_ms = default_timeout_ms end
    if record.max_attempts == 0 then record.max_attempts = default_max_attempts end
    record.state = 'running'
    record.attempt = record.attempt + 1
    record.started_ms = now
    record.worker = worker
    record.token = token_prefix .. ':' .. number .. ':' .. record.attempt
    record.lease_until_ms = now + lease_ms
    record.progress = nil
    redis.call('HSET', jobs_key, number, cjson.encode(record))
    redis.call('ZADD', leased_key, now + lease_ms, number)
    redis.call('PUBLISH', channel, cjson.encode({ event = 'start', id = fn .. ':' .. number, attempt = record.attempt }))
    leases[#leases + 1] = {
      tonumber(number), record.attempt, record.max_attempts, record.timeout_ms, record.created_ms,
      record.token, redis.call('HGET', input_key, number) or '',
    }
  end
end
-- (5) Tell the caller when to come back.
local next_due = -1
for _, key in ipairs({ scheduled_key, leased_key }) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 then
    local due = tonumber(first[2])
    if next_due < 0 or due < next_due then next_due = due end
  end
end
local wait_ms = -1
if next_due >= 0 then wait_ms = math.max(0, next_due - now) end
return { leases, wait_ms }
