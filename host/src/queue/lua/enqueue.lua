-- enqueue: add one or more jobs for one function, atomically.
--
-- KEYS[1]  wg:{F}:seq        string  last job number handed out
-- KEYS[2]  wg:{F}:jobs       hash    number -> job record (JSON)
-- KEYS[3]  wg:{F}:input      hash    number -> input bytes
-- KEYS[4]  wg:{F}:ready      zset    number scored by priority, then number
-- KEYS[5]  wg:{F}:scheduled  zset    number scored by the time it becomes ready (ms)
-- KEYS[6]  wg:{F}:events     channel (not a key; named here so one place builds it)
--
-- ARGV[1]  function name
-- ARGV[2]  n, how many jobs follow; then for each job i (0-based), at 3 + 7*i:
--   +0 priority       integer -1000..1000, higher runs first
--   +1 max attempts   integer >= 1; 0: the serving plugin's default, fixed at the first lease
--   +2 timeout        ms the job may run; 0: the serving plugin's default
--   +3 retention      ms the finished job's record is kept
--   +4 delay          ms before the job may run (0: ready now)
--   +5 at             ms since the epoch (Redis clock) before which the job may not run;
--                     0: none. Must not be in the past.
--   +6 input          bytes
--
-- Returns: array of the new job numbers, in the order given; or the error reply
--          `BADJOB job I: scheduled time ... is in the past ...`, having written nothing.
-- Publishes: {"event":"create","id":"F:N"} on KEYS[6] for each job.

local seq_key, jobs_key, input_key, ready_key, scheduled_key, channel =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local fn = ARGV[1]
local n = tonumber(ARGV[2])

-- Priority is the high part of the ready score and the job number the low part, so
-- ZPOPMIN takes the highest priority first and, within a priority, the oldest job.
local PRIORITY_BASE = 1000
local NUMBER_SPAN = 1099511627776 -- 2^40

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Check every job before writing anything, so a batch is all or nothing.
for i = 0, n - 1 do
  local at = tonumber(ARGV[3 + 7 * i + 5])
  if at > 0 and at < now then
    return redis.error_reply(string.format(
      'BADJOB job %d: scheduled time %d is in the past (the queue clock says %d)', i + 1, at, now))
  end
end

local numbers = {}
for i = 0, n - 1 do
  local a = 3 + 7 * i
  local priority = tonumber(ARGV[a])
  local run_at = now + tonumber(ARGV[a + 4])
  local at = tonumber(ARGV[a + 5])
  if at > run_at then run_at = at end
  local number = redis.call('INCR', seq_key)
  local record = {
    state = 'queued',
    priority = priority,
    attempt = 0,
    max_attempts = tonumber(ARGV[a + 1]),
    timeout_ms = tonumber(ARGV[a + 2]),
    retention_ms = tonumber(ARGV[a + 3]),
    created_ms = now,
  }
  if run_at > now then
    record.state = 'scheduled'
    record.run_at_ms = run_at
    redis.call('ZADD', scheduled_key, run_at, number)
  else
    redis.call('ZADD', ready_key, (PRIORITY_BASE - priority) * NUMBER_SPAN + number, number)
  end
  redis.call('HSET', jobs_key, number, cjson.encode(record))
  redis.call('HSET', input_key, number, ARGV[a + 6])
  redis.call('PUBLISH', channel, cjson.encode({ event = 'create', id = fn .. ':' .. number }))
  numbers[#numbers + 1] = number
end
return numbers
