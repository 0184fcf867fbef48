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
-- KEYS: jobs input output logs ready scheduled leased waiting expires uniq tagged failed counts stats config rate events work calls calls_exp idle idle_args ticks groups group_ready group_running group_config group_rate group_wait dedup dedup_exp expiring checkpoints
-- ARGV[1]  the function name
-- ARGV[2]  worker id (recorded on the job)
-- ARGV[3]  token prefix, unique per call; each lease's token is PREFIX:NUMBER:ATTEMPT. It is
--          also the call's id: the same call sent again within 10 minutes (its reply was
--          lost) gets the leases of the first call that it still holds, and leases nothing new
-- ARGV[4]  the most jobs to lease, 0..MAX_CONCURRENCY (not counting ARGV[12])
-- ARGV[5]  lease duration, ms
-- ARGV[6]  timeout (ms) given to jobs enqueued without one (the serving plugin's default)
-- ARGV[7]  attempts given to jobs enqueued without a number (the plugin's default)
-- ARGV[8]  optional, with ARGV[9..12]: a pub/sub channel of the worker's own ('' to register
--          nothing, only replace). When the call leases nothing, the worker is registered as
--          idle: the next jobs enqueued are
--          leased to it as this call would have (this call's id is their token prefix; at
--          most ARGV[10] of them: the slots the worker keeps free for them), and each lease
--          is published on the channel as `lease FUNCTION COUNT ROW` + '\n' + input, COUNT
--          the jobs that hand-off gave, ROW as below (lib.lua, "Idle workers handed jobs
--          directly"). Any lease call by the worker on this function takes its
--          registration out first.
-- ARGV[9]  how long the registration lasts, ms (the worker calls again before then while it
--          is idle)
-- ARGV[10] how many of ARGV[4]'s slots the worker keeps for the registration
-- ARGV[11] the call id of the worker's registration on this function that this call
--          replaces ('' for none), and
-- ARGV[12] the slots kept for it: when it is still there unused, they come back to this
--          call (added to ARGV[4] and ARGV[10]); when it was used or lapsed they stay with
--          its hand-off
--
-- A lease counts as an attempt once the worker shows it has the job (a heartbeat, progress
-- or a result). A lease that expires unconfirmed (its reply never reached the worker, or
-- the worker died before the job started) gives its attempt back: it neither counts nor
-- fails the job (`given_back` counts how often).
--
-- Every argument is checked before anything is written; a refused call changes nothing.
--
-- Returns: {leases, wait_ms, capped, notify, withdrawn}: leases is a flat array of two entries per
--          leased job: 'NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN' (decimal
--          numbers; the token is last and holds no '|'), then its input; wait_ms is, when fewer jobs were leased than asked for, how long
--          until the next scheduled job falls due, lease expires or rate-limit slot frees
--          (-1: nothing pending), so an idle worker knows when to call again (0 when as
--          many were leased as asked for: there may be more); capped is 1 when
--          the concurrency cap held back ready jobs (call again when a job finishes);
--          notify lists dependents in other functions to tell (see lib.lua); withdrawn is
--          the call id of the worker's registration on this function that this call took
--          out before it was used ('' when there was none: it lapsed or was handed jobs,
--          whose messages may still be on their way), so the worker knows which slots it
--          kept for it are free again.
-- Publishes: `start` for each leased job, `finish` for each job ended by reclaim.

local token_prefix = ARGV[3]
if #ARGV ~= 7 and #ARGV ~= 12 then
  return redis.error_reply('BADARGS lease: it takes a worker id, a call id, then a count, a lease duration and two defaults, all numbers; optionally a channel, how long to stay registered on it, how many slots, and the registration it replaces with its slots')
end
local want, lease_ms = whole(ARGV[4], 0, MAX_CONCURRENCY), whole(ARGV[5], 1, MAX_DURATION_MS)
local timeout_ms, attempts = whole(ARGV[6], 1, MAX_DURATION_MS), whole(ARGV[7], 1, MAX_ATTEMPTS)
if not (want and lease_ms and timeout_ms and attempts) then
  return redis.error_reply(string.format('BADARGS lease: the count must be 0..%d, the lease and the default timeout 1..%d ms, the default attempts 1..%d (whole numbers)',
    MAX_CONCURRENCY, MAX_DURATION_MS, MAX_ATTEMPTS))
end
if not (fits_call_id(token_prefix) and fits_call_id(ARGV[2]) and token_prefix ~= '' and ARGV[2] ~= '') then
  return redis.error_reply('BADARGS lease: ' .. CALL_ID_RULE)
end
local channel, hold_ms, slots = ARGV[8], whole(ARGV[9] or '', 1, MAX_DURATION_MS), whole(ARGV[10] or '', 0, MAX_CONCURRENCY)
local replaces, replaced_slots = ARGV[11], whole(ARGV[12] or '', 0, MAX_CONCURRENCY)
if channel and (not fits_call_id(channel) or not hold_ms or not slots or not replaced_slots
  or not fits_call_id(replaces) or want + replaced_slots > MAX_CONCURRENCY) then
  return redis.error_reply('BADARGS lease: the channel must be a name without "|", the wait a whole number of ms >= 1, the slots and replaced slots whole numbers (their sum with the count at most '
    .. MAX_CONCURRENCY .. '), the replaced registration a call id')
end

-- The same call again: the leases it made that are still held, and nothing more.
local replay = remembered(token_prefix)
if replay then return { held_leases(token_prefix, replay), 0, 0, {}, '' } end

-- The worker's registration on this function goes first; the slots it kept for it come
-- back to this call when it was not used.
local withdrawn = idle_leave(ARGV[2]) or ''
if replaces and replaces ~= '' and withdrawn == replaces then
  want = want + replaced_slots
  slots = slots + replaced_slots
end
-- (With a count of 0, the housekeeping and the wait are still worth having.)
local leases, wait_ms, capped, numbers = lease_jobs(ARGV[2], token_prefix, want, lease_ms, timeout_ms, attempts)
-- Jobs reclaimed and left ready for lack of slots here: the other workers are told.
if RECLAIMED > #leases / 2 then wake_workers() end
if numbers then
  remember(token_prefix, numbers)
elseif channel and channel ~= '' and slots > 0 then
  idle_join(ARGV[2], token_prefix, slots, lease_ms, timeout_ms, attempts, channel, hold_ms)
end
return { leases, wait_ms, capped, NOTIFY, withdrawn }
