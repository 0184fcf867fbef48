-- lib.lua: what every function of the library working on one function's queue shares. The
-- library (scripts.rs builds it: the constants, this file, then each operation's file as the
-- body of a registered function) is loaded once per server with FUNCTION LOAD; the helpers
-- below are built then, not on every call. Each such function declares the keys it may
-- touch, by name (scripts.rs lists them, in the order the caller passes them: the `KEYS:`
-- line of each file's header), and takes the function name as ARGV[1]; its body starts
-- with begin(KEYS, ARGV, keys_NAME), which sets K (K.jobs, K.calls_exp, ...: keys_NAME,
-- built by scripts.rs, names the function's KEYS), FN and NOW and clears what the previous
-- call left. A key a function has not declared is nil in K.
--
-- The keys of function F (keys.rs builds the names):
-- seq        wg:{F}:seq        string  the last job number handed out
-- jobs       wg:{F}:jobs       hash    number -> job record (see "Job records" below)
-- input      wg:{F}:input      hash    number -> input bytes
-- output     wg:{F}:output     hash    number -> output bytes of a succeeded job
-- logs       wg:{F}:logs       hash    number -> the job's log (newest 256 KiB)
-- ready      wg:{F}:ready      zset    queued jobs, scored by priority, then number
-- scheduled  wg:{F}:scheduled  zset    scheduled jobs, scored by the time they become ready (ms)
-- leased     wg:{F}:leased     zset    running jobs, scored by lease expiry (ms)
-- waiting    wg:{F}:waiting    zset    jobs waiting on dependencies, scored by when to
--                                      re-check their links to other functions (ms)
-- expires    wg:{F}:expires    zset    finished jobs, scored by when their record is deleted (ms)
-- uniq       wg:{F}:uniq       hash    uniq key -> number of the unfinished job holding it
-- tagged     wg:{F}:tagged     zset    'TAG\0NUMBER' (NUMBER zero-padded to 13 digits), score 0
-- failed     wg:{F}:failed     zset    'GROUP\0NUMBER' of each retained failed job, score 0
-- counts     wg:{F}:counts     hash    retained finished jobs: succeeded, failed, cancelled,
--                                      failed:GROUP
-- stats      wg:{F}:stats      hash    'DAY:FIELD' -> daily statistics (DAY: days since 1970)
-- config     wg:{F}:config     hash    paused, concurrency, rate_limit, rate_interval_ms,
--                                      keep_finished
-- rate       wg:{F}:rate       zset    lease tokens inside the rate-limit window, scored by
--                                      lease time (ms)
-- events     wg:{F}:events     channel (not a key; named here so one place builds it): every
--                                      event of every job, JSON, for clients and operators
-- work       wg:{F}:work       channel (not a key): what the function's workers need to hear,
--                                      `work` (jobs may have become runnable; at most once per
--                                      call) or `cancel ID` (a running job's cancellation)
-- calls      wg:{F}:calls      hash    call id -> the reply of an `enqueue`, `lease` or
--                                      `complete` call, so that a call sent again (its reply
--                                      was lost) is answered the same instead of applied twice
-- calls_exp  wg:{F}:calls-exp  zset    call id, scored by when its reply is forgotten (ms)
-- idle       wg:{F}:idle       zset    idle workers that asked to be handed the next jobs
--                                      (their `lease` found nothing), scored by when that
--                                      lapses (ms)
-- idle_args  wg:{F}:idle-args  hash    worker id -> 'CALL_ID|WANT|LEASE_MS|TIMEOUT_MS|
--                                      ATTEMPTS|CHANNEL': how it leases, and where to
--                                      publish what it is handed
--
-- ARGV[1]   the function name F

-- The call's keys by name, its function name, and the time it runs at: every time is Redis'
-- clock, in ms since the Unix epoch. Set by begin().
local K, FN, NOW

-- Priority is the high part of the ready score and the job number the low part, so
-- the lowest score is the highest priority first and, within a priority, the oldest job.
local PRIORITY_BASE = 1000
local NUMBER_SPAN = 1099511627776 -- 2^40
-- The most expired jobs, due jobs or lost leases one call deals with.
local BATCH = 100
-- MAX_LOG (the newest bytes of a job's log kept), DEFAULT_KEEP_FINISHED (finished jobs kept
-- when the config does not say), STATS_DAYS (days of statistics kept) and DAY_MS (a stats
-- day) come before this file: the client prepends them from wasmgear_proto::limits.
-- A waiting job's links to other functions are re-checked after 30 s, then ever less often
-- (doubling, at most hourly): the safety net for a client that died while linking.
local RELINK_FIRST_MS, RELINK_MAX_MS = 30000, 3600000
-- A finished job outlives its retention while it holds for dependents (until each has
-- ended; see `told`) or its batch has not counted it, for at most this long.
local UNTOLD_MAX_MS = 7 * DAY_MS
-- How long the reply of an `enqueue` or `lease` call is kept for the same call sent again.
local CALL_MEMORY_MS = 600000

local function id_of(number) return FN .. ':' .. number end

-- A whole number as the string Redis is given: Lua would format a number argument with
-- "%.17g", whose floating-point path costs more than the command itself.
local function int(x) return string.format('%d', x) end

-- The same, remembered for the call: for values a batch repeats (times, buckets).
local INTS = {}
local function int_once(x)
  local s = INTS[x]
  if not s then
    s = int(x)
    INTS[x] = s
  end
  return s
end

-- The function and number of job id 'F:N'.
local function split_id(id)
  local fn, number = string.match(id, '^(.*):(%d+)$')
  return fn, number
end

local function pad(number) return string.format('%013d', tonumber(number)) end

-- Caller's numbers. `tonumber` takes '1e999', 'inf', 'nan', '0x10' and ' 7', and a script
-- that computes with such a value fails (or writes garbage) halfway through its writes: every
-- number a caller gives is read with whole() while the call is checked, before its first
-- write. Lua's numbers are doubles, exact up to 2^53.
local MAX_WHOLE = 9007199254740991

-- Text `s` as a whole number in lo..hi (decimal digits, an optional '-'; lo defaults to 0,
-- hi to 2^53 - 1), or nil.
local function whole(s, lo, hi)
  if type(s) ~= 'string' or #s == 0 or #s > 17 or not string.find(s, '^%-?%d+$') then return nil end
  local n = tonumber(s)
  if not n or n < (lo or 0) or n > (hi or MAX_WHOLE) then return nil end
  return n
end

-- A job number as callers give it: decimal digits, no sign or leading zero.
local function job_number(s)
  return type(s) == 'string' and #s <= 15 and string.find(s, '^[1-9]%d*$') ~= nil
end

-- Text of at most `most` bytes (a key, tag or id).
local function short(s, most) return type(s) == 'string' and #s <= most end

---------------------------------------------------------------------------------------------
-- Job records. A record in `jobs` is its hot fields, the ones leasing and completing read
-- and write, in a fixed order, each followed by '|', then the job's other fields as a JSON
-- object ('' when it has none, as most jobs):
--
--   state|priority|attempt|max_attempts|timeout_ms|retention_ms|failed_retention_ms|
--   created_ms|ready_ms|run_at_ms|started_ms|lease_until_ms|finished_ms|unconfirmed|
--   default_attempts|worker|token|version|OTHERS
--
-- Numbers are decimal integers and flags '1', each '' when absent. So leasing and completing
-- a job are string operations: no JSON decoding or encoding, and no number formatting but
-- for the fields that change (Lua formats a number with printf's %.14g; cjson's encoding of
-- a record's numbers was the largest single cost of a job in Redis). `version` is the plugin
-- version of the attempt that succeeded: a `succeeded` record that still names its worker
-- (the hot path leaves it) has that attempt as the last entry of its history, implied, not
-- written (`get` adds it). A record written as one JSON object (before this layout) is
-- still read, and written back in this layout. Clients read records with `get` (JSON).
local RECORD_FIELDS = {
  'state', 'priority', 'attempt', 'max_attempts', 'timeout_ms', 'retention_ms',
  'failed_retention_ms', 'created_ms', 'ready_ms', 'run_at_ms', 'started_ms', 'lease_until_ms',
  'finished_ms', 'unconfirmed', 'default_attempts', 'worker', 'token', 'version',
}
-- The states a job ends in, each with whether it ended well: `ENDED[state]` says a job has
-- ended, `ENDED[state] == 'unsuccessful'` that it ended without succeeding.
local ENDED = {
  succeeded = 'succeeded', failed = 'unsuccessful', cancelled = 'unsuccessful', expired = 'unsuccessful',
}
-- Positions of the fields the hot paths use.
local R_STATE, R_ATTEMPT, R_MAX_ATTEMPTS, R_TIMEOUT, R_RETENTION = 1, 3, 4, 5, 6
local R_CREATED, R_READY, R_RUN_AT, R_STARTED, R_LEASE_UNTIL, R_FINISHED = 8, 9, 10, 11, 12, 13
local R_UNCONFIRMED, R_DEFAULT_ATTEMPTS, R_WORKER, R_TOKEN, R_VERSION, R_OTHERS = 14, 15, 16, 17, 18, 19
-- Each field's kind: n(umber), f(lag) or s(tring).
local RECORD_KINDS = { 's', 'n', 'n', 'n', 'n', 'n', 'n', 'n', 'n', 'n', 'n', 'n', 'n', 'f', 'f', 's', 's', 's' }
local RECORD_HOT = {}
for i = 1, #RECORD_FIELDS do RECORD_HOT[RECORD_FIELDS[i]] = i end
-- (Built with a loop: the library's load has no `string` table.)
local RECORD_PATTERN = '^'
for _ = 1, #RECORD_FIELDS do RECORD_PATTERN = RECORD_PATTERN .. '([^|]*)|' end
RECORD_PATTERN = RECORD_PATTERN .. '(.*)$'

-- The fields of record text `raw` as a table of strings, by position (nil when `raw` is
-- not in this layout).
local function record_fields(raw)
  local fields = { string.match(raw, RECORD_PATTERN) }
  if #fields == 0 then return nil end
  return fields
end

-- A record's text from its fields by position.
local function record_text(fields) return table.concat(fields, '|') end

-- A record as a table (what the scripts other than the hot paths work with).
local function decode(raw)
  local fields = record_fields(raw)
  if not fields then
    -- The former layout: one JSON object.
    local ok, record = pcall(cjson.decode, raw)
    if ok and type(record) == 'table' then return record end
    error('wasmgear: a job record of ' .. FN .. ' is neither a record nor JSON: ' .. string.sub(raw, 1, 60))
  end
  local record = {}
  if fields[R_OTHERS] ~= '' then record = cjson.decode(fields[R_OTHERS]) end
  for i, name in ipairs(RECORD_FIELDS) do
    local value = fields[i]
    if value ~= '' then
      local kind = RECORD_KINDS[i]
      if kind == 'n' then
        record[name] = tonumber(value)
      elseif kind == 'f' then
        record[name] = true
      else
        record[name] = value
      end
    end
  end
  return record
end

-- A record's text from the table.
local function encode(record)
  local fields, others = {}, nil
  for i, name in ipairs(RECORD_FIELDS) do
    local value = record[name]
    if value == nil or value == false then
      fields[i] = ''
    elseif RECORD_KINDS[i] == 'n' then
      fields[i] = int_once(value)
    elseif RECORD_KINDS[i] == 'f' then
      fields[i] = '1'
    else
      fields[i] = value
    end
  end
  for name, value in pairs(record) do
    if not RECORD_HOT[name] then
      others = others or {}
      others[name] = value
    end
  end
  fields[R_OTHERS] = (others and cjson.encode(others)) or ''
  return record_text(fields)
end

-- The fields of record text `raw` by position, whatever layout it was written in.
local function fields_of(raw) return record_fields(raw) or record_fields(encode(decode(raw))) end

-- Whether text `s` can be a hot field (worker ids, call ids and plugin versions are).
local function fits_record(s) return not string.find(s, '|', 1, true) end
local function fits_call_id(s) return fits_record(s) end
local CALL_ID_RULE = "a call id or worker id must not contain '|'"

-- The named options in args[from..to], NAME VALUE pairs, as name -> value; a name in
-- `lists` may repeat, its values gathered in order (name -> list). Returns nil and why for
-- a name that is neither in `known` nor in `lists`, a name given twice, or an odd count.
local function named_options(args, from, to, known, lists)
  if (to - from + 1) % 2 ~= 0 then return nil, 'options come in NAME VALUE pairs' end
  local options = {}
  for i = from, to, 2 do
    local name, value = args[i], args[i + 1]
    if lists and lists[name] then
      local list = options[name] or {}
      list[#list + 1] = value
      options[name] = list
    elseif known[name] then
      if options[name] then return nil, 'option ' .. name .. ' is given twice' end
      options[name] = value
    else
      return nil, 'unknown option ' .. tostring(name)
    end
  end
  return options
end

-- Records saved by a batch (begin_batch) and written together by flush(): number -> record
-- (a table), and number -> record text (written by the hot paths).
local PENDING = nil
local PENDING_TEXT = {}
-- The batch's other writes, made together by flush(): members to remove per sorted set,
-- expiry score/member pairs, count increments per field.
local PENDING_ZREM, PENDING_EXPIRES, PENDING_COUNTS = {}, {}, {}

local function load(number)
  if PENDING and PENDING[number] then return PENDING[number] end
  local raw = PENDING_TEXT[number] or redis.call('HGET', K.jobs, number)
  if raw then return decode(raw) end
  return nil
end

-- HMGET of `fields` of hash `key`, however many (Lua's unpack takes at most a few thousand
-- values at once): the values in order, false for a missing field.
local function hmget(key, fields)
  local values = {}
  local i = 1
  while i <= #fields do
    local last = math.min(i + 999, #fields)
    local got = redis.call('HMGET', key, unpack(fields, i, last))
    for j = 1, #got do values[i + j - 1] = got[j] end
    i = last + 1
  end
  return values
end

-- Loads the records of `numbers`: number -> record (absent: no such job).
local function load_many(numbers)
  local records = {}
  if #numbers == 0 then return records end
  local raws = hmget(K.jobs, numbers)
  for i, number in ipairs(numbers) do
    if PENDING and PENDING[number] then
      records[number] = PENDING[number]
    elseif raws[i] then
      records[number] = decode(raws[i])
    end
  end
  return records
end

local function save(number, record)
  if PENDING then
    PENDING[number] = record
    PENDING_TEXT[number] = nil
  else
    redis.call('HSET', K.jobs, number, encode(record))
  end
end

-- From here on, saves and finish() bookkeeping gather in memory until flush(): one call per
-- key for many jobs instead of one per job. load() sees the gathered records; a script
-- using it must not read the jobs hash, expiries or counts directly before flushing
-- (enqueue and complete do not).
local function begin_batch() PENDING = {} end

-- Calls `command key` with the flat list `args`, in chunks (Lua's unpack has a limit).
local function call_chunked(command, key, args)
  local i = 1
  while i <= #args do
    local last = math.min(i + 999, #args)
    redis.call(command, key, unpack(args, i, last))
    i = last + 1
  end
end

local function flush()
  for key, members in pairs(PENDING_ZREM) do call_chunked('ZREM', key, members) end
  call_chunked('ZADD', K.expires, PENDING_EXPIRES)
  for field, n in pairs(PENDING_COUNTS) do redis.call('HINCRBY', K.counts, field, int(n)) end
  if PENDING then
    local fields = {}
    for number, record in pairs(PENDING) do
      fields[#fields + 1] = number
      fields[#fields + 1] = encode(record)
    end
    for number, text in pairs(PENDING_TEXT) do
      fields[#fields + 1] = number
      fields[#fields + 1] = text
    end
    call_chunked('HSET', K.jobs, fields)
  end
  PENDING, PENDING_TEXT, PENDING_ZREM, PENDING_EXPIRES, PENDING_COUNTS = nil, {}, {}, {}, {}
end

-- The function's settings, read with one call the first time a script asks for one.
local CONFIG = nil
local function config(field)
  if not CONFIG then
    CONFIG = {}
    local flat = redis.call('HGETALL', K.config)
    for i = 1, #flat, 2 do CONFIG[flat[i]] = flat[i + 1] end
  end
  return CONFIG[field]
end

-- Whether the function has a concurrency cap (read once per call).
local CAPPED = nil
local function capped_function()
  if CAPPED == nil then CAPPED = tonumber(config('concurrency') or '0') > 0 end
  return CAPPED
end

-- Tells the function's workers that jobs may have become runnable: once per call is enough.
local WOKEN = false
local function wake_workers()
  if WOKEN then return end
  WOKEN = true
  redis.call('PUBLISH', K.work, 'work')
end

-- The call's events (JSON texts), published together when it ends (publish_events): one
-- message per event costs a command each (and, on Redis Cluster, a message to every node).
local EVENTS = {}
-- The most events one message carries (a bulk enqueue creates many jobs).
local EVENTS_PER_MESSAGE = 1000

-- Waited jobs (`watch`): a record's `watched` field says a client waits on the job, so
-- its `finish` event carries what `get` would answer (WATCH.finish_event) and the wait
-- needs no read of its own. WATCH.finishes: this call's finish events of watched jobs
-- (their place in EVENTS, the job, its state and keys), completed when the call's writes
-- are done. WATCH.output_key: the outputs' key, set by a call that stores outputs.
local WATCH = { finishes = {} }

-- Record `record` (a table, changed in place) as clients read it: the attempt that
-- succeeded, kept in the hot fields, is the last entry of its history; the worker of a
-- finished job, lease tokens, versions and the watch mark are the library's business.
function WATCH.public(record)
  local final = ENDED[record.state]
  if record.state == 'succeeded' and record.worker then
    local history = record.history or {}
    history[#history + 1] = {
      attempt = record.attempt, worker = record.worker, started_ms = record.started_ms,
      ended_ms = record.finished_ms, outcome = 'succeeded', version = record.version,
    }
    record.history = history
  end
  if final then record.worker = nil end
  record.token, record.version, record.watched = nil, nil, nil
  return record
end

-- Whether output `output` travels in a finish event: at most MAX_EVENT_OUTPUT bytes of
-- printable ASCII, tabs and line ends (JSON text carries them as they are).
function WATCH.carries(output)
  return #output <= MAX_EVENT_OUTPUT and not string.find(output, '[^\9\10\13\32-\126]')
end

-- The finish event of watched job `number`, ended in `state`, with its record as `get`
-- answers it and its output when small (else `output_omitted`: the client reads it).
-- The plain event when the record is already gone.
-- (`w`: what publish_finish kept of it.)
function WATCH.finish_event(w)
  local number, state = w.number, w.state
  local raw = redis.call('HGET', w.jobs, number)
  if not raw then return nil end
  local event = { event = 'finish', id = FN .. ':' .. number, state = state, record = WATCH.public(decode(raw)) }
  if not WATCH.output_key then
    -- (Only a call that ends jobs in success, `complete`, names the output key.)
    event.output_omitted = state == 'succeeded' or nil
    return cjson.encode(event)
  end
  local output = redis.call('HGET', WATCH.output_key, number)
  if output then
    if WATCH.carries(output) then event.output = output else event.output_omitted = true end
  end
  return cjson.encode(event)
end

-- Checkpoints (`checkpoint`): the latest bytes a job's attempts saved, in K.checkpoints by
-- number, and in its record `checkpoint = {bytes, ms}` (when they were saved). The attempts
-- that follow read them (`checkpoint_get`) to resume. They go when the job succeeds, with
-- its record when it is forgotten, or by a `retry` with `fresh`.
local CHECKPOINT = {}

-- Drops job `number`'s checkpoint, if `record` (changed in place, saved by the caller) has
-- one.
function CHECKPOINT.drop(number, record)
  if record.checkpoint then
    redis.call('HDEL', K.checkpoints, number)
    record.checkpoint = nil
  end
end

-- Publishes the call's events in order: a lone event as its JSON object, more as JSON
-- arrays of at most EVENTS_PER_MESSAGE events.
local function publish_events()
  for _, w in ipairs(WATCH.finishes) do
    EVENTS[w.at] = WATCH.finish_event(w) or EVENTS[w.at]
  end
  if #EVENTS == 1 then
    redis.call('PUBLISH', K.events, EVENTS[1])
  else
    for first = 1, #EVENTS, EVENTS_PER_MESSAGE do
      local last = math.min(first + EVENTS_PER_MESSAGE - 1, #EVENTS)
      redis.call('PUBLISH', K.events, '[' .. table.concat(EVENTS, ',', first, last) .. ']')
    end
  end
  EVENTS = {}
end

-- What each event means to the function's workers.
local WAKES = { create = true, ready = true, retry = true, config = true }

local function publish(event)
  EVENTS[#EVENTS + 1] = cjson.encode(event)
  if WAKES[event.event] then
    wake_workers()
  elseif event.event == 'cancel' then
    redis.call('PUBLISH', K.work, 'cancel ' .. event.id)
  elseif event.event == 'finish' and capped_function() then
    -- A job of a capped function ended: a worker held back by the cap may lease now.
    wake_workers()
  end
end

-- The `finish` event, built without cjson (it is sent for every job; ids and states need
-- no escaping beyond what the function name already forbids).
-- (A watched job's event is completed by publish_events.)
local function publish_finish(number, state, watched)
  EVENTS[#EVENTS + 1] = '{"event":"finish","id":"' .. FN .. ':' .. number .. '","state":"' .. state .. '"}'
  if watched then
    WATCH.finishes[#WATCH.finishes + 1] = { at = #EVENTS, number = number, state = state, jobs = K.jobs }
  end
  if capped_function() then wake_workers() end
end

-- Lua's cjson reads an empty JSON array as an empty table; write such fields as absent.
local function list_or_nil(list)
  if list and #list > 0 then return list end
  return nil
end

local function contains(list, value)
  for _, v in ipairs(list or {}) do if v == value then return true end end
  return false
end

-- Adds `value` to the list `fields[name]` (made when absent) unless it is there; true when
-- it was added.
local function list_add(fields, name, value)
  if contains(fields[name], value) then return false end
  local list = fields[name] or {}
  list[#list + 1] = value
  fields[name] = list
  return true
end

-- Takes `value` out of the list `fields[name]` (nil once empty); true when it was there.
local function list_drop(fields, name, value)
  if not contains(fields[name], value) then return false end
  local left = {}
  for _, v in ipairs(fields[name]) do if v ~= value then left[#left + 1] = v end end
  fields[name] = list_or_nil(left)
  return true
end

-- Decrements a counter of `counts`, deleting it at zero so dead groups do not pile up.
local function uncount(field)
  if redis.call('HINCRBY', K.counts, field, '-1') <= 0 then redis.call('HDEL', K.counts, field) end
end

---------------------------------------------------------------------------------------------
-- Groups: fairness inside a function. A job enqueued with a group (its record's `group_id`,
-- a tenant, customer or document key) is ready in `group_ready` rather than `ready`, as
-- 'GROUP\0PPPP\0NNNNNNNNNNNNN' (PPPP: PRIORITY_BASE - priority, 4 digits; the number
-- zero-padded to 13 digits; score 0, read by lex range): a group's first member is its
-- best job (priority, then oldest). `groups` is the round: the groups that may have ready
-- jobs, scored by their turn (the lowest goes next; a group that had its turn goes to the
-- back), '' standing for the jobs without a group (`ready`). A function none of whose jobs
-- has a group never has a round, and leases from `ready` alone, as before groups.
--
-- A group's limits (its own in `group_config`, else the function's `group_concurrency`,
-- `group_rate_limit` and `group_rate_interval_ms`) are checked when its turn comes: a
-- paused group, or one at its concurrency, leaves the round (its next job's end, or its
-- resume, puts it back); one at its rate limit waits in `group_wait` until the window lets
-- it lease again. `group_running` counts each group's leased jobs (and, for a group of
-- concurrency 1, a sequence, a job waiting out a retry's backoff: the next job of the
-- sequence must not overtake it). `group_rate` holds each rate-limited group's leases in
-- the window, 'GROUP\0TTTTTTTTTTTTT\0NUMBER:ATTEMPT' (T: lease time, ms, 13 digits).
--
-- A caller of an older build passes none of these keys (K.groups is nil): it leases from
-- `ready` alone.

-- The helpers, in one table (a chunk has at most 200 locals).
local GROUP = {}

-- Whether `group` is a group key: 1 to MAX_KEY_BYTES bytes of printable ASCII but space,
-- '"', '\' and '|' (kept as is in records and members).
function GROUP.fits(group)
  return type(group) == 'string' and group ~= '' and #group <= MAX_KEY_BYTES
    and not string.find(group, '[^!-~]') and not string.find(group, '["\\|]')
end

-- The group of a record's other fields as text (nil when it has none). (cjson writes '/'
-- as '\/'.)
function GROUP.of_text(others)
  if others == '' then return nil end
  local group = string.match(others, '"group_id":"([^"]*)"')
  if group then group = string.gsub(group, '\\/', '/') end
  return group
end

-- A queued job's member of `group_ready`.
function GROUP.member(group, priority, number)
  return group .. '\0' .. string.format('%04d', PRIORITY_BASE - priority) .. '\0' .. pad(number)
end

-- The bounds of `group`'s members in `group_ready` and `group_rate`, for BYLEX ranges.
function GROUP.first(group) return '[' .. group .. '\0' end
function GROUP.last(group) return '(' .. group .. '\1' end

-- Whether `group` has ready jobs.
function GROUP.has_ready(group)
  if group == '' then return redis.call('ZCARD', K.ready) > 0 end
  return #redis.call('ZRANGE', K.group_ready, GROUP.first(group), GROUP.last(group), 'BYLEX', 'LIMIT', '0', '1') > 0
end

-- Puts `group` at the back of the round (where it is, if it is in it already). Returns
-- true when it joined.
function GROUP.join(group)
  local last = redis.call('ZRANGE', K.groups, '-1', '-1', 'WITHSCORES')
  local turn = 1
  if #last > 0 then turn = tonumber(last[2]) + 1 end
  return redis.call('ZADD', K.groups, 'NX', int(turn), group) == 1
end

-- Each group's limits, read once per call: {cap, rate_limit, rate_ms, paused}.
GROUP.LIMITS, GROUP.CONFIGURED = {}, nil
function GROUP.limits(group)
  local limits = GROUP.LIMITS[group]
  if limits then return limits end
  -- Its own: 'CONCURRENCY|RATE_LIMIT|RATE_INTERVAL_MS|PAUSED', each '' for the default.
  if GROUP.CONFIGURED == nil then GROUP.CONFIGURED = redis.call('EXISTS', K.group_config) == 1 end
  local text = GROUP.CONFIGURED and redis.call('HGET', K.group_config, group) or ''
  local own = { string.match(text, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$') }
  local function pick(i, default) if own[i] and own[i] ~= '' then return own[i] end return config(default) end
  limits = {
    cap = tonumber(pick(1, 'group_concurrency') or '0') or 0,
    rate_limit = tonumber(pick(2, 'group_rate_limit') or '0') or 0,
    rate_ms = tonumber(pick(3, 'group_rate_interval_ms') or '0') or 0,
    paused = own[4] == '1',
  }
  GROUP.LIMITS[group] = limits
  return limits
end

-- How many jobs of `group` hold its slots (see above). Only a group with a concurrency
-- limit counts them (a group without one never waits for a slot, so its jobs' ends cost
-- nothing); a limit set or changed recounts them (GROUP.recount).
function GROUP.running(group) return tonumber(redis.call('HGET', K.group_running, group) or '0') end

-- A job of `group`, which has a concurrency limit, took one of its slots.
function GROUP.take(group) redis.call('HINCRBY', K.group_running, group, '1') end

-- A job of `group` left `leased` (or ended its backoff's hold): its slot is free again, if
-- its group counts them.
function GROUP.release(group)
  if GROUP.limits(group).cap > 0 then GROUP.free(group) end
end

-- Counts again the slots every group with a concurrency limit has taken, from the jobs
-- leased now: after a limit was set, changed or cleared (jobs leased before were counted
-- under the old one, or not at all). A sequence's job waiting out a backoff is not among
-- them: its hold ends when it is ready again.
function GROUP.recount()
  redis.call('DEL', K.group_running)
  local numbers = redis.call('ZRANGE', K.leased, '0', '-1')
  local raws = hmget(K.jobs, numbers)
  local counts = {}
  for i = 1, #numbers do
    local group = raws[i] and string.match(raws[i], '"group_id":"([^"]*)"')
    if group then
      group = string.gsub(group, '\\/', '/')
      if GROUP.limits(group).cap > 0 then counts[group] = (counts[group] or 0) + 1 end
    end
  end
  local flat = {}
  for group, count in pairs(counts) do
    flat[#flat + 1] = group
    flat[#flat + 1] = int(count)
  end
  call_chunked('HSET', K.group_running, flat)
end

-- A job of `group` gave its slot back: the group takes its turns again if it has ready jobs
-- (it may have left the round at its concurrency), and workers held back hear of it.
function GROUP.free(group)
  if redis.call('HINCRBY', K.group_running, group, '-1') <= 0 then redis.call('HDEL', K.group_running, group) end
  -- (A group still in the round needs nothing more: the common case.)
  if redis.call('ZSCORE', K.groups, group) then return end
  if GROUP.has_ready(group) and GROUP.join(group) then wake_workers() end
end

-- Job `number` (its record) leaves `leased`: the slot of its group goes with it, unless
-- `hold` (a sequence's job waiting out a retry's backoff keeps it: group_held).
function GROUP.unlease(number, record, hold)
  redis.call('ZREM', K.leased, number)
  local group = record.group_id
  if not group or not K.groups then return end
  if hold and GROUP.limits(group).cap == 1 then
    record.group_held = true
  else
    GROUP.release(group)
  end
end

-- A job that held its sequence's slot through a retry's backoff (group_held) gives it back.
function GROUP.unhold(record)
  if record.group_held then
    record.group_held = nil
    if K.groups then GROUP.release(record.group_id) end
  end
end

-- Puts a job in the ready set (state queued): `ready`, or its group's place in
-- `group_ready` (and the group in the round).
local function make_ready(number, record)
  record.state = 'queued'
  record.run_at_ms = nil
  record.ready_ms = NOW
  GROUP.unhold(record)
  local group = record.group_id
  if group and K.groups then
    redis.call('ZADD', K.group_ready, 0, GROUP.member(group, record.priority, number))
    GROUP.join(group)
  else
    redis.call('ZADD', K.ready, int((PRIORITY_BASE - record.priority) * NUMBER_SPAN + tonumber(number)), number)
  end
end

-- Takes a queued job out of the ready set.
function GROUP.unready(number, record)
  local group = record.group_id
  if group and K.groups then
    redis.call('ZREM', K.group_ready, GROUP.member(group, record.priority, number))
  else
    redis.call('ZREM', K.ready, number)
  end
end

-- How many jobs are ready, with a group or without.
function GROUP.ready_count()
  local count = redis.call('ZCARD', K.ready)
  if K.groups then count = count + redis.call('ZCARD', K.group_ready) end
  return count
end

-- Puts a job in the scheduled set until `at` (state scheduled).
local function make_scheduled(number, record, at)
  record.state = 'scheduled'
  record.run_at_ms = at
  redis.call('ZADD', K.scheduled, int(at), number)
end

-- Appends an attempt's log to the job's log, keeping at most MAX_LOG bytes (the newest).
local function append_log(number, attempt, text)
  if text == '' then return end
  local log = (redis.call('HGET', K.logs, number) or '') .. '--- attempt ' .. attempt .. ' ---\n' .. text
  if #log > MAX_LOG then log = string.sub(log, #log - MAX_LOG + 1) end
  redis.call('HSET', K.logs, number, log)
end

-- Records an ended attempt in the job's history, which keeps its newest MAX_HISTORY entries
-- (a job retried again and again, or whose leases keep running out unconfirmed, would grow
-- without bound); `history_dropped` counts those let go.
local function add_history(record, outcome, message, version)
  local history = record.history or {}
  history[#history + 1] = {
    attempt = record.attempt, worker = record.worker, started_ms = record.started_ms,
    ended_ms = NOW, outcome = outcome, message = message, version = version,
  }
  while #history > MAX_HISTORY do
    table.remove(history, 1)
    record.history_dropped = (record.history_dropped or 0) + 1
  end
  record.history = history
end

---------------------------------------------------------------------------------------------
-- Statistics (qless): per day, wait and run times as count, sum and sum of squares (mean
-- and variance follow) and a histogram; failures (failed attempts), retries, failed (jobs
-- failed for good). Every field is a sum, so a call adds to it without reading it first
-- (days written before sums were kept have `mean` and `vk`, Welford's; readers take both).

local STAT_KINDS = { 'wait', 'run' }
local STAT_COUNTERS = { 'failures', 'retries', 'failed' }

-- Every field one day can have, so a day can be forgotten with one HDEL.
local function stat_fields(day)
  local fields = {}
  for _, name in ipairs(STAT_COUNTERS) do fields[#fields + 1] = day .. ':' .. name end
  for _, kind in ipairs(STAT_KINDS) do
    local p = day .. ':' .. kind .. ':'
    for _, name in ipairs({ 'count', 'sum', 'squares', 'mean', 'vk' }) do fields[#fields + 1] = p .. name end
    for i = 0, 59 do fields[#fields + 1] = p .. 's' .. i end
    for i = 1, 59 do fields[#fields + 1] = p .. 'm' .. i end
    for i = 1, 23 do fields[#fields + 1] = p .. 'h' .. i end
    for i = 1, 30 do fields[#fields + 1] = p .. 'd' .. i end
  end
  return fields
end

-- The histogram bucket of a duration: seconds for the first minute, minutes for the first
-- hour, hours for the first day, then days (the last bucket, d30, holds everything longer).
local function stat_bucket(ms)
  local s = ms / 1000
  if s < 60 then return 's' .. int_once(math.floor(s)) end
  if s < 3600 then return 'm' .. int_once(math.floor(s / 60)) end
  if s < 86400 then return 'h' .. int_once(math.floor(s / 3600)) end
  return 'd' .. int_once(math.min(math.floor(s / 86400), 30))
end

-- What the call adds to the statistics, written together by stats_flush() at its end:
-- kind -> durations (ms), and name -> how many.
local STAT_SAMPLES, STAT_COUNTS = {}, {}

-- Adds the durations `samples` (ms) to today's `kind` statistics (at the end of the call).
local function stat_times(kind, samples)
  local list = STAT_SAMPLES[kind] or {}
  for i = 1, #samples do list[#list + 1] = samples[i] end
  STAT_SAMPLES[kind] = list
end

local function stat_time(kind, ms) stat_times(kind, { ms }) end

local function stat_count(name) STAT_COUNTS[name] = (STAT_COUNTS[name] or 0) + 1 end

-- Days of this function's statistics written before they were sums (`mean` and `vk`,
-- Welford's) are turned into sums the first time this code writes to them, so that a day
-- never mixes the two (its count would cover samples its sum does not).
local function stats_convert_day(prefix)
  for _, kind in ipairs(STAT_KINDS) do
    local p = prefix .. kind .. ':'
    local old = redis.call('HMGET', K.stats, p .. 'count', p .. 'mean', p .. 'vk', p .. 'sum', p .. 'squares')
    local count, mean, vk = tonumber(old[1] or ''), tonumber(old[2] or ''), tonumber(old[3] or '')
    if mean then
      count = count or 0
      local sum = (tonumber(old[4] or '') or 0) + mean * count
      local squares = (tonumber(old[5] or '') or 0) + (vk or 0) + count * mean * mean
      redis.call('HSET', K.stats, p .. 'sum', string.format('%.0f', sum), p .. 'squares', string.format('%.0f', squares))
      redis.call('HDEL', K.stats, p .. 'mean', p .. 'vk')
    end
  end
end

-- On the first write of a day: the day joins the days kept (once, in order, whichever way
-- the clock stepped), and those past STATS_DAYS are forgotten.
local function stats_new_day(day)
  local days = cjson.decode(redis.call('HGET', K.stats, 'days') or '[]')
  local known = false
  for _, d in ipairs(days) do if d == day then known = true end end
  if not known then
    days[#days + 1] = day
    table.sort(days)
  end
  while #days > STATS_DAYS do
    redis.call('HDEL', K.stats, unpack(stat_fields(table.remove(days, 1))))
  end
  redis.call('HSET', K.stats, 'days', cjson.encode(days))
  stats_convert_day(int(day) .. ':')
end

-- Writes what the call added to the statistics: for each kind, HINCRBY of today's count,
-- sum (ms), sum of squares (ms²) and each histogram bucket hit; HINCRBY of the counters.
-- No field is read, and no number is formatted as a float.
local function stats_flush()
  local samples_of, counts = STAT_SAMPLES, STAT_COUNTS
  STAT_SAMPLES, STAT_COUNTS = {}, {}
  if not next(samples_of) and not next(counts) then return end
  local day = math.floor(NOW / DAY_MS)
  local prefix = int(day) .. ':'
  -- (`sums_day`, not the `today` of the code before sums: on the day that code was
  -- replaced, its day is converted once.)
  if tonumber(redis.call('HGET', K.stats, 'sums_day') or '-1') ~= day then
    stats_new_day(day)
    redis.call('HSET', K.stats, 'sums_day', int(day))
    redis.call('HDEL', K.stats, 'today')
  end
  for _, kind in ipairs(STAT_KINDS) do
    local samples = samples_of[kind]
    if samples and #samples > 0 then
      local sum, squares, buckets = 0, 0, {}
      for i = 1, #samples do
        local ms = math.max(samples[i], 0)
        sum = sum + ms
        squares = squares + ms * ms
        local bucket = stat_bucket(ms)
        buckets[bucket] = (buckets[bucket] or 0) + 1
      end
      local p = prefix .. kind .. ':'
      redis.call('HINCRBY', K.stats, p .. 'count', int(#samples))
      redis.call('HINCRBY', K.stats, p .. 'sum', int(sum))
      -- The squares as a whole number while they fit in one (HINCRBYFLOAT formats a long
      -- double, which costs Redis more than the rest of the statistics): past 2^53, or once
      -- the stored sum would pass 2^63 (HINCRBY refuses and changes nothing), as a float.
      local squares_field = p .. 'squares'
      local added = squares < 2 ^ 53 and redis.pcall('HINCRBY', K.stats, squares_field, int(squares))
      if not added or type(added) == 'table' then
        redis.call('HINCRBYFLOAT', K.stats, squares_field, string.format('%.0f', squares))
      end
      for bucket, n in pairs(buckets) do redis.call('HINCRBY', K.stats, p .. bucket, int(n)) end
    end
  end
  for name, n in pairs(counts) do redis.call('HINCRBY', K.stats, prefix .. name, int(n)) end
end

---------------------------------------------------------------------------------------------
-- Finishing jobs, and what that does to the jobs depending on them.

-- How many jobs the call has finished so far.
local FINISHED = 0

-- Dependents in this function still to be told about a finished job: {number, dep_id, state}.
local SETTLE = {}
-- Dependents in other functions to be told by the caller (it runs `resolve` on their
-- function): a flat list of dependent id, dependency id, dependency state.
local NOTIFY = {}

-- How long a finished job's record is kept (ms): the longer retention for a failed job.
local function retention_of(record)
  local keep = record.retention_ms
  local failed = record.state == 'failed' or record.state == 'expired'
  if failed and (record.failed_retention_ms or 0) > keep then keep = record.failed_retention_ms end
  return keep
end

-- Ends a job in `state` ('succeeded', 'failed' or 'cancelled') with `err` ({class, message}
-- or nil): out of the set it was in (`from`, or else every set it could be in), kept until
-- its retention is over, counted, its uniq key freed, its failure grouped, its dependents
-- told.
-- What ending a job in `state` does outside its record: out of `from` (or every set it
-- could be in), into the expiry set for `keep` ms, counted, announced.
-- `watched`: whether a client waits on the job (its record's `watched`).
local function finished(number, state, keep, from, watched)
  FINISHED = FINISHED + 1
  if from and PENDING then
    PENDING_ZREM[from] = PENDING_ZREM[from] or {}
    table.insert(PENDING_ZREM[from], number)
  elseif from then
    redis.call('ZREM', from, number)
  else
    for _, key in ipairs({ K.ready, K.scheduled, K.leased, K.waiting }) do redis.call('ZREM', key, number) end
  end
  if PENDING then
    PENDING_EXPIRES[#PENDING_EXPIRES + 1] = int_once(NOW + keep)
    PENDING_EXPIRES[#PENDING_EXPIRES + 1] = number
    PENDING_COUNTS[state] = (PENDING_COUNTS[state] or 0) + 1
  else
    redis.call('ZADD', K.expires, int(NOW + keep), number)
    redis.call('HINCRBY', K.counts, state, '1')
  end
  publish_finish(number, state, watched)
end

-- Tells the dependents of job `number`, which ended in `state` (`fields`: its record, or
-- only its other fields, with `batch`, `dependents` and `untold`): those in this function
-- in this call (settle), those in other functions and the job's batch (which counts its
-- end with `batch_done`, on the batch's slot) by the caller, the job kept until the caller
-- says it told them (`told`): if the caller dies first, a dependent's re-check, or the
-- batch's, still finds this record.
--
-- A dependent holds the job too (it stays in `untold`) until it has ended itself
-- (release_dependencies): a dependent that runs late still reads this job's output,
-- whatever its retention; at most UNTOLD_MAX_MS.
local function tell_dependents(number, fields, state)
  local function hold(dependent) list_add(fields, 'untold', dependent) end
  local function tell_later(dependent)
    NOTIFY[#NOTIFY + 1] = dependent
    NOTIFY[#NOTIFY + 1] = id_of(number)
    NOTIFY[#NOTIFY + 1] = state
    hold(dependent)
  end
  if fields.batch then tell_later('batch ' .. fields.batch) end
  for _, dependent in ipairs(fields.dependents or {}) do
    local fn, dependent_number = split_id(dependent)
    if fn == FN then
      SETTLE[#SETTLE + 1] = { dependent_number, id_of(number), state }
      hold(dependent)
    else
      tell_later(dependent)
    end
  end
end

-- Lets a finished job go at its own retention once it holds for nobody (`untold` empty).
local function expire_as_usual(number, record)
  if PENDING then
    PENDING_EXPIRES[#PENDING_EXPIRES + 1] = int(record.finished_ms + retention_of(record))
    PENDING_EXPIRES[#PENDING_EXPIRES + 1] = number
  else
    redis.call('ZADD', K.expires, int(record.finished_ms + retention_of(record)), number)
  end
end

-- Job `number` ended: its dependencies (`after`) no longer hold for it. One in this
-- function is let go here; one in another function by the caller, with `told` (returned in
-- notify as dependent `release DEPENDENCY`).
local function release_dependencies(number, after)
  local me = id_of(number)
  for _, dep in ipairs(after or {}) do
    local fn, dep_number = split_id(dep)
    if not (fn and job_number(dep_number)) then
      -- (A number no job can have: nothing holds.)
    elseif fn ~= FN then
      NOTIFY[#NOTIFY + 1] = 'release ' .. dep
      NOTIFY[#NOTIFY + 1] = me
      NOTIFY[#NOTIFY + 1] = 'ended'
    else
      local dep_record = load(dep_number)
      if dep_record and list_drop(dep_record, 'untold', me) then
        save(dep_number, dep_record)
        if not dep_record.untold and dep_record.finished_ms then expire_as_usual(dep_number, dep_record) end
      end
    end
  end
end

-- Keys kept past their job (`dedup`, KEY -> text; `dedup_exp`, KEY scored by when that
-- ends): 'w|UNTIL', a uniq key whose job succeeded with `uniq_for`, still answering with
-- that job (the key stays in `uniq`) until UNTIL; 't|UNTIL|COUNT|NUMBER', a throttle
-- window: COUNT jobs made with the key since it opened, NUMBER the latest, until UNTIL.
local DEDUP = {}

-- Job `number` with uniq key `key` ended in `state`: the key is let go, or, for a job that
-- succeeded with `uniq_for` ms, kept for that long (a window).
function DEDUP.ended(number, key, uniq_for, state)
  if redis.call('HGET', K.uniq, key) ~= tostring(number) then return end
  if state == 'succeeded' and uniq_for and K.dedup then
    redis.call('HSET', K.dedup, key, 'w|' .. int(NOW + uniq_for))
    redis.call('ZADD', K.dedup_exp, int(NOW + uniq_for), key)
  else
    redis.call('HDEL', K.uniq, key)
  end
end

-- Whether uniq key `key` is in the window of a job that succeeded with it.
function DEDUP.window_open(key)
  if not K.dedup then return false end
  local until_ms = string.match(redis.call('HGET', K.dedup, key) or '', '^w|(%d+)$')
  return until_ms ~= nil and tonumber(until_ms) > NOW
end

-- A new job takes uniq key `key`: a window it had ends.
function DEDUP.taken(key)
  if not K.dedup then return end
  redis.call('HDEL', K.dedup, key)
  redis.call('ZREM', K.dedup_exp, key)
end

-- The throttle window of `key` (nil when none is open): {until, count, number}.
function DEDUP.throttle_window(key)
  local until_ms, count, number = string.match(redis.call('HGET', K.dedup, key) or '', '^t|(%d+)|(%d+)|(%d+)$')
  if not until_ms or tonumber(until_ms) <= NOW then return nil end
  return { tonumber(until_ms), tonumber(count), number }
end

-- Job `number` was made with throttle key `key` (at most `limit` per `period` ms).
function DEDUP.throttled(key, number, period)
  local window = DEDUP.throttle_window(key)
  if window then
    redis.call('HSET', K.dedup, key, 't|' .. int(window[1]) .. '|' .. int(window[2] + 1) .. '|' .. number)
  else
    redis.call('HSET', K.dedup, key, 't|' .. int(NOW + period) .. '|1|' .. number)
    redis.call('ZADD', K.dedup_exp, int(NOW + period), key)
  end
end

-- Forgets the windows that are over (at most BATCH): a uniq key whose window ended leaves
-- `uniq` (its job has ended: a new job taking the key ends the window first).
function DEDUP.over()
  if not K.dedup then return end
  for _, key in ipairs(redis.call('ZRANGE', K.dedup_exp, '-inf', int(NOW), 'BYSCORE', 'LIMIT', '0', int(BATCH))) do
    redis.call('ZREM', K.dedup_exp, key)
    local kind = string.sub(redis.call('HGET', K.dedup, key) or '', 1, 1)
    redis.call('HDEL', K.dedup, key)
    if kind == 'w' then
      local holder = redis.call('HGET', K.uniq, key)
      local held = holder and load(holder)
      if not held or ENDED[held.state] then
        redis.call('HDEL', K.uniq, key)
      end
    end
  end
end

local function finish(number, record, state, err, from)
  -- A queued job of a group leaves its group's place; one holding its sequence's slot
  -- lets it go. (A leased job's slot went when it left `leased`: unlease.)
  if record.group_id and record.state == 'queued' then GROUP.unready(number, record) end
  GROUP.unhold(record)
  record.state = state
  record.finished_ms = NOW
  record.run_at_ms = nil
  record.worker, record.token, record.lease_until_ms, record.unconfirmed = nil, nil, nil, nil
  record.version = nil
  if err then record.error = err elseif state == 'succeeded' then record.error = nil end
  finished(number, state, retention_of(record), from, record.watched)
  if state == 'failed' or state == 'expired' then
    -- (An expired job is in the failure group `expired`: listed, and retried, with them.)
    local group = (record.error and record.error.class) or 'unknown'
    record.group = group
    redis.call('ZADD', K.failed, 0, group .. '\0' .. pad(number))
    redis.call('HINCRBY', K.counts, 'failed:' .. group, '1')
    if state == 'failed' then stat_count('failed') end
  end
  if record.uniq then DEDUP.ended(number, record.uniq, record.uniq_for, state) end
  tell_dependents(number, record, state)
  save(number, record)
  release_dependencies(number, record.after)
end

-- Undoes `finish` for a job that runs again (`retry`): out of the expiry set, the counts and
-- its failure group.
local function unfinish(number, record)
  redis.call('ZREM', K.expires, number)
  uncount(record.state)
  if record.state == 'failed' or record.state == 'expired' then
    local group = record.group or 'unknown'
    redis.call('ZREM', K.failed, group .. '\0' .. pad(number))
    uncount('failed:' .. group)
  end
  record.group, record.finished_ms, record.error, record.cancel_requested_ms = nil, nil, nil, nil
  record.progress = nil
end

-- Whether `record`'s job runs even though its dependency `dep_id` failed, was cancelled or
-- is gone: the dependency's edge is `ignore`, or one of its edges is `continue` (such a job
-- runs once every dependency has ended, however). Policies other than the default
-- (`cancel`) are kept in `on_failure`: dependency id -> 'ignore' or 'continue'.
local function tolerates(record, dep_id)
  local policies = record.on_failure
  if type(policies) ~= 'table' then return false end
  if policies[dep_id] then return true end
  for _, policy in pairs(policies) do
    if policy == 'continue' then return true end
  end
  return false
end

-- The dependencies a waiting job still waits on (`waiting_on`) by position, per record
-- table, for the call: a fan-in's dependent told of many dependencies in one call finds and
-- drops each in constant time, not by a scan of its list.
local WAIT_INDEX = {}
local function waiting_index(record)
  local index = WAIT_INDEX[record]
  if not index then
    index = {}
    for i, dep in ipairs(record.waiting_on or {}) do index[dep] = i end
    WAIT_INDEX[record] = index
  end
  return index
end

-- Drops `dep_id` from `record`'s waiting_on (the last entry takes its place: the list is a
-- set); nil once empty.
local function stop_waiting(record, dep_id)
  local list, index = record.waiting_on, waiting_index(record)
  local at = index[dep_id]
  if not at then return end
  local last = list[#list]
  list[at], index[last] = last, at
  list[#list], index[dep_id] = nil, nil
  if #list == 0 then record.waiting_on = nil end
end

-- Tells waiting job `number` that its dependency `dep_id` is in `dep_state`: 'succeeded'
-- (the job runs once all its dependencies have ended as they must), 'failed', 'cancelled'
-- or 'missing' (the job is cancelled, naming the dependency, unless it tolerates that: see
-- tolerates), or 'pending' (still running; only pushes back the next re-check).
local function resolve(number, dep_id, dep_state)
  local record = load(number)
  if not record or record.state ~= 'waiting' or not waiting_index(record)[dep_id] then return end
  if dep_state == 'pending' then
    record.relinks = (record.relinks or 0) + 1
    local wait = math.min(RELINK_FIRST_MS * 2 ^ math.min(record.relinks, 20), RELINK_MAX_MS)
    redis.call('ZADD', K.waiting, int(NOW + wait), number)
    save(number, record)
    return
  end
  if dep_state == 'succeeded' or tolerates(record, dep_id) then
    stop_waiting(record, dep_id)
    if record.waiting_on then save(number, record) return end
    redis.call('ZREM', K.waiting, number)
    record.relinks = nil
    if record.run_at_ms and record.run_at_ms > NOW then
      make_scheduled(number, record, record.run_at_ms)
    else
      make_ready(number, record)
    end
    save(number, record)
    publish({ event = 'ready', id = id_of(number) })
    return
  end
  local why = 'dependency ' .. dep_id .. ' ' .. dep_state
  if dep_state == 'missing' then why = 'dependency ' .. dep_id .. ' no longer exists' end
  finish(number, record, 'cancelled', { class = 'dependency', message = why })
end

-- Tells this function's dependents about finished jobs, until no more are left (a
-- cancelled dependent may have dependents of its own).
local function settle()
  local i = 1
  while i <= #SETTLE do
    local item = SETTLE[i]
    resolve(item[1], item[2], item[3])
    i = i + 1
  end
  SETTLE = {}
end

-- Deletes finished jobs `numbers` and everything kept about them, with one call per key
-- however many they are (tags and failure groups aside), except those that must outlive
-- their retention because they still hold for dependents or their batch (`untold`; for at
-- most UNTOLD_MAX_MS): those are looked at again in RELINK_MAX_MS.
local function forget_finished(numbers)
  if #numbers == 0 then return end
  local raws = hmget(K.jobs, numbers)
  local gone, later, uncounted = {}, {}, {}
  for i, number in ipairs(numbers) do
    local raw = raws[i]
    -- A record without other fields (it ends with '|') has no tags, failure group or
    -- dependents to tell: its state is all there is to read.
    local state = raw and string.byte(raw, -1) == 124 and string.match(raw, '^(%a+)|')
    local record = raw and not state and decode(raw)
    if record and record.untold and NOW - (record.finished_ms or NOW) < UNTOLD_MAX_MS then
      later[#later + 1] = int_once(NOW + RELINK_MAX_MS)
      later[#later + 1] = number
    else
      gone[#gone + 1] = number
      if record then
        for _, tag in ipairs(record.tags or {}) do redis.call('ZREM', K.tagged, tag .. '\0' .. pad(number)) end
        -- A child's `once` key goes with it (enqueue makes the job again if asked).
        if record.once and redis.call('HGET', K.ticks, 'once\0' .. record.once) == number then
          redis.call('HDEL', K.ticks, 'once\0' .. record.once)
        end
        state = record.state
        if state == 'failed' or state == 'expired' then
          local group = record.group or 'unknown'
          redis.call('ZREM', K.failed, group .. '\0' .. pad(number))
          uncounted['failed:' .. group] = (uncounted['failed:' .. group] or 0) + 1
        end
      end
      if ENDED[state] then
        uncounted[state] = (uncounted[state] or 0) + 1
      end
    end
  end
  call_chunked('ZADD', K.expires, later)
  for _, key in ipairs({ K.jobs, K.input, K.output, K.logs, K.checkpoints }) do call_chunked('HDEL', key, gone) end
  call_chunked('ZREM', K.expires, gone)
  for field, n in pairs(uncounted) do
    if redis.call('HINCRBY', K.counts, field, int(-n)) <= 0 then redis.call('HDEL', K.counts, field) end
  end
end

-- Forgets finished jobs whose retention is over, and the oldest beyond the function's cap,
-- except those in `keep` (a set of numbers the calling script still reads).
local function forget_expired(keep)
  keep = keep or {}
  -- At least as many as the call has finished, so that a call finishing many jobs (a
  -- worker reporting hundreds at once) does not outrun the cap.
  local most = BATCH + FINISHED
  local due, seen = {}, {}
  for _, number in ipairs(redis.call('ZRANGEBYSCORE', K.expires, '-inf', int(NOW), 'LIMIT', '0', int(most))) do
    if not keep[number] then
      due[#due + 1] = number
      seen[number] = true
    end
  end
  local cap = tonumber(config('keep_finished') or DEFAULT_KEEP_FINISHED)
  -- Those going now no longer count against the cap.
  local excess = redis.call('ZCARD', K.expires) - #due - cap
  if excess > 0 then
    for _, number in ipairs(redis.call('ZRANGE', K.expires, 0, math.min(excess + #due, most) - 1)) do
      if not keep[number] and not seen[number] then due[#due + 1] = number end
    end
  end
  forget_finished(due)
  DEDUP.over()
end

---------------------------------------------------------------------------------------------
-- Calls sent again: a client whose reply was lost (a timeout, a dropped connection, a
-- cluster client re-sending after a reconnect) sends the same call with the same id, and
-- gets the first reply instead of a second application.

-- The stored reply of call `id` ('' for a call without an id), or nil.
-- A call answered again is kept a while longer, which is a write: a `WAIT` the caller sends
-- after it, on a new connection (its first one dropped), then waits for everything the
-- primary wrote before, the first answer's writes among them (`WAIT` counts from a
-- connection's last write).
local function remembered(id)
  if id == '' then return nil end
  local reply = redis.call('HGET', K.calls, id)
  if reply then redis.call('ZADD', K.calls_exp, int(NOW + CALL_MEMORY_MS), id) end
  return reply
end

-- Stores `reply` (a string) as the reply of call `id`, and forgets replies past their time.
local function remember(id, reply)
  local old = redis.call('ZRANGEBYSCORE', K.calls_exp, '-inf', int(NOW), 'LIMIT', '0', int(BATCH))
  if #old > 0 then
    redis.call('HDEL', K.calls, unpack(old))
    redis.call('ZREM', K.calls_exp, unpack(old))
  end
  if id == '' then return end
  redis.call('HSET', K.calls, id, reply)
  redis.call('ZADD', K.calls_exp, int(NOW + CALL_MEMORY_MS), id)
end

-- Forgets the replies kept for calls `ids` (a list, or nil), whose replies the caller says
-- it has.
local function forget_replies(ids)
  if ids and #ids > 0 then
    redis.call('HDEL', K.calls, unpack(ids))
    redis.call('ZREM', K.calls_exp, unpack(ids))
  end
end

---------------------------------------------------------------------------------------------
-- Leasing (`lease`, and `complete` asked to lease the next jobs in the same call).


-- A lease as `lease` answers it: 'NUMBER|ATTEMPT|MAX_ATTEMPTS|TIMEOUT_MS|CREATED_MS|TOKEN',
-- from the leased record's fields (one string rather than six replies per job), then
-- '|TRACEPARENT' for a job enqueued with a trace context, and '|TRACESTATE' after it when
-- it has one (last: it may hold '|').
local function lease_row(number, f)
  local row = number .. '|' .. f[R_ATTEMPT] .. '|' .. f[R_MAX_ATTEMPTS] .. '|' .. f[R_TIMEOUT] .. '|'
    .. f[R_CREATED] .. '|' .. f[R_TOKEN]
  local others = f[R_OTHERS]
  if others == '' then return row end
  -- (A traceparent is lower-case hex and '-': cjson writes it as it is.)
  local trace = string.match(others, '"trace":"([%x%-]+)"')
  if not trace then return row end
  row = row .. '|' .. trace
  if string.find(others, '"tracestate":', 1, true) then
    row = row .. '|' .. (cjson.decode(others).tracestate or '')
  end
  return row
end

-- The leases a call `call_id` made (its remembered `numbers`, comma-separated) that it
-- still holds, as lease_jobs returns them.
local function held_leases(call_id, numbers)
  local leases = {}
  for number in string.gmatch(numbers, '%d+') do
    local raw = redis.call('HGET', K.jobs, number)
    local f = raw and fields_of(raw)
    if f and f[R_STATE] == 'running' and f[R_TOKEN] == call_id .. ':' .. number .. ':' .. f[R_ATTEMPT] then
      leases[#leases + 1] = lease_row(number, f)
      leases[#leases + 1] = redis.call('HGET', K.input, number) or ''
    end
  end
  return leases
end

-- Jobs the call's reclaim made ready again (their worker stopped renewing their leases).
local RECLAIMED = 0

-- Expiry: a job enqueued with a deadline (`expires_ms` in its record; in `expiring`,
-- scored by it, until it starts) that has not started by then ends `expired` (failure
-- group `expired`) and never runs.
local EXPIRY = {}

-- Ends job `number` (its record), which has not started by its deadline, `expired`.
function EXPIRY.expire(number, record)
  redis.call('ZREM', K.expiring, number)
  finish(number, record, 'expired', { class = 'expired',
    message = 'not started by its deadline (expires_in or expires_at); it never ran' })
end

-- Ends the jobs whose deadline has passed before they started (at most BATCH per call).
function EXPIRY.due()
  if not K.expiring then return end
  for _, number in ipairs(redis.call('ZRANGE', K.expiring, '-inf', int(NOW), 'BYSCORE', 'LIMIT', '0', int(BATCH))) do
    local record = load(number)
    local waiting = record and record.attempt == 0
      and (record.state == 'queued' or record.state == 'scheduled' or record.state == 'waiting')
    if waiting then
      EXPIRY.expire(number, record)
    else
      redis.call('ZREM', K.expiring, number)
    end
  end
  if #SETTLE > 0 then settle() end
end

-- Whether the function's ready jobs are leased by the round of groups (some have a group).
function GROUP.active()
  return K.groups ~= nil and (redis.call('ZCARD', K.group_ready) > 0 or redis.call('EXISTS', K.groups) == 1)
end

-- Groups whose rate window lets them lease again go back to the round (those with ready
-- jobs), their window's old leases forgotten; a group waiting only for its window to be
-- forgotten (it has no ready jobs) waits again until the newest lease in it is old.
function GROUP.wait_over()
  for _, group in ipairs(redis.call('ZRANGE', K.group_wait, '-inf', int(NOW), 'BYSCORE', 'LIMIT', '0', int(BATCH))) do
    redis.call('ZREM', K.group_wait, group)
    local limits = GROUP.limits(group)
    local first = GROUP.first(group)
    if limits.rate_ms > 0 then
      redis.call('ZREMRANGEBYLEX', K.group_rate, first, '(' .. group .. '\0' .. string.format('%013d', NOW - limits.rate_ms) .. '\1')
    else
      redis.call('ZREMRANGEBYLEX', K.group_rate, first, GROUP.last(group))
    end
    if GROUP.has_ready(group) then
      GROUP.join(group)
    else
      local newest = redis.call('ZRANGE', K.group_rate, GROUP.last(group), first, 'BYLEX', 'REV', 'LIMIT', '0', '1')
      if #newest > 0 then
        local at = tonumber(string.match(newest[1], '%z(%d+)%z'))
        redis.call('ZADD', K.group_wait, int(at + limits.rate_ms), group)
      end
    end
  end
end

-- How many leases of `group` its rate window holds (its older ones forgotten), and when the
-- oldest of them leaves it (ms).
function GROUP.window(group, rate_ms)
  redis.call('ZREMRANGEBYLEX', K.group_rate, GROUP.first(group),
    '(' .. group .. '\0' .. string.format('%013d', NOW - rate_ms) .. '\1')
  local count = redis.call('ZLEXCOUNT', K.group_rate, GROUP.first(group), GROUP.last(group))
  local oldest = redis.call('ZRANGE', K.group_rate, GROUP.first(group), GROUP.last(group), 'BYLEX', 'LIMIT', '0', '1')
  local frees = NOW
  if #oldest > 0 then frees = tonumber(string.match(oldest[1], '%z(%d+)%z')) + rate_ms end
  return count, frees
end

-- Takes up to `allowed` ready jobs by the round of groups: each turn leases the best job of
-- the group at the front (or of `ready`, for '') and sends the group to the back while it
-- has more. A group that may not lease now leaves the round (see above). Returns the
-- numbers, in the order taken, each already out of the ready sets and counted in its
-- group's slots.
function GROUP.lease(allowed)
  GROUP.wait_over()
  if redis.call('ZCARD', K.ready) > 0 then GROUP.join('') end
  local numbers = {}
  local tail = nil
  -- The round's front, a turn per group, as many groups at once as jobs are still wanted;
  -- then the groups that have more go to the back (in the order they had their turns), the
  -- others leave, and the jobs leave `group-ready`, each in one call.
  while #numbers < allowed do
    local front = redis.call('ZRANGE', K.groups, '0', int(allowed - #numbers - 1))
    if #front == 0 then break end
    local back, gone, taken = {}, {}, {}
    for _, group in ipairs(front) do
      local number, more = nil, false
      if group == '' then
        local first = redis.call('ZRANGE', K.ready, '0', '1')
        if #first > 0 then
          number, more = first[1], #first > 1
          redis.call('ZREM', K.ready, number)
        end
      else
        local limits = GROUP.limits(group)
        local open = not limits.paused and (limits.cap <= 0 or GROUP.running(group) < limits.cap)
        local rated = open and limits.rate_limit > 0 and limits.rate_ms > 0
        if rated then
          local count, frees = GROUP.window(group, limits.rate_ms)
          if count >= limits.rate_limit then
            open = false
            redis.call('ZADD', K.group_wait, int(frees), group)
          end
        end
        if open then
          local heads = redis.call('ZRANGE', K.group_ready, GROUP.first(group), GROUP.last(group), 'BYLEX', 'LIMIT', '0', '2')
          if #heads > 0 then
            taken[#taken + 1] = heads[1]
            number, more = string.match(heads[1], '%z0*(%d+)$'), #heads > 1
            if limits.cap > 0 then GROUP.take(group) end
            if rated then
              redis.call('ZADD', K.group_rate, 0, group .. '\0' .. string.format('%013d', NOW) .. '\0' .. number)
              if not more then redis.call('ZADD', K.group_wait, 'NX', int(NOW + limits.rate_ms), group) end
            end
          end
        end
      end
      if number then numbers[#numbers + 1] = number end
      if more then
        if not tail then tail = tonumber(redis.call('ZRANGE', K.groups, '-1', '-1', 'WITHSCORES')[2]) end
        tail = tail + 1
        back[#back + 1] = int(tail)
        back[#back + 1] = group
      else
        gone[#gone + 1] = group
      end
    end
    call_chunked('ZREM', K.group_ready, taken)
    call_chunked('ZREM', K.groups, gone)
    call_chunked('ZADD', K.groups, back)
  end
  return numbers
end

-- Hands up to `want` runnable jobs to `worker`, their tokens CALL_ID:NUMBER:ATTEMPT (see
-- lease.lua for what happens on the way). Returns the leases (row and input of each, one
-- after the other), wait_ms, capped (as `lease` answers them) and the numbers leased, comma-separated, for the caller to remember under
-- its call id (nil when nothing was leased: such a call need not be remembered).
local function lease_jobs(worker, token_prefix, want, lease_ms, default_timeout_ms, default_max_attempts, quick)
  local leased_numbers = nil
  local now = int(NOW)
  -- `quick` (jobs handed over at enqueue): no housekeeping and no wait_ms; the worker's next
  -- lease call does both.
  if not quick then
    -- (1) Forget finished jobs whose retention is over; expire the jobs whose deadline
    -- passed before they started.
    forget_expired()
    EXPIRY.due()

    -- (2) Promote scheduled jobs that are due.
    for _, number in ipairs(redis.call('ZRANGEBYSCORE', K.scheduled, '-inf', now, 'LIMIT', '0', int(BATCH))) do
      redis.call('ZREM', K.scheduled, number)
      local record = load(number)
      if record then
        make_ready(number, record)
        save(number, record)
      end
    end

    -- (3) Reclaim jobs whose worker stopped renewing the lease.
    local expired = redis.call('ZRANGEBYSCORE', K.leased, '-inf', now, 'LIMIT', '0', int(BATCH))
    for _, number in ipairs(expired) do
      local record = load(number)
      redis.call('ZREM', K.leased, number)
      if record then
        GROUP.unlease(number, record)
        stat_count('failures')
        -- A lease the worker never confirmed (it never had the job: its reply was lost, or
        -- the worker died before the job started) gives its attempt back, always: a job is
        -- never failed by leases that ran out unconfirmed. (The worker confirms a job that
        -- runs longer than a moment with an early heartbeat, so this is not a loop for a
        -- job that runs.)
        local unconfirmed = record.unconfirmed
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
          RECLAIMED = RECLAIMED + 1
        else
          finish(number, record, 'failed',
            { class = 'lease-lost', message = 'the worker running the job stopped renewing its lease' })
        end
      end
    end
    if #SETTLE > 0 then settle() end
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
      if GROUP.ready_count() > allowed then capped = 1 end
    end
  end
  local rate_limit = tonumber(config('rate_limit') or '0')
  local rate_interval = tonumber(config('rate_interval_ms') or '0')
  if rate_limit > 0 and rate_interval > 0 then
    redis.call('ZREMRANGEBYSCORE', K.rate, '-inf', NOW - rate_interval)
    local room = rate_limit - redis.call('ZCARD', K.rate)
    if room < allowed then
      allowed = math.max(room, 0)
      if GROUP.ready_count() > allowed then
        local oldest = redis.call('ZRANGE', K.rate, 0, 0, 'WITHSCORES')
        if #oldest > 0 then rate_wait = math.max(0, tonumber(oldest[2]) + rate_interval - NOW) end
      end
    end
  end

  local leases, leased_count = {}, 0
  local waits = {}
  if allowed > 0 then
    -- The first jobs by rank, read, then removed by rank once everything about them is
    -- known (a job leaves `ready` in the same step it enters `leased`): ZPOPMIN would answer
    -- their scores too, each formatted as a float.
    local grouped = GROUP.active()
    local numbers
    if grouped then
      numbers = GROUP.lease(allowed)
    else
      numbers = redis.call('ZRANGE', K.ready, '0', int(allowed - 1))
    end
    -- One call per key for all the jobs (per thousand), not one per job.
    local raws, inputs = hmget(K.jobs, numbers), hmget(K.input, numbers)
    local saves, leased, rated, expired_now = {}, {}, {}, {}
    local lease_until = int(NOW + lease_ms)
    local default_timeout = int(default_timeout_ms)
    for i, number in ipairs(numbers) do
      local raw = raws[i]
      -- A deadline: past, the job ends `expired` instead (after the ready set has lost the
      -- numbers read); ahead, the job starts in time and leaves `expiring`.
      local deadline = raw and K.expiring and string.match(raw, '"expires_ms":(%d+)')
      if deadline and tonumber(deadline) <= NOW then
        expired_now[#expired_now + 1] = number
        raw = nil
      elseif deadline then
        redis.call('ZREM', K.expiring, number)
      end
      if raw then
        local f = fields_of(raw)
        if f[R_OTHERS] ~= '' and string.find(f[R_OTHERS], '"progress"', 1, true) then
          -- The last attempt's progress is not this one's.
          local record = decode(raw)
          record.progress = nil
          f = record_fields(encode(record))
        end
        local attempt = tonumber(f[R_ATTEMPT]) + 1
        -- 0 means "the function's default": the first worker to lease the job fixes it.
        if f[R_TIMEOUT] == '0' then f[R_TIMEOUT] = default_timeout end
        if f[R_MAX_ATTEMPTS] == '0' then
          f[R_MAX_ATTEMPTS] = int_once(attempt - 1 + default_max_attempts)
          f[R_DEFAULT_ATTEMPTS] = '1'
        end
        local ready = f[R_READY]
        if ready == '' then ready = f[R_CREATED] end
        waits[#waits + 1] = NOW - tonumber(ready)
        local attempt_text = int_once(attempt)
        local token = token_prefix .. ':' .. number .. ':' .. attempt_text
        f[R_STATE], f[R_ATTEMPT], f[R_READY], f[R_STARTED] = 'running', attempt_text, '', now
        f[R_LEASE_UNTIL], f[R_UNCONFIRMED], f[R_WORKER], f[R_TOKEN] = lease_until, '1', worker, token
        f[R_VERSION] = ''
        saves[#saves + 1] = number
        saves[#saves + 1] = record_text(f)
        leased[#leased + 1] = lease_until
        leased[#leased + 1] = number
        rated[#rated + 1] = now
        rated[#rated + 1] = token
        -- The `start` event, built without cjson: it is sent for every job.
        EVENTS[#EVENTS + 1] = '{"event":"start","id":"' .. FN .. ':' .. number .. '","attempt":' .. attempt_text .. '}'
        leases[#leases + 1] = lease_row(number, f)
        leases[#leases + 1] = inputs[i] or ''
        leased_count = leased_count + 1
      end
    end
    if #numbers > 0 and not grouped then redis.call('ZREMRANGEBYRANK', K.ready, '0', int(#numbers - 1)) end
    for _, number in ipairs(expired_now) do
      local record = load(number)
      -- (Out of the ready sets already: finish leaves nothing behind.)
      record.state = 'leaving'
      EXPIRY.expire(number, record)
      -- (Taken by the round, it took its group's slot.)
      if grouped and record.group_id then GROUP.release(record.group_id) end
    end
    if #SETTLE > 0 then settle() end
    call_chunked('HSET', K.jobs, saves)
    call_chunked('ZADD', K.leased, leased)
    if leased_count > 0 then leased_numbers = table.concat(numbers, ',') end
    if rate_limit > 0 and rate_interval > 0 then call_chunked('ZADD', K.rate, rated) end
  end

  stat_times('wait', waits)

  -- (5) Tell the caller when to come back: when the call leased as many as it could, at
  -- once (0); otherwise when the next scheduled job or lease falls due, or the rate limit
  -- frees a slot (-1: nothing pending).
  local wait_ms = 0
  if (leased_count < want or want == 0) and not quick then
    wait_ms = -1
    for _, key in ipairs({ K.scheduled, K.leased, K.group_wait }) do
      local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      if #first > 0 then
        local due = math.max(0, tonumber(first[2]) - NOW)
        if wait_ms < 0 or due < wait_ms then wait_ms = due end
      end
    end
    if rate_wait >= 0 and (wait_ms < 0 or rate_wait < wait_ms) then wait_ms = rate_wait end
  end
  return leases, wait_ms, capped, leased_numbers
end

-- Idle workers handed jobs directly. A worker whose `lease` found nothing may ask for the
-- next ready jobs to be handed to it (lease.lua, its last two arguments): it is registered
-- in K.idle until the registration lapses, its next `lease` call on the function, a
-- `withdraw`, or it leaves. `enqueue` then leases its new jobs to the newest registered
-- worker as that worker's own `lease` call would (same worker id, call id as token prefix,
-- count, lease time and defaults) and publishes each lease on the worker's channel: the job
-- starts without another round trip. A registration serves one hand-off, of at most the
-- count it asked for: the worker keeps that many of its slots free for it until it knows
-- the registration is over (each message says how many jobs the hand-off gave), so the
-- jobs it can be handed, over all its functions, never exceed its free slots. Nothing is
-- handed while the function is paused, at its concurrency cap or rate limit (lease_jobs
-- leases nothing then).

-- Takes `worker` out of the idle workers of this function; returns the call id of the
-- registration it had (nil when it had none: it lapsed, was handed jobs, or never was).
local function idle_leave(worker)
  local args = redis.call('HGET', K.idle_args, worker)
  redis.call('ZREM', K.idle, worker)
  redis.call('HDEL', K.idle_args, worker)
  if not args then return nil end
  return string.match(args, '^([^|]+)|')
end

-- Registers `worker` as idle for `hold_ms`, leasing with these arguments.
local function idle_join(worker, call_id, want, lease_ms, timeout_ms, attempts, channel, hold_ms)
  redis.call('ZADD', K.idle, int(NOW + hold_ms), worker)
  redis.call('HSET', K.idle_args, worker, table.concat({ call_id, int(want), int(lease_ms),
    int(timeout_ms), int(attempts), channel }, '|'))
end

-- The most idle workers one call hands jobs to, and the most lapsed registrations one call
-- clears.
local HAND_OFF_WORKERS = 16

-- Hands ready jobs to registered idle workers, newest registration first; returns how many.
-- Each lease is published on the worker's channel as `lease FUNCTION COUNT ROW` + '\n' +
-- input, COUNT being how many jobs this hand-off gave the worker, ROW as `lease` answers.
local function hand_off()
  local now = int(NOW)
  local lapsed = redis.call('ZRANGE', K.idle, '-inf', now, 'BYSCORE', 'LIMIT', '0', int(HAND_OFF_WORKERS))
  if #lapsed > 0 then
    redis.call('ZREM', K.idle, unpack(lapsed))
    redis.call('HDEL', K.idle_args, unpack(lapsed))
  end
  local handed = 0
  for _ = 1, HAND_OFF_WORKERS do
    local newest = redis.call('ZRANGE', K.idle, '+inf', '(' .. now, 'BYSCORE', 'REV', 'LIMIT', '0', '1')
    if #newest == 0 then break end
    local worker = newest[1]
    local args = redis.call('HGET', K.idle_args, worker) or ''
    local call_id, want, lease_ms, timeout_ms, attempts, channel =
      string.match(args, '^([^|]+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]+)$')
    want = tonumber(want or '')
    if not call_id or want < 1 or want > MAX_CONCURRENCY then
      idle_leave(worker)
    else
      local leases = lease_jobs(worker, call_id, want, tonumber(lease_ms),
        tonumber(timeout_ms), tonumber(attempts), true)
      -- Nothing (left) to hand, or not allowed now: the registration stays.
      if #leases == 0 then break end
      idle_leave(worker)
      local head = 'lease ' .. FN .. ' ' .. int(#leases / 2) .. ' '
      for i = 1, #leases, 2 do
        redis.call('PUBLISH', channel, head .. leases[i] .. '\n' .. leases[i + 1])
      end
      handed = handed + #leases / 2
    end
  end
  return handed
end

---------------------------------------------------------------------------------------------
-- Checking the arguments of the schedule and deploy functions: every check that can refuse
-- a call runs before its first write.

-- (Numbers are read with whole(), near the top: `whole(text)` is a whole number >= 0.)

-- W3C trace contexts kept with jobs (enqueue's `trace` and `tracestate`).
local TRACE = {}

-- Whether `s` is a traceparent of version 00: 00-TRACEID-SPANID-FLAGS in lower-case hex,
-- the ids not all zeros (the producers send it in this form).
function TRACE.fits(s)
  if type(s) ~= 'string' or #s ~= 55 then return false end
  local trace_id, span_id = string.match(s, '^00%-([0-9a-f]+)%-([0-9a-f]+)%-[0-9a-f][0-9a-f]$')
  return trace_id ~= nil and #trace_id == 32 and #span_id == 16
    and string.find(trace_id, '[^0]') ~= nil and string.find(span_id, '[^0]') ~= nil
end

-- Whether `s` can be a tracestate: 1 to MAX_TRACESTATE_BYTES bytes of printable ASCII.
function TRACE.fits_state(s)
  return type(s) == 'string' and #s >= 1 and #s <= MAX_TRACESTATE_BYTES and not string.find(s, '[^ -~]')
end

-- Whether `text` is a name as schedules and functions have them: 1 to 100 letters, digits,
-- '_', '-' or '.'.
local function fits_name(text)
  return type(text) == 'string' and #text >= 1 and #text <= 100
    and not string.find(text, '[^%w_%.%-]')
end

-- Redis' clock, ms since the epoch.
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Batches (`batch_...`): each batch's keys are in a slot of its own, `{batch:ID}`; its state
-- hash holds `def` (its name and callbacks, JSON), `open` ('1' until closed), `total` and the
-- counts of its jobs that ended `succeeded`, `failed` and `cancelled`, `created_ms`,
-- `added_ms`, `closed_ms`, `ended_ms`, and per callback (`success`, `complete`) nothing,
-- `due` (to be enqueued), or the id of the job enqueued for it.
--
-- Once a batch is closed and every job has ended: marks its callbacks due (`success` only
-- when every job succeeded; each one that the definition has, once) and returns those it
-- marked now. The caller enqueues each (its `once` key makes a second enqueue return the
-- first job) and notes it with `batch_fired`.
local function batch_settle(state_key)
  local f = redis.call('HMGET', state_key, 'open', 'total', 'succeeded', 'failed', 'cancelled', 'def', 'ended_ms')
  local open, total = f[1], tonumber(f[2] or '0')
  local succeeded, failed, cancelled = tonumber(f[3] or '0'), tonumber(f[4] or '0'), tonumber(f[5] or '0')
  if open ~= '0' or succeeded + failed + cancelled < total or f[7] then return {} end
  redis.call('HSET', state_key, 'ended_ms', string.format('%d', clock_ms()))
  local ok, def = pcall(cjson.decode, f[6] or '')
  if not ok or type(def) ~= 'table' then return {} end
  local fire = {}
  if type(def.on_success) == 'table' and failed + cancelled == 0 then
    redis.call('HSET', state_key, 'success', 'due')
    fire[#fire + 1] = 'success'
  end
  if type(def.on_complete) == 'table' then
    redis.call('HSET', state_key, 'complete', 'due')
    fire[#fire + 1] = 'complete'
  end
  return fire
end

-- A refusal of a schedule or deploy function: an error reply `CODE why`, nothing written.
local function refuse(code, why) return redis.error_reply(code .. ' ' .. why) end

---------------------------------------------------------------------------------------------
-- The deployed-plugin store (`wasmgear deploy`): its registry's functions take the keys
-- wg:{deploy}:versions, :current, :history and the :events channel, in this order, and
-- those that note deploys under way and versions to collect also :pending and :graveyard
-- (the registry's six keys). A version of a function is the field `FUNCTION VERSION` of
-- :versions. A version's chunks are in its own slot, wg:{plugin:VERSION}:chunks, beside its
-- pin wg:{plugin:VERSION}:pin: no script can see both, so they are kept in step by order
-- (PROTOCOL.md, "Deployed plugins"): a chunk is deleted only by a collector holding the pin,
-- after `deploy_doom` found no record naming the version and no deploy of it under way.

-- Whether `text` can be a version: 1 to 64 hex digits.
local function fits_version(text)
  return type(text) == 'string' and #text >= 1 and #text <= 64 and string.match(text, '^%x+$') ~= nil
end

-- Whether `text` can be a deploy's or collector's token: 1 to 64 letters or digits.
local function fits_token(text)
  return type(text) == 'string' and #text >= 1 and #text <= 64 and string.match(text, '^%w+$') ~= nil
end

-- The versions `fn` was given, oldest first, the current one last (a history that does not
-- read as a list of versions reads as none).
local function deploy_stack(history_key, fn)
  local raw = redis.call('HGET', history_key, fn)
  if not raw then return {} end
  local ok, list = pcall(cjson.decode, raw)
  if not ok or type(list) ~= 'table' then return {} end
  local stack = {}
  for _, v in ipairs(list) do
    if type(v) == 'string' then stack[#stack + 1] = v end
  end
  return stack
end

-- The members of :pending for `version` ('VERSION TOKEN'), with their scores.
local function deploy_pending_of(pending_key, version)
  local prefix = version .. ' '
  local found = {}
  local all = redis.call('ZRANGE', pending_key, 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, #prefix) == prefix then
      found[#found + 1] = { all[i], tonumber(all[i + 1]) }
    end
  end
  return found
end

-- Makes `version` the current version of `fn`: on top of its stack (once), in `current`,
-- and announced to the workers.
local function deploy_make_current(keys, fn, version)
  local stack = {}
  for _, v in ipairs(deploy_stack(keys[3], fn)) do
    if v ~= version then stack[#stack + 1] = v end
  end
  stack[#stack + 1] = version
  redis.call('HSET', keys[3], fn, cjson.encode(stack))
  redis.call('HSET', keys[2], fn, version)
  redis.call('PUBLISH', keys[4], fn .. ' ' .. version)
end

-- The versions kept with `keep` per function (fields `FUNCTION VERSION`): each function's
-- current one, the last `keep` of its stack and its `keep` most recently deployed. Returns
-- that set and every field.
local function deploy_kept(keys, keep)
  local fields, by_fn, kept = {}, {}, {}
  local all = redis.call('HGETALL', keys[1])
  for i = 1, #all, 2 do
    local field = all[i]
    local fn = string.match(field, '^(%S+) %S+$')
    local ok, record = pcall(cjson.decode, all[i + 1])
    -- A field or record not written by `deploy` is left alone (and never forgotten).
    if fn and ok and type(record) == 'table' then
      fields[#fields + 1] = field
      by_fn[fn] = by_fn[fn] or {}
      table.insert(by_fn[fn], { field, tonumber(record.deployed_ms) or 0 })
    end
  end
  local current = redis.call('HGETALL', keys[2])
  for i = 1, #current, 2 do kept[current[i] .. ' ' .. current[i + 1]] = true end
  for fn, list in pairs(by_fn) do
    table.sort(list, function(a, b) return a[2] > b[2] end)
    for i = 1, math.min(keep, #list) do kept[list[i][1]] = true end
    local stack = deploy_stack(keys[3], fn)
    for i = math.max(1, #stack - keep + 1), #stack do kept[fn .. ' ' .. stack[i]] = true end
  end
  return kept, fields
end

---------------------------------------------------------------------------------------------
-- The start of every call: its keys, function name and time, and a clean slate (the
-- library's locals outlive a call; Redis runs one call at a time).
local function begin(keys, args, named)
  K = named(keys)
  FN = args[1]
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  INTS, PENDING, PENDING_TEXT, PENDING_ZREM, PENDING_EXPIRES, PENDING_COUNTS = {}, nil, {}, {}, {}, {}
  CONFIG, CAPPED, WOKEN, SETTLE, NOTIFY, FINISHED, RECLAIMED = nil, nil, false, {}, {}, 0, 0
  GROUP.LIMITS, GROUP.CONFIGURED = {}, nil
  WAIT_INDEX = {}
  STAT_SAMPLES, STAT_COUNTS, EVENTS = {}, {}, {}
  WATCH.finishes, WATCH.output_key = {}, nil
end

-- The end of every call (after its body has returned): the statistics and events it
-- gathered are written.
local function end_call()
  stats_flush()
  publish_events()
end

---------------------------------------------------------------------------------------------
-- The functions follow, each registered by scripts.rs with its file as the body.
