-- enqueue: add one or more jobs for one function, atomically: all of them or, when one is
-- refused, none (every check is made before the first write).
--
-- KEYS: seq jobs input output logs ready scheduled leased waiting expires uniq tagged failed counts stats config rate events work calls calls_exp idle idle_args ticks reserved groups group_ready group_running group_config group_rate group_wait dedup dedup_exp expiring checkpoints
-- ARGV[1]  the function name
-- ARGV[2]  m, then m options of the call, NAME VALUE pairs:
--   call              the call's id, unique per call: the same call sent again within 10
--                     minutes (its reply was lost) gets the first reply and adds nothing
--   acked             the id of an earlier call on this function whose reply the caller
--                     has: what was kept to answer it again is forgotten now (as for
--                     `complete`; may repeat)
-- Then n, how many jobs follow, and for each job: k, then k options of the job, NAME VALUE
-- pairs (each at most once, but `tag` and `after`), then its input. An option left out
-- takes its default:
--   priority          integer -1000..1000, higher runs first (0)
--   attempts          integer >= 1; 0: the serving plugin's default, fixed at the first
--                     lease (0)
--   timeout           ms the job may run; 0: the serving plugin's default (0)
--   retention         ms a finished job's record is kept (DEFAULT_RETENTION_MS, 25 hours)
--   failed_retention  ms a failed job's record is kept; the longer of the two applies
--                     (DEFAULT_FAILED_RETENTION_MS, 7 days)
--   delay             ms before the job may run (0: ready now)
--   at                ms since the epoch (Redis clock) before which the job may not run;
--                     must not be in the past, nor more than 10 years ahead (none)
--   uniq              a key: while an unfinished job of this function holds it, enqueueing
--                     another with it returns that job instead (none)
--   uniq_for          ms (with uniq): once the job holding the key has succeeded, the key
--                     goes on answering with it for this long (a dedup window: the same
--                     work is not done twice within it)
--   debounce          ms (with uniq): the job waits this long; enqueued again with the key
--                     before it has started, that job takes the new input and waits this
--                     long again (the last one within a quiet period runs); once it has
--                     started, a new job is made
--   throttle, throttle_ms
--                     (with uniq, together) at most `throttle` jobs are made with the key
--                     per `throttle_ms` (a window opened by the first); beyond, the latest
--                     one made answers. The key does not join unfinished jobs then
--   expires_in        ms: a job that has not started by then (from now, Redis' clock) ends
--                     `expired` (failure group `expired`) and never runs
--   expires_at        the same as a time, ms since the epoch (Redis' clock); not passed,
--                     and at most 10 years ahead (as `at`)
--   group             the job's group (a tenant, customer or document key: 1 to MAX_KEY_BYTES
--                     bytes of printable ASCII but space, '"', '\' and '|'): the function's
--                     ready jobs are leased round robin across their groups, each group
--                     within its own limits (lib.lua, "Groups"; none: the jobs without a
--                     group, one group of their own)
--   trace             the W3C traceparent of the span the job was made in
--                     (00-TRACEID-SPANID-FLAGS, lower-case hex): kept with the job and
--                     given to each worker that leases it (lease rows), so that the
--                     worker's spans join that trace (none)
--   tracestate        the W3C tracestate that came with it (with trace; at most
--                     MAX_TRACESTATE_BYTES bytes of printable ASCII)
--   tag               a tag of the job (may repeat)
--   after             the id ('G:N') of a job that must succeed first (may repeat): if
--                     it fails, is cancelled or is gone, this job is cancelled
--   after_ignore      the id of a dependency (given with `after` too) whose failure (or
--                     cancellation, or absence) does not stop this job: it runs when its
--                     other dependencies let it, and reads this one as failed (may repeat)
--   after_continue    the id of a dependency (given with `after` too) after which this job
--                     runs however it ended: a job with such a dependency runs once every
--                     one of its dependencies has ended, whatever became of them (may
--                     repeat)
--   number            a job number `reserve` reserved for this job (a flow's): the job
--                     gets it instead of a new one; it must not be taken, and the
--                     reservation must not have lapsed. A dependency in this function
--                     may name a reserved number given to an earlier job of the call
--   flow              the id of the flow the job belongs to (a whole number)
--   dependent         the id ('G:N') of a job in another function, written already, that
--                     waits on this one (may repeat; only with `number`): recorded as its
--                     dependent here, as `link` would (a flow writes a dependent's function
--                     before its dependencies' when it can, and so links nothing); this
--                     job's end tells it as any dependent's
--   batch             the id of the batch the job belongs to (1 to 32 hex digits; added to
--                     it with `batch_add` first): its end is returned in `notify` for the
--                     caller to count (`batch_done`)
--   parent            the id ('G:N') of the job that enqueued this one as its child
--   once              a key: a job is enqueued for it only the first time ever (kept in
--                     `ticks`); again, the call returns that first job, not created (a
--                     parent's child keys: `PARENT/KEY`)
--   schedule, tick    the recurring schedule the job is a tick of, and that tick's time
--                     (ms, Redis clock), both or neither: a job is enqueued for a tick only
--                     if the schedule has had none as late for this function (`ticks`);
--                     otherwise the call returns the job of that later tick, not created.
--                     A last tick more than CLOCK_SKEW_MS after now (fired on a clock that
--                     has gone back since) counts as none
--
-- Jobs ready at once go first to idle workers registered for them (lease.lua, ARGV[8]):
-- leased to them in this call and published on their channels (lib.lua, "Idle workers
-- handed jobs directly"); the other workers hear `work` only if jobs are left for them.
--
-- A job with dependencies waits (state `waiting`) until all of them have succeeded.
-- Dependencies in this function are linked here; those in other functions are returned for
-- the caller to link (`link` on their function, then `resolve` here when one has already
-- ended): a script touches one function only, so that it runs on Redis Cluster.
--
-- Refuses with `ENCRYPT job I: ...` (writing nothing) a plain input for a function whose
-- config says `encrypt`.
--
-- Returns: {numbers, created, links, min_replicas}: the jobs' numbers in the order given;
--          created, one character per job, '1' for a new job, '0' when its uniq key
--          returned an unfinished job; links, pairs of a job's position in the call
--          (1-based) and a dependency in another function the caller must link;
--          min_replicas, the function's setting (0 when unset): the caller sends
--          `WAIT max(its own, this) timeout` on the same connection before it reports the
--          jobs enqueued (PROTOCOL.md, "High availability"). Or, having written
--          nothing, the error reply `BADJOB job I: ...` (`BADJOB call: ...` for the call's
--          own options) for a call that could never be carried out, or `CONFLICT job I: ...`
--          for one the queue's state refuses now: a time to run at that its clock has
--          passed, a dependency that is gone, failed or cancelled.
-- Publishes: `create` for each new job.

local function bad(i, text)
  return redis.error_reply(string.format('BADJOB job %d: %s', i + 1, text))
end

local function conflict(i, text)
  return redis.error_reply(string.format('CONFLICT job %d: %s', i + 1, text))
end

-- The call's options.
local m = tonumber(ARGV[2] or '')
if not m or m < 0 or 3 + 2 * m > #ARGV then
  return redis.error_reply('BADJOB call: ARGV[2] must count the options of the call that follow')
end
local call, why = named_options(ARGV, 3, 2 + 2 * m, { call = true }, { acked = true })
if not call then return redis.error_reply('BADJOB call: ' .. why) end
local call_id = call.call or ''
if not fits_call_id(call_id) then return redis.error_reply('BADJOB call: ' .. CALL_ID_RULE) end
if #(call.acked or {}) > MAX_ACKED then
  return redis.error_reply('BADJOB call: at most ' .. MAX_ACKED .. ' acked call ids')
end

local replay = remembered(call_id)
if replay then
  -- Remembered as 'N,N,...;CREATED;POSITION,DEPENDENCY,...'.
  local numbers, created, links = string.match(replay, '^([^;]*);([^;]*);(.*)$')
  local reply = { {}, created or '', {}, tonumber(config('min_replicas')) or 0 }
  for number in string.gmatch(numbers or '', '[^,]+') do reply[1][#reply[1] + 1] = number end
  for item in string.gmatch(links or '', '[^,]+') do reply[3][#reply[3] + 1] = item end
  return reply
end

-- Each job's options (nil: all defaults) and where its input is. Every job is checked
-- before anything is written, so a batch is all or nothing. The dependencies in this
-- function are kept (not forgotten by the housekeeping below) while this call runs.
local JOB_OPTIONS = {
  priority = true, attempts = true, timeout = true, retention = true, failed_retention = true,
  delay = true, at = true, uniq = true, schedule = true, tick = true, parent = true, once = true,
  number = true, flow = true, batch = true, group = true, uniq_for = true, debounce = true,
  throttle = true, throttle_ms = true, expires_in = true, expires_at = true, trace = true,
  tracestate = true,
}
local JOB_LISTS = { tag = true, after = true, after_ignore = true, after_continue = true, dependent = true }
-- The edge policies other than the default (`after`: a failure cancels the job).
local POLICIES = { after_ignore = 'ignore', after_continue = 'continue' }
-- Each number's range: every option is checked here, before the first write (a value
-- `tonumber` takes but arithmetic or cjson chokes on, as 'inf' or '1e999', would otherwise
-- fail the call halfway through its writes).
local RANGES = {
  { 'priority', MIN_PRIORITY, MAX_PRIORITY }, { 'attempts', 0, MAX_ATTEMPTS }, { 'timeout', 0, MAX_DURATION_MS },
  { 'retention', 0, MAX_DURATION_MS }, { 'failed_retention', 0, MAX_DURATION_MS },
  { 'delay', 0, MAX_DURATION_MS }, { 'at', 0, MAX_WHOLE }, { 'tick', 0, MAX_WHOLE },
  { 'number', 1, MAX_WHOLE }, { 'flow', 1, MAX_WHOLE }, { 'uniq_for', 1, MAX_DURATION_MS },
  { 'debounce', 1, MAX_DURATION_MS }, { 'throttle', 1, MAX_WHOLE }, { 'throttle_ms', 1, MAX_DURATION_MS },
  { 'expires_in', 1, MAX_DURATION_MS }, { 'expires_at', 1, MAX_WHOLE },
}
local KEYED = { 'uniq', 'schedule', 'once' }
local n_at = 3 + 2 * m
local n = tonumber(ARGV[n_at] or '')
if not n or n < 0 then
  return redis.error_reply('BADJOB call: ARGV[' .. n_at .. '] must count the jobs that follow')
end
local OPTIONS, INPUT_AT, depended = {}, {}, {}
-- Reserved numbers given to the call's jobs: number -> the job's position.
local given = {}
local at_arg = n_at + 1
for i = 0, n - 1 do
  local k = tonumber(ARGV[at_arg] or '')
  if not k or k < 0 or at_arg + 2 * k + 1 > #ARGV then
    return bad(i, 'the call ends before it (each job is k, k option pairs and its input)')
  end
  if k > 0 then
    local options, why = named_options(ARGV, at_arg + 1, at_arg + 2 * k, JOB_OPTIONS, JOB_LISTS)
    if not options then return bad(i, why) end
    for _, range in ipairs(RANGES) do
      local name = range[1]
      if options[name] and not whole(options[name], range[2], range[3]) then
        return bad(i, string.format('%s must be a whole number in %d..%d, not %s', name, range[2], range[3], options[name]))
      end
    end
    for _, name in ipairs(KEYED) do
      if options[name] and (options[name] == '' or not short(options[name], MAX_KEY_BYTES)) then
        return bad(i, string.format('%s must be 1 to %d bytes', name, MAX_KEY_BYTES))
      end
    end
    for _, tag in ipairs(options.tag or {}) do
      if tag == '' or not short(tag, MAX_KEY_BYTES) then
        return bad(i, string.format('a tag must be 1 to %d bytes', MAX_KEY_BYTES))
      end
    end
    if #(options.tag or {}) > MAX_TAGS then return bad(i, 'more than ' .. MAX_TAGS .. ' tags') end
    -- The policies of the dependencies whose failure does not cancel the job, by id.
    for name, policy in pairs(POLICIES) do
      for _, dep in ipairs(options[name] or {}) do
        if not contains(options.after, dep) then
          return bad(i, name .. ' ' .. dep .. ' is not a dependency (give it with after too)')
        end
        options.policy = options.policy or {}
        options.policy[dep] = policy
        if policy == 'continue' then options.continues = true end
      end
      options[name] = nil
    end
    if #(options.after or {}) > MAX_DEPENDENCIES then
      return bad(i, 'more than ' .. MAX_DEPENDENCIES .. ' dependencies')
    end
    if options.batch and not string.match(options.batch, '^%x+$') or #(options.batch or '') > 32 then
      return bad(i, 'batch ' .. tostring(options.batch) .. ' is not a batch id (1 to 32 hex digits)')
    end
    if options.dependent then
      if not options.number then return bad(i, 'dependent goes with number (a flow\'s job)') end
      if #options.dependent > MAX_FLOW_JOBS then
        return bad(i, 'more than ' .. MAX_FLOW_JOBS .. ' dependents')
      end
      for _, dependent in ipairs(options.dependent) do
        local fn = split_id(dependent)
        if not fn or fn == FN then
          return bad(i, 'dependent ' .. dependent .. ' is not a job id of another function (FUNCTION:NUMBER)')
        end
      end
    end
    if options.number then
      if given[options.number] then
        return bad(i, 'number ' .. options.number .. ' is given to job ' .. (given[options.number] + 1) .. ' too')
      end
      local until_ms = tonumber(redis.call('ZSCORE', K.reserved, options.number) or '0')
      if until_ms <= NOW or redis.call('HEXISTS', K.jobs, options.number) == 1 then
        return conflict(i, 'number ' .. options.number .. ' is not reserved (never, or its reservation of '
          .. RESERVATION_MS .. ' ms lapsed, or it was used): reserve numbers again')
      end
      given[options.number] = i
    end
    local modes = (options.uniq_for and 1 or 0) + (options.debounce and 1 or 0) + (options.throttle and 1 or 0)
    if modes > 0 and not options.uniq then
      return bad(i, 'uniq_for, debounce and throttle go with uniq (the key they work on)')
    end
    if modes > 1 then return bad(i, 'give one of uniq_for, debounce and throttle') end
    if (options.throttle == nil) ~= (options.throttle_ms == nil) then
      return bad(i, 'throttle (jobs) and throttle_ms (per how long) go together')
    end
    if options.debounce and (options.delay or options.at) then
      return bad(i, 'debounce is the delay: give no delay or at with it')
    end
    if options.expires_in and options.expires_at then return bad(i, 'give expires_in or expires_at, not both') end
    if options.expires_at and tonumber(options.expires_at) <= NOW then
      return conflict(i, string.format('expires_at %s has passed (the queue clock says %d)', options.expires_at, NOW))
    end
    -- (Times beyond are refused as `at` is: a record keeps them exactly, cjson writing 14 digits.)
    if options.expires_at and tonumber(options.expires_at) > NOW + MAX_DURATION_MS then
      return conflict(i, string.format('expires_at %s is more than 10 years ahead (the queue clock says %d); give a nearer one', options.expires_at, NOW))
    end
    if options.group and not GROUP.fits(options.group) then
      return bad(i, 'group ' .. options.group .. " is not a group key (1 to " .. MAX_KEY_BYTES
        .. " bytes of printable ASCII but space, '\"', '\\' and '|')")
    end
    if options.trace and not TRACE.fits(options.trace) then
      return bad(i, 'trace ' .. options.trace .. ' is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, lower case)')
    end
    if options.tracestate and not (options.trace and TRACE.fits_state(options.tracestate)) then
      return bad(i, 'tracestate goes with trace, and is at most ' .. MAX_TRACESTATE_BYTES .. ' bytes of printable ASCII')
    end
    if options.parent and not split_id(options.parent) then
      return bad(i, 'parent ' .. options.parent .. ' is not a job id (FUNCTION:NUMBER)')
    end
    if (options.schedule == nil) ~= (options.tick == nil) then
      return bad(i, 'schedule and tick go together')
    end
    local at = tonumber(options.at or '0')
    if at > 0 and at < NOW then
      return conflict(i, string.format('scheduled time %d is in the past (the queue clock says %d)', at, NOW))
    end
    if at > NOW + MAX_DURATION_MS then
      return conflict(i, string.format('scheduled time %d is more than 10 years ahead (the queue clock says %d); give a nearer one', at, NOW))
    end
    for _, dep in ipairs(options.after or {}) do
      local fn, number = split_id(dep)
      if not fn then return bad(i, 'dependency ' .. dep .. ' is not a job id (FUNCTION:NUMBER)') end
      local tolerated = options.continues or (options.policy and options.policy[dep])
      if fn == FN and given[number] then
        if given[number] >= i then
          return bad(i, 'dependency ' .. dep .. ' is a job later in the call: give dependencies first')
        end
      elseif fn == FN then
        local record = load(number)
        if not record and not tolerated then
          return conflict(i, 'dependency ' .. dep .. ' does not exist (never enqueued, or its retention is over)')
        end
        if record and ENDED[record.state] == 'unsuccessful' and not tolerated then
          return conflict(i, 'dependency ' .. dep .. ' has already ' .. record.state .. ', so the job could never run')
        end
        depended[number] = true
      end
    end
    OPTIONS[i] = options
  end
  INPUT_AT[i] = at_arg + 2 * k + 1
  at_arg = at_arg + 2 * k + 2
end
if at_arg ~= #ARGV + 1 then
  return redis.error_reply('BADJOB call: ' .. (#ARGV - at_arg + 1) .. ' arguments after the last job')
end
-- A function that stores only encrypted input (config `encrypt`) refuses a plain one: an
-- envelope starts with ENCRYPTED_MAGIC (crates/proto/src/crypto.rs).
if n > 0 and redis.call('HGET', K.config, 'encrypt') == '1' then
  for i = 0, n - 1 do
    if string.sub(ARGV[INPUT_AT[i]], 1, #ENCRYPTED_MAGIC) ~= ENCRYPTED_MAGIC then
      return redis.error_reply('ENCRYPT job ' .. (i + 1) .. ': function ' .. FN ..
        ' stores only encrypted input (config --encrypt): give the producer the key file')
    end
  end
end

forget_expired(depended)
-- (Jobs past their deadline end `expired` here too, not only when workers lease.)
EXPIRY.due()

-- Records and inputs are written together at the end (flush), one call per key.
begin_batch()
local inputs, ready, records = {}, {}, {}
local numbers, created, links = {}, {}, {}

-- A bulk call gives the same options over and over: each distinct value is parsed once.
local NUMBERS, CANONICAL = {}, {}
local function number_of(text)
  local value = NUMBERS[text]
  if value == nil then
    value = tonumber(text)
    NUMBERS[text] = value
  end
  return value
end
local function canonical(text)
  local value = CANONICAL[text]
  if value == nil then
    value = int(number_of(text))
    CANONICAL[text] = value
  end
  return value
end
local now = int(NOW)
local NO_OPTIONS = {}
local DEFAULT_RETENTION, DEFAULT_FAILED_RETENTION = int(DEFAULT_RETENTION_MS), int(DEFAULT_FAILED_RETENTION_MS)
-- The rest of a new record: the end of ready_ms, run_at_ms to version empty, no other fields.
local QUEUED_TAIL = string.rep('|', #RECORD_FIELDS - R_READY + 1)

-- `list` without repeats, in order.
local function distinct(list)
  local out, listed = {}, {}
  for _, item in ipairs(list) do
    if not listed[item] then
      listed[item] = true
      out[#out + 1] = item
    end
  end
  return out
end

-- The other fields of a common job (a record's JSON part): its flow, batch, dependents and
-- group ('' when it has none).
local function placement(options)
  if not (options.flow or options.batch or options.dependent or options.group or options.trace) then return '' end
  return cjson.encode({
    flow = options.flow and number_of(options.flow),
    batch = options.batch,
    dependents = options.dependent and distinct(options.dependent),
    group_id = options.group,
    trace = options.trace,
    tracestate = options.tracestate,
  })
end

-- Reserved numbers the common jobs took (out of the reservations at the end).
local used = {}

-- Jobs of this call made ready (for idle workers to be handed), and whether any was created.
local made_ready, created_any = 0, false
for i = 0, n - 1 do
  local options = OPTIONS[i] or NO_OPTIONS
  local input = ARGV[INPUT_AT[i]]
  local priority = options.priority or '0'
  local attempts = options.attempts or '0'
  local timeout = options.timeout or '0'
  local retention = options.retention or DEFAULT_RETENTION
  local failed_retention = options.failed_retention or DEFAULT_FAILED_RETENTION
  local delay = number_of(options.delay or '0')
  local at = number_of(options.at or '0')
  local uniq = options.uniq
  if not uniq and not options.tag and not options.after and not options.schedule and not options.once
    and not options.parent and not options.expires_in and not options.expires_at and delay <= 0 and at <= 0 then
    -- The common job (ready now; no uniq key, tags or dependencies; a flow's or batch's
    -- too): its record is written out directly, the same fields the general path below
    -- gives it.
    local number = options.number
    if number then
      used[#used + 1] = number
    else
      number = int(redis.call('INCR', K.seq))
    end
    -- (lib.lua, job records: queued, attempt 0, created and ready now, then its other
    -- fields, if any.)
    local text = 'queued|' .. canonical(priority) .. '|0|' .. canonical(attempts) .. '|'
      .. canonical(timeout) .. '|' .. canonical(retention) .. '|' .. canonical(failed_retention) .. '|'
      .. now .. '|' .. now .. QUEUED_TAIL .. placement(options)
    if options.number then
      -- A later job of the call may wait on it (by its reserved number): it loads it from
      -- the batch's records.
      PENDING_TEXT[number] = text
    else
      records[#records + 1] = number
      records[#records + 1] = text
    end
    if options.group then
      redis.call('ZADD', K.group_ready, 0, GROUP.member(options.group, number_of(priority), number))
      GROUP.join(options.group)
    else
      ready[#ready + 1] = int((PRIORITY_BASE - number_of(priority)) * NUMBER_SPAN + tonumber(number))
      ready[#ready + 1] = number
    end
    inputs[#inputs + 1] = number
    inputs[#inputs + 1] = input
    EVENTS[#EVENTS + 1] = '{"event":"create","id":"' .. FN .. ':' .. number .. '"}'
    created_any = true
    made_ready = made_ready + 1
    numbers[#numbers + 1] = number
    created[#created + 1] = '1'
  else
    local existing = nil
    local schedule, tick = options.schedule, number_of(options.tick or '0')
    if schedule then
      local last_tick, last_number = string.match(redis.call('HGET', K.ticks, schedule) or '', '^(%d+),(%d+)$')
      -- A last tick later than the clock (by more than nodes may disagree) was fired on a
      -- clock that has gone back since: it dedupes nothing, or nothing would fire until
      -- the clock reached it again.
      if last_tick and tonumber(last_tick) >= tick and tonumber(last_tick) <= NOW + CLOCK_SKEW_MS then
        existing = last_number
      end
    end
    local once = options.once
    if once and not existing then
      -- A key whose job has been forgotten no longer answers: the job is made again.
      local holder = redis.call('HGET', K.ticks, 'once\0' .. once)
      if holder and load(holder) then existing = holder end
    end
    local debounce = options.debounce and number_of(options.debounce)
    if uniq and not existing then
      if options.throttle then
        -- At most `throttle` jobs of the key per window: beyond, the latest answers.
        local window = DEDUP.throttle_window(uniq)
        if window and window[2] >= number_of(options.throttle) then existing = window[3] end
      else
        local holder = redis.call('HGET', K.uniq, uniq)
        local held = holder and load(holder)
        if debounce then
          -- The key's job has not started: it takes this input and waits its delay again.
          if held and held.attempt == 0 and (held.state == 'scheduled' or held.state == 'queued') then
            existing = holder
            if held.state == 'queued' then GROUP.unready(holder, held) end
            held.not_before_ms = NOW + debounce
            make_scheduled(holder, held, NOW + debounce)
            save(holder, held)
            inputs[#inputs + 1] = holder
            inputs[#inputs + 1] = input
          end
        elseif held and not ENDED[held.state] then
          existing = holder
        elseif holder and DEDUP.window_open(uniq) then
          -- Its job succeeded within the key's window (uniq_for).
          existing = holder
        end
      end
    end
    if existing then
      numbers[#numbers + 1] = existing
      created[#created + 1] = '0'
    else
      local number = options.number
      if number then
        redis.call('ZREM', K.reserved, number)
      else
        number = int(redis.call('INCR', K.seq))
      end
      local record = {
        priority = number_of(priority),
        attempt = 0,
        max_attempts = number_of(attempts),
        timeout_ms = number_of(timeout),
        retention_ms = number_of(retention),
        failed_retention_ms = number_of(failed_retention),
        created_ms = NOW,
      }
      local run_at = NOW + (debounce or delay)
      if at > run_at then run_at = at end
      -- Kept for good (a retry runs the job no earlier either).
      if run_at > NOW then record.not_before_ms = run_at end
      if uniq and options.throttle then
        DEDUP.throttled(uniq, number, number_of(options.throttle_ms))
      elseif uniq then
        record.uniq = uniq
        if options.uniq_for then record.uniq_for = number_of(options.uniq_for) end
        redis.call('HSET', K.uniq, uniq, number)
        DEDUP.taken(uniq)
      end
      if once then
        -- Kept while the job is (forget_finished lets it go with the job).
        record.once = once
        redis.call('HSET', K.ticks, 'once\0' .. once, number)
      end
      if options.parent then record.parent = options.parent end
      if options.group then record.group_id = options.group end
      if options.trace then record.trace, record.tracestate = options.trace, options.tracestate end
      local deadline = options.expires_at and number_of(options.expires_at)
        or options.expires_in and NOW + number_of(options.expires_in)
      if deadline then
        -- Until it starts (lease takes it out), or its deadline ends it `expired`.
        record.expires_ms = deadline
        redis.call('ZADD', K.expiring, int(deadline), number)
      end
      if options.flow then record.flow = number_of(options.flow) end
      if options.batch then record.batch = options.batch end
      if options.policy then record.on_failure = options.policy end
      if options.dependent then record.dependents = distinct(options.dependent) end
      if schedule then
        record.schedule = schedule
        record.tick_ms = tick
        redis.call('HSET', K.ticks, schedule, int(tick) .. ',' .. number)
      end
      if options.tag then
        local tags = {}
        for _, tag in ipairs(options.tag) do
          if not contains(tags, tag) then
            tags[#tags + 1] = tag
            redis.call('ZADD', K.tagged, 0, tag .. '\0' .. pad(number))
          end
        end
        record.tags = list_or_nil(tags)
      end
      local after, waiting_on, seen = {}, {}, {}
      for _, dep in ipairs(options.after or {}) do
        if not seen[dep] then
          seen[dep] = true
          after[#after + 1] = dep
          local fn, dep_number = split_id(dep)
          if fn == FN then
            local dep_record = load(dep_number)
            -- Gone, failed or cancelled: tolerated (checked above), nothing to wait for.
            local ended = not dep_record or ENDED[dep_record.state] == 'unsuccessful'
            if not ended and dep_record.state ~= 'succeeded' then
              local dependents = dep_record.dependents or {}
              dependents[#dependents + 1] = id_of(number)
              dep_record.dependents = dependents
              save(dep_number, dep_record)
              waiting_on[#waiting_on + 1] = dep
            end
          else
            waiting_on[#waiting_on + 1] = dep
            links[#links + 1] = int(i + 1)
            links[#links + 1] = dep
          end
        end
      end
      record.after = list_or_nil(after)
      if #waiting_on > 0 then
        record.state = 'waiting'
        record.waiting_on = waiting_on
        if run_at > NOW then record.run_at_ms = run_at end
        redis.call('ZADD', K.waiting, int(NOW + RELINK_FIRST_MS), number)
      elseif run_at > NOW then
        make_scheduled(number, record, run_at)
      else
        make_ready(number, record)
        made_ready = made_ready + 1
      end
      save(number, record)
      inputs[#inputs + 1] = number
      inputs[#inputs + 1] = input
      -- Built without cjson: sent for every job.
      EVENTS[#EVENTS + 1] = '{"event":"create","id":"' .. FN .. ':' .. number .. '"}'
      created_any = true
      numbers[#numbers + 1] = number
      created[#created + 1] = '1'
    end
  end
end
call_chunked('ZREM', K.reserved, used)
call_chunked('HSET', K.jobs, records)
call_chunked('ZADD', K.ready, ready)
call_chunked('HSET', K.input, inputs)
flush()
-- Idle workers registered for them are handed the new ready jobs first (before `work` goes
-- out: a worker hears of its own jobs before it is woken to lease); the others hear `work`
-- unless every job of the call was handed over.
local handed = 0
if made_ready > 0 and redis.call('EXISTS', K.idle) == 1 then handed = hand_off() end
-- Told unless every job of the call was ready and handed over, none left ready (a hand-off
-- gives the best ready jobs, which need not be this call's; a job scheduled or waiting is
-- news too: the workers learn when it falls due).
if created_any and not (made_ready == n and handed >= made_ready and GROUP.ready_count() == 0) then
  wake_workers()
end
forget_replies(call.acked)
created = table.concat(created)
remember(call_id, table.concat(numbers, ',') .. ';' .. created .. ';' .. table.concat(links, ','))
return { numbers, created, links, tonumber(config('min_replicas')) or 0 }
