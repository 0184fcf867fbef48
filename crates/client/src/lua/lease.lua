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
-- KEYS: jobs input output logs ready scheduled leased waiting expires uniq tagged failed counts stats config rate events work calls calls_exp idle idle_args
-- ARGV[1]  the function name
-- ARGV[2]  worker id (recorded on the job)
-- ARGV[3]  token prefix, unique per call; each lease's token is PREFIX:NUMBER:ATTEMPT. It is
--          also the call's id: the same call sent again within 10 minutes (its reply was
--          lost) gets the leases of the first call that it still holds, and leases nothing new
-- ARGV[4]  the most jobs to lease (>= 1)
-- ARGV[5]  lease duration, ms
-- ARGV[6]  timeout (ms) given to jobs enqueued without one (the serving plugin's default)
-- ARGV[7]  attempts given to jobs enqueued without a number (the plugin's default)
-- ARGV[8]  optional: a pub/sub channel of the worker's own. When the call leases nothing,
--          the worker is registered as idle: the next jobs enqueued are leased to it as this
--          call would have (this call's id is their token prefix), and each lease is
--          published on the channel as `lease FUNCTION ROW` + '\n' + input, ROW as below
--          (lib.lua, "Idle workers handed jobs directly"). Any lease call by the worker
--          takes it out first.
-- ARGV[9]  with ARGV[8]: how long the registration lasts, ms (the worker calls again
--          before then while it is idle)
--
-- A lease counts as an attempt once the worker shows it has the job (a heartbeat, progress
-- or a result). A lease that expires unconfirmed (its reply never reached the worker, or
-- the worker died at once) gives its attempt back, at most max_attempts times per job.
--
-- Returns: {leases, wait_ms, capped, notify}: leases is a flat array of two entries per
--          leased job: 'NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN' (decimal
--          numbers; the token is last and holds no '|'), then its input; wait_ms is, when fewer jobs were leased than asked for, how long
--          until the next scheduled job falls due, lease expires or rate-limit slot frees
--          (-1: nothing pending), so an idle worker knows when to call again (0 when as
--          many were leased as asked for: there may be more); capped is 1 when
--          the concurrency cap held back ready jobs (call again when a job finishes);
--          notify lists dependents in other functions to tell (see lib.lua).
-- Publishes: `start` for each leased job, `finish` for each job ended by reclaim.

local token_prefix = ARGV[3]
if (#ARGV ~= 7 and #ARGV ~= 9) or not (tonumber(ARGV[4]) and tonumber(ARGV[5]) and tonumber(ARGV[6]) and tonumber(ARGV[7])) then
  return redis.error_reply('BADARGS lease: it takes a worker id, a call id, then a count, a lease duration and two defaults, all numbers; optionally a channel and how long to wait on it')
end
if not (fits_call_id(token_prefix) and fits_call_id(ARGV[2])) then
  return redis.error_reply('BADARGS lease: ' .. CALL_ID_RULE)
end
local channel, hold_ms = ARGV[8], tonumber(ARGV[9])
if channel and (channel == '' or not fits_call_id(channel) or not hold_ms or hold_ms < 1) then
  return redis.error_reply('BADARGS lease: the channel must be a name without "|" and the wait a number of ms >= 1')
end
idle_leave(ARGV[2])

-- The same call again: the leases it made that are still held, and nothing more.
local replay = remembered(token_prefix)
if replay then return { held_leases(token_prefix, replay), 0, 0, {} } end

local leases, wait_ms, capped, numbers = lease_jobs(ARGV[2], token_prefix, tonumber(ARGV[4]),
  tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]))
if numbers then
  remember(token_prefix, numbers)
elseif channel then
  idle_join(ARGV[2], token_prefix, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]),
    tonumber(ARGV[7]), channel, hold_ms)
end
return { leases, wait_ms, capped, NOTIFY }
