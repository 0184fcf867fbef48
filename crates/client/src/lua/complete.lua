-- complete: store leased jobs' outputs and mark them succeeded, each exactly once. One call
-- may complete many jobs of the function (a worker batches the jobs that end together).
--
-- Fenced by the lease token: a worker that no longer holds a job's lease (it expired and the
-- job was reclaimed, or the job was already finished) is refused for that job, which
-- changes nothing. Jobs waiting on a completed job run once their other dependencies have
-- succeeded too.
--
-- KEYS: the function's keys (lib.lua). ARGV[1]: the function name.
-- ARGV[2]  n, how many jobs follow; then for each job i (0-based), at 3 + 5*i:
--   +0 job number
--   +1 lease token
--   +2 output bytes
--   +3 this attempt's log lines (text, may be empty)
--   +4 the version (content hash) of the plugin that ran the attempt ('' if unknown)
--
-- Then, optionally, at b = 3 + 5*n (the next jobs, leased in the same call: at steady state
-- a worker's only round trip per job):
--   b+0 call id: the token prefix of the leases made, as `lease` ARGV[3]. The same call sent
--       again within 10 minutes (its reply was lost) is answered as the first was: the same
--       results, and the leases it made that are still held
--   b+1 worker id; b+2 the most jobs to lease (0: none); b+3 lease duration, ms; b+4 and
--   b+5 the default timeout (ms) and attempts, as `lease` ARGV[5] to ARGV[7]
--   b+6 k, then k ids of earlier calls whose replies the caller has: their remembered
--       replies are forgotten now rather than after 10 minutes (so that what is kept for
--       calls sent again stays small however fast jobs go)
--
-- A job whose cancellation was asked for while it ran ends `cancelled` instead, its output
-- dropped (see `cancel`).
--
-- Returns: {results, notify}, or with a call id {results, notify, leases, wait_ms, capped}:
--          results is one letter per job, in order: s (succeeded) or c (cancelled, as
--          above) for an accepted result, x (stale: the token does not hold the job's lease)
--          or m (missing: no such job) for one refused; notify lists dependents in other
--          functions to tell (see lib.lua); leases, wait_ms and capped are as `lease`
--          answers them.
-- Publishes: `finish` with the final state for each; `ready` for each dependent that may
--            now run; `start` for each job leased.

local n = tonumber(ARGV[2])
local b = 3 + 5 * n
local call_id = ARGV[b]

-- The same call again: its first reply, without the dependents to tell (their re-check
-- finds them).
local replay = call_id and remembered(call_id)
if replay then
  local leased, letters = string.match(replay, '^([^;]*);(.*)$')
  return { letters or '', {}, held_leases(call_id, leased or ''), 0, 0 }
end

-- The lease part is checked before anything is written: a call refused changes nothing.
local want = tonumber(ARGV[b + 2] or '0')
if call_id and (not want or (want > 0 and not (tonumber(ARGV[b + 3] or '')
    and tonumber(ARGV[b + 4] or '') and tonumber(ARGV[b + 5] or '')))) then
  return redis.error_reply('BADARGS complete: the jobs to lease need a count, a lease duration and two defaults, all numbers')
end
if call_id and want > 0 and not (fits_record(call_id) and fits_record(ARGV[b + 1] or '')) then
  return redis.error_reply("BADARGS complete: a call id or worker id must not contain '|'")
end

-- Plugin versions go into records as they are: they must not hold the separator.
for i = 0, n - 1 do
  if not fits_record(ARGV[3 + 5 * i + 4]) then
    return redis.error_reply("BADARGS complete: a plugin version must not contain '|'")
  end
end

local results, runs, outputs, numbers = {}, {}, {}, {}
for i = 0, n - 1 do numbers[#numbers + 1] = ARGV[3 + 5 * i] end
begin_batch()
local raws = {}
if n > 0 then raws = redis.call('HMGET', K.jobs, unpack(numbers)) end
local seen, now = {}, int(NOW)
for i = 0, n - 1 do
  local a = 3 + 5 * i
  local number, token = ARGV[a], ARGV[a + 1]
  local raw = raws[i + 1]
  local f = raw and fields_of(raw)
  if not f then
    results[#results + 1] = 'm'
  elseif seen[number] or f[R_STATE] ~= 'running' or f[R_TOKEN] ~= token then
    -- (A job named twice in one call is completed once.)
    results[#results + 1] = 'x'
  elseif f[R_OTHERS] == '' then
    -- The common job: no cancel asked for, no uniq key, dependents, history or anything
    -- else to update. Its record is rewritten as text; the attempt that succeeded is the
    -- implied last entry of its history (lib.lua, job records).
    seen[number] = true
    runs[#runs + 1] = NOW - tonumber(f[R_STARTED])
    append_log(number, f[R_ATTEMPT], ARGV[a + 3])
    f[R_STATE], f[R_FINISHED], f[R_RUN_AT], f[R_LEASE_UNTIL] = 'succeeded', now, '', ''
    f[R_UNCONFIRMED], f[R_TOKEN], f[R_VERSION] = '', '', ARGV[a + 4]
    PENDING_TEXT[number] = record_text(f)
    outputs[#outputs + 1] = number
    outputs[#outputs + 1] = ARGV[a + 2]
    finished(number, 'succeeded', tonumber(f[R_RETENTION]), K.leased)
    results[#results + 1] = 's'
  else
    seen[number] = true
    local record = decode(raw)
    runs[#runs + 1] = NOW - record.started_ms
    append_log(number, record.attempt, ARGV[a + 3])
    if record.cancel_requested_ms then
      -- A cancel asked for while it ran wins: the output is dropped.
      local why = 'cancelled while running; it finished anyway and its output was dropped'
      add_history(record, 'cancelled', why, ARGV[a + 4])
      finish(number, record, 'cancelled', { class = 'cancelled', message = why }, K.leased)
      results[#results + 1] = 'c'
    else
      add_history(record, 'succeeded', nil, ARGV[a + 4])
      outputs[#outputs + 1] = number
      outputs[#outputs + 1] = ARGV[a + 2]
      finish(number, record, 'succeeded', nil, K.leased)
      results[#results + 1] = 's'
    end
  end
end
call_chunked('HSET', K.output, outputs)
stat_times('run', runs)
settle()
flush()
-- The results in one letter each: s(ucceeded), c(ancelled), x (stale), m(issing).
results = table.concat(results)
if not call_id then return { results, NOTIFY } end

forget_replies(ARGV, b + 6)

local leases, wait_ms, capped, leased = {}, -1, 0, nil
if want > 0 then
  leases, wait_ms, capped, leased = lease_jobs(ARGV[b + 1], call_id, want, tonumber(ARGV[b + 3]),
    tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]))
end
if call_id ~= '' then
  remember(call_id, (leased or '') .. ';' .. results)
end
return { results, NOTIFY, leases, wait_ms, capped }
