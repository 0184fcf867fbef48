-- complete: store leased jobs' outputs and mark them succeeded, each exactly once. One call
-- may complete many jobs of the function (a worker batches the jobs that end together).
--
-- Fenced by the lease token: a worker that no longer holds a job's lease (it expired and the
-- job was reclaimed, or the job was already finished) is refused for that job, which
-- changes nothing. Jobs waiting on a completed job run once their other dependencies have
-- succeeded too.
--
-- KEYS: jobs input output logs ready scheduled leased waiting expires uniq tagged failed counts stats config rate events work calls calls_exp idle idle_args ticks groups group_ready group_running group_config group_rate group_wait dedup dedup_exp expiring checkpoints
-- ARGV[1]  the function name
-- ARGV[2]  m, then m options of the call, NAME VALUE pairs (all may be left out):
--   call      the call's id. With it, the same call sent again within 10 minutes (its reply
--             was lost) is answered as the first was: the same results, and the leases it
--             made that are still held; it is also the token prefix of those leases
--   lease     the most jobs of the function to lease in the same call for the caller
--             (0: none; at steady state a worker's only round trip per job); leasing
--             needs `call`, `worker`, `ttl`, `timeout` and `attempts`, as `lease` takes them
--   worker    the worker id recorded on the jobs leased
--   ttl       the lease duration, ms
--   timeout   the timeout (ms) given to leased jobs enqueued without one
--   attempts  the attempts given to leased jobs enqueued without a number
--   acked     the id of an earlier call on this function whose reply the caller has: what
--             was kept to answer it again is forgotten now rather than after 10 minutes
--             (so that what is kept for calls sent again stays small however fast jobs
--             go; may repeat)
-- Then n, how many jobs follow, and for each job:
--   job number, lease token, output bytes, this attempt's log lines (text, may be empty),
--   the version (content hash) of the plugin that ran the attempt ('' if unknown)
--
-- A job whose cancellation was asked for while it ran ends `cancelled` instead, its output
-- dropped (see `cancel`). A finished job keeps the token of the lease whose report ended
-- it: the same report sent again (under another call id: the worker's retry after a lost
-- reply) is answered as the first was and changes nothing.
--
-- Returns: {results, notify, leases, wait_ms, capped, min_replicas}: results is one letter per job, in
--          order: s (succeeded) or c (cancelled, as above) for an accepted result, x
--          (stale: the token does not hold the job's lease) or m (missing: no such job)
--          for one refused; notify lists dependents in other functions to tell (see
--          lib.lua); leases, wait_ms and capped are as `lease` answers them (none, -1, 0
--          when the call leases nothing); min_replicas is the function's setting (0 when
--          unset): the worker sends `WAIT max(its own, this) timeout` before it counts the
--          results as stored. Or the error reply `BADARGS complete: ...`,
--          having written nothing.
-- Publishes: `finish` with the final state for each (with the record and small output of a
--            watched job: see `watch`); `ready` for each dependent that may
--            now run; `start` for each job leased.

local function refuse(why) return redis.error_reply('BADARGS complete: ' .. why) end

-- Everything is checked before anything is written: a call refused changes nothing.
local m = tonumber(ARGV[2] or '')
if not m or m < 0 or 3 + 2 * m > #ARGV then
  return refuse('ARGV[2] must count the options of the call that follow')
end
local LEASE_OPTIONS = { lease = true, worker = true, ttl = true, timeout = true, attempts = true }
local call, why = named_options(ARGV, 3, 2 + 2 * m, { call = true, lease = true, worker = true,
  ttl = true, timeout = true, attempts = true }, { acked = true })
if not call then return refuse(why) end
local call_id = call.call or ''
local want = whole(call.lease or '0', 0, MAX_CONCURRENCY)
if not want then return refuse('lease must be a whole number in 0..' .. MAX_CONCURRENCY .. ', not ' .. call.lease) end
local ttl, timeout, attempts
if want > 0 then
  for name in pairs(LEASE_OPTIONS) do
    if not call[name] then return refuse('leasing needs the option ' .. name) end
  end
  ttl, timeout = whole(call.ttl, 1, MAX_DURATION_MS), whole(call.timeout, 1, MAX_DURATION_MS)
  attempts = whole(call.attempts, 1, MAX_ATTEMPTS)
  if not (ttl and timeout and attempts) then
    return refuse(string.format('ttl and timeout must be whole numbers of ms in 1..%d, attempts in 1..%d',
      MAX_DURATION_MS, MAX_ATTEMPTS))
  end
  if call_id == '' or (call.worker or '') == '' then return refuse('leasing needs the options call and worker') end
end
if not (fits_call_id(call_id) and fits_call_id(call.worker or '')) then return refuse(CALL_ID_RULE) end
if #(call.acked or {}) > MAX_ACKED then return refuse('at most ' .. MAX_ACKED .. ' acked call ids') end

local FIRST = 4 + 2 * m
local n = whole(ARGV[FIRST - 1] or '', 0, MAX_COMPLETIONS_PER_CALL)
if not n or #ARGV ~= FIRST - 1 + 5 * n then
  return refuse('ARGV[' .. (FIRST - 1) .. '] must count the jobs that follow (at most '
    .. MAX_COMPLETIONS_PER_CALL .. '), 5 arguments each')
end
-- Plugin versions go into records as they are: they must not hold the separator.
for i = 0, n - 1 do
  if not fits_record(ARGV[FIRST + 5 * i + 4]) then
    return refuse("a plugin version must not contain '|'")
  end
  if not job_number(ARGV[FIRST + 5 * i]) then
    return refuse('a job number must be a whole number >= 1, not ' .. ARGV[FIRST + 5 * i])
  end
end

-- The same call again: its first reply, without the dependents to tell (their re-check
-- finds them).
local replay = remembered(call_id)
if replay then
  local leased, letters = string.match(replay, '^([^;]*);(.*)$')
  return { letters or '', {}, held_leases(call_id, leased or ''), 0, 0, tonumber(config('min_replicas')) or 0 }
end

-- (A watched job's finish event carries its output: lib.lua, WATCH.)
WATCH.output_key = K.output
local results, runs, outputs, numbers = {}, {}, {}, {}
for i = 0, n - 1 do numbers[#numbers + 1] = ARGV[FIRST + 5 * i] end
begin_batch()
local raws = {}
if n > 0 then raws = redis.call('HMGET', K.jobs, unpack(numbers)) end
local seen, now = {}, int(NOW)
for i = 0, n - 1 do
  local a = FIRST + 5 * i
  local number, token = ARGV[a], ARGV[a + 1]
  local raw = raws[i + 1]
  local f = raw and fields_of(raw)
  if not f then
    results[#results + 1] = 'm'
  elseif not seen[number] and f[R_STATE] == 'succeeded' and f[R_TOKEN] == token then
    -- Reported before by this lease (a report sent again after its reply was lost, under
    -- another call id): answered as it was then, changing nothing.
    results[#results + 1] = 's'
  elseif not seen[number] and f[R_STATE] == 'cancelled' and f[R_TOKEN] == token then
    results[#results + 1] = 'c'
  elseif seen[number] or f[R_STATE] ~= 'running' or f[R_TOKEN] ~= token then
    -- (A job named twice in one call is completed once.)
    results[#results + 1] = 'x'
  elseif not string.find(f[R_OTHERS], '"cancel_requested_ms"', 1, true) then
    -- No cancel asked for (the common job: nothing else to update either). Its record is
    -- rewritten as text; the attempt that succeeded is the implied last entry of its
    -- history (lib.lua, job records). Other fields (a flow's, a batch's, dependents, a uniq
    -- key, earlier attempts) are the only part decoded, for the dependents to tell and the
    -- uniq key to free.
    seen[number] = true
    runs[#runs + 1] = NOW - tonumber(f[R_STARTED])
    append_log(number, f[R_ATTEMPT], ARGV[a + 3])
    f[R_STATE], f[R_FINISHED], f[R_RUN_AT], f[R_LEASE_UNTIL] = 'succeeded', now, '', ''
    -- The token stays: it says which lease's report ended the job.
    f[R_UNCONFIRMED], f[R_VERSION] = '', ARGV[a + 4]
    finished(number, 'succeeded', tonumber(f[R_RETENTION]), K.leased,
      f[R_OTHERS] ~= '' and string.find(f[R_OTHERS], '"watched"', 1, true))
    -- A job whose only other field is its group (a tenant's plain job) needs no decoding.
    local group = string.match(f[R_OTHERS], '^{"group_id":"([^"]*)"}$')
    local others = not group and f[R_OTHERS] ~= '' and cjson.decode(f[R_OTHERS])
    if others then group = others.group_id elseif group then group = GROUP.of_text(f[R_OTHERS]) end
    if group and K.groups then GROUP.release(group) end
    if others then
      -- (An earlier attempt's error goes, as finish() drops it.)
      others.error = nil
      CHECKPOINT.drop(number, others)
      if others.uniq then DEDUP.ended(number, others.uniq, others.uniq_for, 'succeeded') end
      tell_dependents(number, others, 'succeeded')
      f[R_OTHERS] = (next(others) and cjson.encode(others)) or ''
    end
    PENDING_TEXT[number] = record_text(f)
    if others then release_dependencies(number, others.after) end
    outputs[#outputs + 1] = number
    outputs[#outputs + 1] = ARGV[a + 2]
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
      if record.group_id and K.groups then GROUP.release(record.group_id) end
      record.token = token
      results[#results + 1] = 'c'
    else
      add_history(record, 'succeeded', nil, ARGV[a + 4])
      CHECKPOINT.drop(number, record)
      outputs[#outputs + 1] = number
      outputs[#outputs + 1] = ARGV[a + 2]
      finish(number, record, 'succeeded', nil, K.leased)
      if record.group_id and K.groups then GROUP.release(record.group_id) end
      record.token = token
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
forget_replies(call.acked)

local leases, wait_ms, capped, leased = {}, -1, 0, nil
if want > 0 then
  leases, wait_ms, capped, leased = lease_jobs(call.worker, call_id, want, ttl, timeout, attempts)
end
if call_id ~= '' then
  remember(call_id, (leased or '') .. ';' .. results)
end
return { results, NOTIFY, leases, wait_ms, capped, tonumber(config('min_replicas')) or 0 }
