-- lease: hand up to N runnable jobs of one function to a worker, atomically.
--
-- On the way it (1) forgets finished jobs whose retention is over (and the oldest beyond the
-- function's cap), (2) moves scheduled jobs that are due to the ready set, and (3) reclaims
-- jobs whose lease expired (their worker died): back to ready while attempts remain, else
-- failed for good with class `lease-lost` (or cancelled, if a client asked for that while
-- it ran). Then (4) it leases the best ready jobs, unless the function is paused, within
-- the function's concurrency cap (jobs running at once, over all workers) and rate limit
-- (leases per interval, over all workers).
--
-- KEYS: the function's keys (lib.lua). ARGV[1]: the function name.
-- ARGV[2]  worker id (recorded on the job)
-- ARGV[3]  token prefix, unique per call; each lease's token is PREFIX:NUMBER:ATTEMPT. It is
--          also the call's id: the same call sent again within 10 minutes (its reply was
--          lost) gets the leases of the first call that it still holds, and leases nothing new
-- ARGV[4]  the most jobs to lease (>= 1)
-- ARGV[5]  lease duration, ms
-- ARGV[6]  timeout (ms) given to jobs enqueued without one (the serving plugin's default)
-- ARGV[7]  attempts given to jobs enqueued without a number (the plugin's default)
--
-- A lease counts as an attempt once the worker shows it has the job (a heartbeat, progress
-- or a result). A lease that expires unconfirmed (its reply never reached the worker, or
-- the worker died at once) gives its attempt back, at most max_attempts times per job.
--
-- Returns: {leases, wait_ms, capped, notify}: leases is an array, each {number, attempt,
--          max_attempts, timeout_ms, created_ms, token, input}; wait_ms is how long until
--          the next scheduled job falls due, lease expires or rate-limit slot frees (-1:
--          nothing pending), so an idle worker knows when to call again; capped is 1 when
--          the concurrency cap held back ready jobs (call again when a job finishes);
--          notify lists dependents in other functions to tell (see lib.lua).
-- Publishes: `start` for each leased job, `finish` for each job ended by reclaim.

local worker, token_prefix = ARGV[2], ARGV[3]
local want, lease_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
local default_timeout_ms, default_max_attempts = tonumber(ARGV[6]), tonumber(ARGV[7])

-- The same call again: the leases it made that are still held, and nothing more.
local replay = remembered(token_prefix)
if replay then
  local leases = {}
  for number in string.gmatch(replay, '%d+') do
    local record = load(number)
    if record and record.state == 'running'
      and record.token == token_prefix .. ':' .. number .. ':' .. int(record.attempt) then
      leases[#leases + 1] = {
        tonumber(number), record.attempt, record.max_attempts, record.timeout_ms, record.created_ms,
        record.token, redis.call('HGET', K.input, number) or '',
      }
    end
  end
  return { leases, 0, 0, {} }
end

-- (1) Forget finished jobs whose retention is over.
forget_expired()

-- The earliest score of a sorted set (ms), or nil when it is empty.
local function first_due(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 then return tonumber(first[2]) end
  return nil
end

-- (2) Promote scheduled jobs that are due (looked for only when the earliest is).
local scheduled_due = first_due(K.scheduled)
if scheduled_due and scheduled_due <= NOW then
  for _, number in ipairs(redis.call('ZRANGEBYSCORE', K.scheduled, '-inf', int(NOW), 'LIMIT', '0', int(BATCH))) do
    redis.call('ZREM', K.scheduled, number)
    local record = load(number)
    if record then
      make_ready(number, record)
      save(number, record)
    end
  end
  scheduled_due = first_due(K.scheduled)
end

-- (3) Reclaim jobs whose worker stopped renewing the lease (when the earliest lease has
-- expired).
local leased_due = first_due(K.leased)
local expired = {}
if leased_due and leased_due <= NOW then
  expired = redis.call('ZRANGEBYSCORE', K.leased, '-inf', int(NOW), 'LIMIT', '0', int(BATCH))
end
for _, number in ipairs(expired) do
  redis.call('ZREM', K.leased, number)
  local record = load(number)
  if record then
    stat_count('failures')
    local unconfirmed = record.unconfirmed and (record.given_back or 0) < record.max_attempts
    if unconfirmed then
      add_history(record, 'lease-lost', 'the worker never confirmed the lease; the attempt is not counted', nil)
      record.attempt = record.attempt - 1
      record.given_back = (record.given_back or 0) + 1
    else
      add_history(record, 'lease-lost', nil, nil)
    end
    record.unconfirmed = nil
    if record.cancel_requested_ms then
      finish(number, record, 'cancelled',
        { class = 'cancelled', message = 'cancelled while running; its worker stopped renewing its lease' })
    elseif unconfirmed or record.attempt < record.max_attempts then
      record.worker, record.token, record.lease_until_ms = nil, nil, nil
      stat_count('retries')
      make_ready(number, record)
      save(number, record)
    else
      finish(number, record, 'failed',
        { class = 'lease-lost', message = 'the worker running the job stopped renewing its lease' })
    end
  end
end
if #expired > 0 then leased_due = first_due(K.leased) end
if #SETTLE > 0 then
  settle()
  scheduled_due = first_due(K.scheduled) -- a dependent may have been scheduled
end

-- (4) Lease the best ready jobs, as far as pause, cap and rate limit allow.
local allowed = want
local capped = 0
local rate_wait = -1
if config('paused') == '1' then allowed = 0 end
local cap = tonumber(config('concurrency') or '0')
if cap > 0 and allowed > 0 then
  local room = cap - redis.call('ZCARD', K.leased)
  if room < allowed then
    allowed = math.max(room, 0)
    if redis.call('ZCARD', K.ready) > allowed then capped = 1 end
  end
end
local rate_limit = tonumber(config('rate_limit') or '0')
local rate_interval = tonumber(config('rate_interval_ms') or '0')
if rate_limit > 0 and rate_interval > 0 then
  redis.call('ZREMRANGEBYSCORE', K.rate, '-inf', NOW - rate_interval)
  local room = rate_limit - redis.call('ZCARD', K.rate)
  if room < allowed then
    allowed = math.max(room, 0)
    if redis.call('ZCARD', K.ready) > allowed then
      local oldest = redis.call('ZRANGE', K.rate, 0, 0, 'WITHSCORES')
      if #oldest > 0 then rate_wait = math.max(0, tonumber(oldest[2]) + rate_interval - NOW) end
    end
  end
end

local leases = {}
local waits = {}
if allowed > 0 then
  local popped = redis.call('ZPOPMIN', K.ready, int(allowed))
  -- ZPOPMIN answers member, score, member, score, ...
  local numbers = {}
  for i = 1, #popped, 2 do numbers[#numbers + 1] = popped[i] end
  -- One call per key for all the jobs, not one per job.
  local records = load_many(numbers)
  local inputs = {}
  if #numbers > 0 then inputs = redis.call('HMGET', K.input, unpack(numbers)) end
  local saves, leased, rated = {}, {}, {}
  local lease_until, now = int(NOW + lease_ms), int(NOW)
  for i, number in ipairs(numbers) do
    local record = records[number]
    if record then
      -- 0 means "the function's default": the first worker to lease the job fixes it.
      if record.timeout_ms == 0 then record.timeout_ms = default_timeout_ms end
      if record.max_attempts == 0 then
        record.max_attempts = record.attempt + default_max_attempts
        record.default_attempts = true
      end
      waits[#waits + 1] = NOW - (record.ready_ms or record.created_ms)
      record.state = 'running'
      record.ready_ms = nil
      record.attempt = record.attempt + 1
      record.started_ms = NOW
      record.worker = worker
      record.token = token_prefix .. ':' .. number .. ':' .. int(record.attempt)
      record.lease_until_ms = NOW + lease_ms
      record.unconfirmed = true
      record.progress = nil
      saves[#saves + 1] = number
      saves[#saves + 1] = cjson.encode(record)
      leased[#leased + 1] = lease_until
      leased[#leased + 1] = number
      rated[#rated + 1] = now
      rated[#rated + 1] = record.token
      -- The `start` event, built without cjson: it is sent for every job.
      redis.call('PUBLISH', K.events,
        '{"event":"start","id":"' .. FN .. ':' .. number .. '","attempt":' .. int(record.attempt) .. '}')
      leases[#leases + 1] = {
        tonumber(number), record.attempt, record.max_attempts, record.timeout_ms, record.created_ms,
        record.token, inputs[i] or '',
      }
    end
  end
  call_chunked('HSET', K.jobs, saves)
  call_chunked('ZADD', K.leased, leased)
  remember(token_prefix, table.concat(numbers, ','))
  if rate_limit > 0 and rate_interval > 0 then call_chunked('ZADD', K.rate, rated) end
end

stat_times('wait', waits)

-- (5) Tell the caller when to come back.
-- The leases just made expire NOW + lease_ms, no earlier than those before them.
if #leases > 0 and (not leased_due or NOW + lease_ms < leased_due) then leased_due = NOW + lease_ms end
local next_due = -1
for _, due in ipairs({ scheduled_due or -1, leased_due or -1 }) do
  if due >= 0 and (next_due < 0 or due < next_due) then next_due = due end
end
local wait_ms = -1
if next_due >= 0 then wait_ms = math.max(0, next_due - NOW) end
if rate_wait >= 0 and (wait_ms < 0 or rate_wait < wait_ms) then wait_ms = rate_wait end
return { leases, wait_ms, capped, NOTIFY }
