#!lua name=wasmgear_v2
local DEFAULT_KEEP_FINISHED = 50000
local MAX_LOG = 262144
local STATS_DAYS = 30
local DAY_MS = 86400000
local DEFAULT_RETENTION_MS = 90000000
local DEFAULT_FAILED_RETENTION_MS = 604800000
local MAX_TAGS = 32
local MAX_DEPENDENCIES = 10000
local MAX_KEY_BYTES = 200
local MAX_ATTEMPTS = 1000
local MAX_DURATION_MS = 315360000000
local MAX_CONCURRENCY = 1024
local MAX_COMPLETIONS_PER_CALL = 1024
local MAX_ACKED = 1024
local MAX_EVENT_OUTPUT = 1024
local MAX_CHILDREN = 10000
local MAX_HISTORY = 100
local MAX_PROGRESS_MESSAGE_BYTES = 1024
local MAX_CHECKPOINT_BYTES = 16777216
local CLOCK_SKEW_MS = 1000
local MAX_OUTCOMES = 1000
local MAX_OUTPUT_PIECE = 1048576
local RESERVATION_MS = 600000
local FLOW_CHECK_FIRST_MS = 3600000
local FLOW_CHECK_MAX_MS = 86400000
local MAX_FLOW_RECORD_BYTES = 16777216
local MAX_FLOW_JOBS = 10000
local MAX_BATCH_JOBS = 100000
local MAX_TELLS_PER_CALL = 1000
local BATCH_MAX_MS = 2592000000
local BATCH_RETENTION_MS = 604800000
local BATCH_CHECK_MS = 60000
local MAX_GROUPS_SCANNED = 100000
local MAX_GROUPS_LISTED = 1000
local MAX_MIN_REPLICAS = 16
local MAX_TRACESTATE_BYTES = 512
local MIN_PRIORITY = -1000
local MAX_PRIORITY = 1000
local ENCRYPTED_MAGIC = "\0\119\103\101\110\99\49"
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

local KEYS_OF = {}

function KEYS_OF.enqueue(keys) return { seq = keys[1], jobs = keys[2], input = keys[3], output = keys[4], logs = keys[5], ready = keys[6], scheduled = keys[7], leased = keys[8], waiting = keys[9], expires = keys[10], uniq = keys[11], tagged = keys[12], failed = keys[13], counts = keys[14], stats = keys[15], config = keys[16], rate = keys[17], events = keys[18], work = keys[19], calls = keys[20], calls_exp = keys[21], idle = keys[22], idle_args = keys[23], ticks = keys[24], reserved = keys[25], groups = keys[26], group_ready = keys[27], group_running = keys[28], group_config = keys[29], group_rate = keys[30], group_wait = keys[31], dedup = keys[32], dedup_exp = keys[33], expiring = keys[34], checkpoints = keys[35] } end
redis.register_function{ function_name = 'wg2_enqueue', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.enqueue)
local reply = (function()
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

end)()
end_call()
return reply

end }

function KEYS_OF.reserve(keys) return { seq = keys[1], stats = keys[2], events = keys[3], reserved = keys[4] } end
redis.register_function{ function_name = 'wg2_reserve', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.reserve)
local reply = (function()
-- reserve: reserve job numbers for a flow's jobs of this function, so that the flow knows
-- every job's id before it writes any (a job's dependencies may be in any function, written
-- in any order). `enqueue` gives a reserved number to the job whose `number` option names
-- it; a number not used within RESERVATION_MS is let go (a dependent linked to it is then
-- told it is `missing`). Lapsed reservations are forgotten here.
--
-- KEYS: seq stats events reserved
-- ARGV[1]  the function name
-- ARGV[2]  how many numbers, 1..MAX_FLOW_JOBS
--
-- Returns: the first of the numbers reserved (they follow one another).

local count = whole(ARGV[2] or '', 1, MAX_FLOW_JOBS)
if not count then
  return redis.error_reply('BADARGS reserve: how many numbers must be a whole number in 1..' .. MAX_FLOW_JOBS)
end
redis.call('ZREMRANGEBYSCORE', K.reserved, '-inf', int(NOW))
local last = redis.call('INCRBY', K.seq, int(count))
local first = last - count + 1
local until_ms = int(NOW + RESERVATION_MS)
local members = {}
for number = first, last do
  members[#members + 1] = until_ms
  members[#members + 1] = int(number)
end
call_chunked('ZADD', K.reserved, members)
return first

end)()
end_call()
return reply

end }

function KEYS_OF.lease(keys) return { jobs = keys[1], input = keys[2], output = keys[3], logs = keys[4], ready = keys[5], scheduled = keys[6], leased = keys[7], waiting = keys[8], expires = keys[9], uniq = keys[10], tagged = keys[11], failed = keys[12], counts = keys[13], stats = keys[14], config = keys[15], rate = keys[16], events = keys[17], work = keys[18], calls = keys[19], calls_exp = keys[20], idle = keys[21], idle_args = keys[22], ticks = keys[23], groups = keys[24], group_ready = keys[25], group_running = keys[26], group_config = keys[27], group_rate = keys[28], group_wait = keys[29], dedup = keys[30], dedup_exp = keys[31], expiring = keys[32], checkpoints = keys[33] } end
redis.register_function{ function_name = 'wg2_lease', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.lease)
local reply = (function()
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

end)()
end_call()
return reply

end }

function KEYS_OF.heartbeat(keys) return { jobs = keys[1], leased = keys[2], stats = keys[3], events = keys[4] } end
redis.register_function{ function_name = 'wg2_heartbeat', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.heartbeat)
local reply = (function()
-- heartbeat: extend the lease of a running job.
--
-- KEYS: jobs leased stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  new lease duration from now, ms
--
-- Returns: {expiry, cancel}: expiry is the new lease expiry (ms since the epoch, queue
--          clock), or 0 when the token no longer holds the lease (the caller must stop the
--          job: it belongs to no one or to someone else now); cancel is 1 when a client
--          asked for the job to be cancelled (the caller should stop it), else 0.

local number, token, lease_ms = ARGV[2], ARGV[3], whole(ARGV[4] or '', 1, MAX_DURATION_MS)
if not lease_ms then
  return redis.error_reply('BADARGS heartbeat: the lease duration must be a whole number of ms in 1..' .. MAX_DURATION_MS)
end

local record = load(number)
if not record then return { 0, 0 } end
if record.state ~= 'running' or record.token ~= token then return { 0, 0 } end

record.lease_until_ms = NOW + lease_ms
record.unconfirmed = nil -- the worker has the job: the attempt counts (see `lease`)
save(number, record)
redis.call('ZADD', K.leased, int(NOW + lease_ms), number)
local cancel = 0
if record.cancel_requested_ms then cancel = 1 end
return { NOW + lease_ms, cancel }

end)()
end_call()
return reply

end }

function KEYS_OF.progress(keys) return { jobs = keys[1], stats = keys[2], config = keys[3], events = keys[4], work = keys[5] } end
redis.register_function{ function_name = 'wg2_progress', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.progress)
local reply = (function()
-- progress: store a running job's latest progress and publish it.
--
-- KEYS: jobs stats config events work
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  units done (a decimal whole number, 0 to 2^64-1)
-- ARGV[5]  units in all (0: unknown; same range)
-- ARGV[6]  message ('' for none)
--
-- Returns: 1 when stored; 0 when the token does not hold the job's lease (nothing changes).
-- Publishes: {"event":"progress","id":"F:N","seq":S,"done":"D","total":"T","message":M}
--            (D and T as decimal strings), where
--            S counts the job's progress reports from 1 over all attempts, so a reader can
--            put them in order.

local number, token = ARGV[2], ARGV[3]
local function units(s) return type(s) == 'string' and #s <= 20 and string.find(s, '^%d+$') ~= nil end
if not (units(ARGV[4]) and units(ARGV[5]) and short(ARGV[6], MAX_PROGRESS_MESSAGE_BYTES)) then
  return redis.error_reply('BADARGS progress: done and total must be decimal whole numbers (at most 20 digits), the message at most '
    .. MAX_PROGRESS_MESSAGE_BYTES .. ' bytes')
end

local record = load(number)
if not record then return 0 end
if record.state ~= 'running' or record.token ~= token then return 0 end

-- progress_seq is never reset (not even by a retry), so readers can order reports.
record.progress_seq = (record.progress_seq or 0) + 1
record.unconfirmed = nil -- the worker has the job: the attempt counts (see `lease`)
-- The counts stay the decimal strings they came as: a Lua number would lose digits past
-- 2^53, and cjson would write 10^14 and more in exponent form.
local progress = { seq = record.progress_seq, done = ARGV[4], total = ARGV[5] }
if ARGV[6] ~= '' then progress.message = ARGV[6] end
record.progress = progress
save(number, record)
publish({
  event = 'progress', id = id_of(number), seq = progress.seq,
  done = progress.done, total = progress.total, message = progress.message,
})
return 1

end)()
end_call()
return reply

end }

function KEYS_OF.checkpoint(keys) return { jobs = keys[1], checkpoints = keys[2], stats = keys[3], config = keys[4], events = keys[5], work = keys[6] } end
redis.register_function{ function_name = 'wg2_checkpoint', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.checkpoint)
local reply = (function()
-- checkpoint: keep a running job's checkpoint, the bytes its guest saved to resume from
-- (replacing the one before). The attempts that follow read it with `checkpoint_get`: a
-- retry, a reclaim after the worker died or lost the lease, a `retry` of the failed job.
--
-- KEYS: jobs checkpoints stats config events work
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  the checkpoint's bytes (at most MAX_CHECKPOINT_BYTES; the plugin's manifest
--          may allow less, which the worker checks)
--
-- Returns: 1 when kept; 0 when the token does not hold the job's lease (nothing changes).
-- Publishes: {"event":"checkpoint","id":"F:N","bytes":B}

local number, token, data = ARGV[2], ARGV[3], ARGV[4]
if type(data) ~= 'string' or #data > MAX_CHECKPOINT_BYTES then
  return redis.error_reply('BADARGS checkpoint: a checkpoint of at most ' .. MAX_CHECKPOINT_BYTES .. ' bytes')
end

local record = load(number)
if not record then return 0 end
if record.state ~= 'running' or record.token ~= token then return 0 end

redis.call('HSET', K.checkpoints, number, data)
record.checkpoint = { bytes = #data, ms = NOW }
record.unconfirmed = nil -- the worker has the job: the attempt counts (see `lease`)
save(number, record)
publish({ event = 'checkpoint', id = id_of(number), bytes = #data })
return 1

end)()
end_call()
return reply

end }

function KEYS_OF.checkpoint_get(keys) return { jobs = keys[1], checkpoints = keys[2], stats = keys[3], events = keys[4] } end
redis.register_function{ function_name = 'wg2_checkpoint_get', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.checkpoint_get)
local reply = (function()
-- checkpoint_get: the checkpoint job `number` keeps (see `checkpoint`), for its attempt to
-- resume from.
--
-- KEYS: jobs checkpoints stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
--
-- Returns: the checkpoint's bytes, or false when the job keeps none (never saved, dropped
--          by `retry` with `fresh`, or the job is gone).

return redis.call('HGET', K.checkpoints, ARGV[2])

end)()
end_call()
return reply

end, flags = { 'no-writes' } }

function KEYS_OF.complete(keys) return { jobs = keys[1], input = keys[2], output = keys[3], logs = keys[4], ready = keys[5], scheduled = keys[6], leased = keys[7], waiting = keys[8], expires = keys[9], uniq = keys[10], tagged = keys[11], failed = keys[12], counts = keys[13], stats = keys[14], config = keys[15], rate = keys[16], events = keys[17], work = keys[18], calls = keys[19], calls_exp = keys[20], idle = keys[21], idle_args = keys[22], ticks = keys[23], groups = keys[24], group_ready = keys[25], group_running = keys[26], group_config = keys[27], group_rate = keys[28], group_wait = keys[29], dedup = keys[30], dedup_exp = keys[31], expiring = keys[32], checkpoints = keys[33] } end
redis.register_function{ function_name = 'wg2_complete', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.complete)
local reply = (function()
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

end)()
end_call()
return reply

end }

function KEYS_OF.fail(keys) return { jobs = keys[1], logs = keys[2], ready = keys[3], scheduled = keys[4], leased = keys[5], waiting = keys[6], expires = keys[7], uniq = keys[8], failed = keys[9], counts = keys[10], stats = keys[11], config = keys[12], events = keys[13], work = keys[14], groups = keys[15], group_ready = keys[16], group_running = keys[17], group_config = keys[18], dedup = keys[19], dedup_exp = keys[20], expiring = keys[21] } end
redis.register_function{ function_name = 'wg2_fail', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.fail)
local reply = (function()
-- fail: record a leased job's failure; retry it later or fail it for good, exactly once.
--
-- Fenced by the lease token like `complete` (and, like it, the same report sent again is
-- answered as the first was). A retryable failure with attempts left puts
-- the job back as `scheduled` after the backoff; otherwise the job ends `failed`, in the
-- failure group named by its error class (or `cancelled`, for class `cancelled` or when a
-- client asked for cancellation), keeping its error and attempt history. Jobs waiting on it
-- are cancelled.
--
-- KEYS: jobs logs ready scheduled leased waiting expires uniq failed counts stats config events work groups group_ready group_running group_config dedup dedup_exp expiring
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  error class (`guest-error`, `trap`, `timed-out`, ...), the failure group
-- ARGV[5]  error message
-- ARGV[6]  1 if another attempt may succeed, else 0
-- ARGV[7]  backoff before the next attempt, ms (chosen by the caller, jitter included)
-- ARGV[8]  this attempt's log lines (text, may be empty)
-- ARGV[9]  the version (content hash) of the plugin that ran the attempt ('' if unknown)
--
-- Returns: {1, state, notify} when accepted, state 'scheduled' (will retry), 'failed' or
--          'cancelled' (notify: see lib.lua); {0, reason, {}} when refused ('missing' or
--          'stale').
-- Publishes: `finish` with the final state when the job ends; `retry` when it will run again.

if #ARGV ~= 9 then return redis.error_reply('BADARGS fail: it takes 9 arguments, not ' .. #ARGV) end
local number, token = ARGV[2], ARGV[3]
local class, message, retryable, backoff_ms = ARGV[4], ARGV[5], ARGV[6] == '1', whole(ARGV[7], 0, MAX_DURATION_MS)
local log_text, version = ARGV[8], ARGV[9]
if not backoff_ms or (ARGV[6] ~= '0' and ARGV[6] ~= '1') or class == '' or not short(class, MAX_KEY_BYTES)
  or not fits_record(version) then
  return redis.error_reply(string.format('BADARGS fail: the error class must be 1 to %d bytes, retryable 0 or 1, the backoff a whole number of ms in 0..%d, the version without "|"',
    MAX_KEY_BYTES, MAX_DURATION_MS))
end

local record = load(number)
if not record then return { 0, 'missing', {} } end
-- Reported before by this lease (sent again after its reply was lost): the same answer.
if record.state ~= 'running' and record.token == token then return { 1, record.state, {} } end
if record.state ~= 'running' or record.token ~= token then return { 0, 'stale', {} } end

add_history(record, class, message, version)
stat_time('run', NOW - record.started_ms)
stat_count('failures')
record.error = { class = class, message = message }
append_log(number, record.attempt, log_text)
local retry = retryable and record.attempt < record.max_attempts and not record.cancel_requested_ms
-- (A sequence's job keeps its group's slot through the backoff: the next job of the group
-- must not overtake it.)
GROUP.unlease(number, record, retry)

if retry then
  -- The token stays until the next lease: it says which lease's report scheduled the retry.
  record.worker, record.lease_until_ms, record.unconfirmed = nil, nil, nil
  stat_count('retries')
  make_scheduled(number, record, NOW + backoff_ms)
  save(number, record)
  publish({ event = 'retry', id = id_of(number), attempt = record.attempt, at_ms = NOW + backoff_ms })
  return { 1, 'scheduled', {} }
end

local state = 'failed'
if class == 'cancelled' or record.cancel_requested_ms then state = 'cancelled' end
finish(number, record, state, record.error, K.leased)
record.token = token
save(number, record)
settle()
return { 1, state, NOTIFY }

end)()
end_call()
return reply

end }

function KEYS_OF.release(keys) return { jobs = keys[1], logs = keys[2], ready = keys[3], scheduled = keys[4], leased = keys[5], waiting = keys[6], expires = keys[7], uniq = keys[8], failed = keys[9], counts = keys[10], stats = keys[11], config = keys[12], events = keys[13], work = keys[14], groups = keys[15], group_ready = keys[16], group_running = keys[17], group_config = keys[18], dedup = keys[19], dedup_exp = keys[20], expiring = keys[21] } end
redis.register_function{ function_name = 'wg2_release', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.release)
local reply = (function()
-- release: hand a leased job back unrun (the worker is shutting down), without counting
-- the attempt. The job goes back to the ready set at its old place.
--
-- A job whose cancellation was asked for is not handed back: it ends `cancelled`.
--
-- KEYS: jobs logs ready scheduled leased waiting expires uniq failed counts stats config events work groups group_ready group_running group_config dedup dedup_exp expiring
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
--
-- Returns: {1, 'queued', {}} when handed back, {1, 'cancelled', notify} when it ended
--          cancelled (notify: see lib.lua); {0, 'stale', {}} / {0, 'missing', {}} when the
--          token does not hold the job's lease.

local number, token = ARGV[2], ARGV[3]

local record = load(number)
if not record then return { 0, 'missing', {} } end
-- Handed back before by this lease (sent again): the same answer.
if record.state ~= 'running' and record.token == token then return { 1, record.state, {} } end
if record.state ~= 'running' or record.token ~= token then return { 0, 'stale', {} } end
GROUP.unlease(number, record)

if record.cancel_requested_ms then
  finish(number, record, 'cancelled', { class = 'cancelled', message = 'cancelled while running' })
  record.token = token
  save(number, record)
  settle()
  return { 1, 'cancelled', NOTIFY }
end

record.attempt = record.attempt - 1
-- (started_ms stays: the job has been leased, so its dependencies had all succeeded, which
-- `retry` reads from it; the token stays until the next lease, for a report sent again.)
record.worker, record.lease_until_ms = nil, nil
record.unconfirmed = nil
record.progress = nil
make_ready(number, record)
save(number, record)
publish({ event = 'ready', id = id_of(number) })
return { 1, 'queued', {} }

end)()
end_call()
return reply

end }

function KEYS_OF.cancel(keys) return { jobs = keys[1], input = keys[2], output = keys[3], logs = keys[4], ready = keys[5], scheduled = keys[6], leased = keys[7], waiting = keys[8], expires = keys[9], uniq = keys[10], tagged = keys[11], failed = keys[12], counts = keys[13], stats = keys[14], config = keys[15], events = keys[16], work = keys[17], ticks = keys[18], groups = keys[19], group_ready = keys[20], group_running = keys[21], group_config = keys[22], dedup = keys[23], dedup_exp = keys[24], expiring = keys[25], checkpoints = keys[26] } end
redis.register_function{ function_name = 'wg2_cancel', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.cancel)
local reply = (function()
-- cancel: stop a job. A queued, scheduled or waiting job is cancelled at once; a running
-- job is flagged and its worker told (the `cancel` event; the heartbeat reply repeats it),
-- it gives up its uniq key, and it ends `cancelled` however its worker reports it ended
-- (output, failure or hand-back): once asked, a cancel always wins. Jobs waiting on a
-- cancelled job are cancelled too.
--
-- KEYS: jobs input output logs ready scheduled leased waiting expires uniq tagged failed counts stats config events work ticks groups group_ready group_running group_config dedup dedup_exp expiring checkpoints
-- ARGV[1]  the function name
-- ARGV[2]  job number
--
-- Returns: {1, 'cancelled', notify} when the job was waiting and is now cancelled (notify:
--          see lib.lua); {1, 'cancelling', {}} when it is running and its worker has been
--          asked to stop; {0, STATE, {}} when it had already ended in STATE; {0, 'missing', {}}
--          when there is no such job.
-- Publishes: `finish` (state `cancelled`) for a waiting job; `cancel` for a running one.

local number = ARGV[2]

local record = load(number)
if not record then return { 0, 'missing', {} } end
forget_expired({ [number] = true })

if record.state == 'queued' or record.state == 'scheduled' or record.state == 'waiting' then
  finish(number, record, 'cancelled', { class = 'cancelled', message = 'cancelled before it ran' })
  settle()
  return { 1, 'cancelled', NOTIFY }
end

if record.state == 'running' then
  if not record.cancel_requested_ms then
    record.cancel_requested_ms = NOW
    -- A job being cancelled no longer holds its uniq key: an enqueue with the key from now
    -- on makes a new job instead of joining one that will end cancelled.
    if record.uniq and redis.call('HGET', K.uniq, record.uniq) == tostring(number) then
      redis.call('HDEL', K.uniq, record.uniq)
    end
    save(number, record)
  end
  publish({ event = 'cancel', id = id_of(number) })
  return { 1, 'cancelling', {} }
end

return { 0, record.state, {} }

end)()
end_call()
return reply

end }

function KEYS_OF.withdraw(keys) return { stats = keys[1], events = keys[2], idle = keys[3], idle_args = keys[4] } end
redis.register_function{ function_name = 'wg2_withdraw', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.withdraw)
local reply = (function()
-- withdraw: take a worker's registration to be handed jobs of this function out, unless it
-- was used or has lapsed (lease.lua, ARGV[8]; lib.lua, "Idle workers handed jobs directly").
-- A worker calls it to take back the slots it keeps free for the registration: when it
-- needs them for jobs of another function, or when it stops.
--
-- KEYS: stats events idle idle_args
-- ARGV[1]  the function name
-- ARGV[2]  the worker id
-- ARGV[3]  the registering call's id
--
-- Returns: 1 when the registration was taken out (no job can be handed through it now),
--          0 when it was not there (it lapsed or was handed jobs, whose messages may still
--          be on their way) or is another call's (left alone).

local worker, call_id = ARGV[2], ARGV[3]
local args = redis.call('HGET', K.idle_args, worker)
if not args or string.match(args, '^([^|]+)|') ~= call_id then return 0 end
idle_leave(worker)
return 1

end)()
end_call()
return reply

end }

function KEYS_OF.link(keys) return { jobs = keys[1], stats = keys[2], events = keys[3], reserved = keys[4] } end
redis.register_function{ function_name = 'wg2_link', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.link)
local reply = (function()
-- link: make jobs of other functions wait on jobs of this one (dependencies across
-- functions, the first of two steps; see `enqueue`). Idempotent. Many at once: a flow's
-- fan-in links its 1,000 dependencies in one call per function.
--
-- KEYS: jobs stats events reserved
--          (of the dependencies' function)
-- ARGV[1]  the dependencies' function name
-- ARGV[2..] pairs, 1..MAX_TELLS_PER_CALL of them: a dependency's number here, and the id
--          of the job waiting on it ('G:M')
--
-- Returns: per pair, 'pending' when the dependency has not ended (the dependent is now
--          recorded and will be told when it does), its final state 'succeeded', 'failed'
--          or 'cancelled' when it already ended (the caller tells the dependent itself, with
--          `resolve`; the job is held for the dependent, as for one told of its end), or 'missing' when there is no such job. A number reserved for a
--          flow's job not yet written answers 'pending' (the dependent's re-check asks
--          again) until its reservation lapses. With one pair, that state; with more, the
--          list of them in order.

local n = (#ARGV - 1) / 2
if n < 1 or n ~= math.floor(n) or n > MAX_TELLS_PER_CALL then
  return redis.error_reply('BADARGS link: 1..' .. MAX_TELLS_PER_CALL .. ' pairs of a job number and a dependent id')
end
for i = 0, n - 1 do
  if not split_id(ARGV[3 + 2 * i] or '') then
    return redis.error_reply('BADARGS link: the dependent must be a job id (FUNCTION:NUMBER)')
  end
end

-- Each record loaded once, saved once (a fan-out's dependency is named by every pair).
local loaded, changed = {}, {}
local states = {}
for i = 0, n - 1 do
  local number, dependent = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if loaded[number] == nil then loaded[number] = load(number) or false end
  local record = loaded[number]
  if not record then
    if tonumber(redis.call('ZSCORE', K.reserved, number) or '0') > NOW then
      states[#states + 1] = 'pending'
    else
      states[#states + 1] = 'missing'
    end
  elseif ENDED[record.state] then
    -- Held for the dependent until it has ended, as if it had waited (lib.lua,
    -- tell_dependents).
    if list_add(record, 'untold', dependent) then changed[number] = true end
    states[#states + 1] = record.state
  else
    if list_add(record, 'dependents', dependent) then changed[number] = true end
    states[#states + 1] = 'pending'
  end
end
for number in pairs(changed) do save(number, loaded[number]) end
if n == 1 then return states[1] end
return states

end)()
end_call()
return reply

end }

function KEYS_OF.resolve(keys) return { jobs = keys[1], logs = keys[2], ready = keys[3], scheduled = keys[4], leased = keys[5], waiting = keys[6], expires = keys[7], uniq = keys[8], failed = keys[9], counts = keys[10], stats = keys[11], config = keys[12], events = keys[13], work = keys[14], groups = keys[15], group_ready = keys[16], group_running = keys[17], group_config = keys[18], dedup = keys[19], dedup_exp = keys[20], expiring = keys[21] } end
redis.register_function{ function_name = 'wg2_resolve', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.resolve)
local reply = (function()
-- resolve: tell waiting jobs of this function what became of their dependencies in other
-- functions (the second step; see `enqueue` and `link`). Idempotent. Many at once: a
-- worker tells all it has in one call, so a fan-in's dependent is loaded and saved once per
-- call, not once per dependency.
--
-- KEYS: jobs logs ready scheduled leased waiting expires uniq failed counts stats config events work groups group_ready group_running group_config dedup dedup_exp expiring
-- ARGV[1]  the function name
-- ARGV[2..] triples, 1..MAX_TELLS_PER_CALL of them: a waiting job's number, the id of one
--          of its dependencies ('G:N'), and that dependency's state: 'succeeded' (the job
--          runs once all its dependencies have), 'failed', 'cancelled' or 'missing' (the job
--          is cancelled, naming the dependency, unless it tolerates that: `after_ignore`,
--          `after_continue`), or 'pending' (nothing changes but the time of the next
--          re-check)
--
-- Returns: notify, the dependents in other functions to tell in turn (see lib.lua).
-- Publishes: `ready` when a job may now run, `finish` when one was cancelled.

local STATES = { succeeded = true, failed = true, cancelled = true, missing = true, pending = true }
local n = (#ARGV - 1) / 3
if n < 1 or n ~= math.floor(n) or n > MAX_TELLS_PER_CALL then
  return redis.error_reply('BADARGS resolve: 1..' .. MAX_TELLS_PER_CALL .. ' triples of a job number, a dependency id and its state')
end
for i = 0, n - 1 do
  local number, dep, state = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  if not (job_number(number) and split_id(dep) and STATES[state]) then
    return redis.error_reply('BADARGS resolve: a job number, a dependency id (FUNCTION:NUMBER) and its state (succeeded, failed, cancelled, missing or pending)')
  end
end
begin_batch()
for i = 0, n - 1 do
  resolve(ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i])
end
settle()
flush()
return NOTIFY

end)()
end_call()
return reply

end }

function KEYS_OF.told(keys) return { jobs = keys[1], expires = keys[2], stats = keys[3], events = keys[4] } end
redis.register_function{ function_name = 'wg2_told', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.told)
local reply = (function()
-- told: note that jobs of this function no longer hold for a dependent in another function
-- (or their batch): the dependent has ended (`release DEPENDENCY` in a notify), or the
-- batch has counted the job's end. Until then a finished job outlives its retention (at
-- most 7 days): a dependent whose news was lost still finds it when it re-checks its links,
-- and one that runs late still reads its output. Idempotent. Many at once, as
-- `resolve`.
--
-- KEYS: jobs expires stats events
-- ARGV[1]  the function name
-- ARGV[2..] pairs, 1..MAX_TELLS_PER_CALL of them: a finished job's number, and the id of a
--          dependent it no longer holds for ('G:M'), or 'batch ID' for the job's batch
--
-- Returns: how many of the dependents were still to be told.

local n = (#ARGV - 1) / 2
if n < 1 or n ~= math.floor(n) or n > MAX_TELLS_PER_CALL then
  return redis.error_reply('BADARGS told: 1..' .. MAX_TELLS_PER_CALL .. ' pairs of a job number and a dependent')
end
for i = 0, n - 1 do
  local number, dependent = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if not job_number(number) or (not split_id(dependent) and not string.match(dependent, '^batch %x+$')) then
    return redis.error_reply('BADARGS told: ' .. tostring(number) .. ' ' .. tostring(dependent)
      .. ': the number must be a job number, the dependent a job id (FUNCTION:NUMBER) or a batch (batch ID)')
  end
end

-- Only the record's other fields change (its `untold` list): the record is rewritten as
-- text, its hot fields untouched, as `complete` does (a record in the former layout is
-- loaded and saved whole).
local numbers = {}
for i = 0, n - 1 do numbers[#numbers + 1] = ARGV[2 + 2 * i] end
local raws = hmget(K.jobs, numbers)
-- Written together at the end: the records, and the expiry of those told at last.
local texts, written, back = {}, {}, {}
local told = 0
for i = 0, n - 1 do
  local number, dependent = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local raw = texts[number] or raws[i + 1]
  local f = raw and record_fields(raw)
  if f and f[R_OTHERS] ~= '' then
    local others = cjson.decode(f[R_OTHERS])
    if list_drop(others, 'untold', dependent) then
      f[R_OTHERS] = (next(others) and cjson.encode(others)) or ''
      if not texts[number] then written[#written + 1] = number end
      texts[number] = record_text(f)
      if not others.untold and f[R_FINISHED] ~= '' then
        -- Its stay may have been stretched for the dependent: back to its own retention.
        local keep = tonumber(f[R_RETENTION]) or 0
        local failed_keep = tonumber(f[R_RETENTION + 1]) or 0
        if f[R_STATE] == 'failed' and failed_keep > keep then keep = failed_keep end
        back[#back + 1] = int(tonumber(f[R_FINISHED]) + keep)
        back[#back + 1] = number
      end
      told = told + 1
    end
  elseif raw and not f then
    local record = load(number)
    if list_drop(record, 'untold', dependent) then
      save(number, record)
      if not record.untold and record.finished_ms then
        redis.call('ZADD', K.expires, int(record.finished_ms + retention_of(record)), number)
      end
      told = told + 1
    end
  end
end
local pairs_out = {}
for _, number in ipairs(written) do
  pairs_out[#pairs_out + 1] = number
  pairs_out[#pairs_out + 1] = texts[number]
end
call_chunked('HSET', K.jobs, pairs_out)
call_chunked('ZADD', K.expires, back)
return told

end)()
end_call()
return reply

end }

function KEYS_OF.recheck(keys) return { jobs = keys[1], waiting = keys[2], stats = keys[3], events = keys[4] } end
redis.register_function{ function_name = 'wg2_recheck', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.recheck)
local reply = (function()
-- recheck: hand out the jobs of this function whose links to dependencies in other
-- functions are due for a re-check (the safety net for a caller that died between the
-- steps of a link; see `link`), on the queue's clock. Each job handed out has its next
-- re-check pushed further out (30 s, doubling, at most hourly) here, so repeated calls
-- move on; entries of the waiting set without a waiting job behind them are removed.
--
-- KEYS: jobs waiting stats events
-- ARGV[1]  the function name
-- ARGV[2]  the most jobs to hand out
--
-- Returns: {looked, due}: how many entries of the waiting set it looked at (fewer than asked
--          for: no more are due), and {number, dependencies} per job handed out,
--          dependencies being the ids of the jobs of other functions it still waits on (the
--          caller runs `link` for each and tells the job with `resolve` about those that have
--          ended).

local limit = whole(ARGV[2] or '', 1, 1000)
if not limit then return redis.error_reply('BADARGS recheck: the most jobs must be a whole number in 1..1000') end

local due = {}
local entries = redis.call('ZRANGEBYSCORE', K.waiting, '-inf', int(NOW), 'LIMIT', '0', int(limit))
for _, number in ipairs(entries) do
  local record = load(number)
  if not record or record.state ~= 'waiting' then
    redis.call('ZREM', K.waiting, number)
  else
    record.relinks = (record.relinks or 0) + 1
    local wait = math.min(RELINK_FIRST_MS * 2 ^ math.min(record.relinks, 20), RELINK_MAX_MS)
    redis.call('ZADD', K.waiting, int(NOW + wait), number)
    save(number, record)
    local others = {}
    for _, dep in ipairs(record.waiting_on or {}) do
      if split_id(dep) ~= FN then others[#others + 1] = dep end
    end
    due[#due + 1] = { tonumber(number), others }
  end
end
return { #entries, due }

end)()
end_call()
return reply

end }

function KEYS_OF.tag(keys) return { jobs = keys[1], tagged = keys[2], stats = keys[3], events = keys[4] } end
redis.register_function{ function_name = 'wg2_tag', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.tag)
local reply = (function()
-- tag: add tags to a job or remove them (qless' tag add/remove).
--
-- KEYS: jobs tagged stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  'add' or 'remove'
-- ARGV[4..] the tags
--
-- Returns: the job's tags afterwards, or the error reply `NOJOB` when there is no such job.

local number, how = ARGV[2], ARGV[3]
if how ~= 'add' and how ~= 'remove' then return redis.error_reply("BADARGS tag: 'add' or 'remove'") end
for i = 4, #ARGV do
  if ARGV[i] == '' or not short(ARGV[i], MAX_KEY_BYTES) then
    return redis.error_reply('BADARGS tag: a tag must be 1 to ' .. MAX_KEY_BYTES .. ' bytes')
  end
end

local record = load(number)
if not record then return redis.error_reply('NOJOB no such job ' .. id_of(number)) end
local tags = record.tags or {}
if how == 'add' then
  local after = #tags
  local seen = {}
  for _, tag in ipairs(tags) do seen[tag] = true end
  for i = 4, #ARGV do
    if not seen[ARGV[i]] then
      seen[ARGV[i]] = true
      after = after + 1
    end
  end
  if after > MAX_TAGS then
    return redis.error_reply('BADARGS tag: a job has at most ' .. MAX_TAGS .. ' tags (it would have ' .. after .. ')')
  end
end
for i = 4, #ARGV do
  local tag = ARGV[i]
  if how == 'add' and not contains(tags, tag) then
    tags[#tags + 1] = tag
    redis.call('ZADD', K.tagged, 0, tag .. '\0' .. pad(number))
  elseif how == 'remove' and contains(tags, tag) then
    local kept = {}
    for _, t in ipairs(tags) do if t ~= tag then kept[#kept + 1] = t end end
    tags = kept
    redis.call('ZREM', K.tagged, tag .. '\0' .. pad(number))
  end
end
record.tags = list_or_nil(tags)
save(number, record)
return tags

end)()
end_call()
return reply

end }

function KEYS_OF.adopt(keys) return { jobs = keys[1], stats = keys[2], events = keys[3] } end
redis.register_function{ function_name = 'wg2_adopt', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.adopt)
local reply = (function()
-- adopt: the parent's side of a child job (`wasmgear:job/jobs`). The child may be of another
-- function, so each step is a call of its own on the parent's: asked first (may the parent
-- have another child?), then told the child's id once it is enqueued. Once a parent's
-- cancel is asked for, or it has ended, it may have no new child: the first step says so,
-- and the second says so too (the cancel came in between), so that the caller cancels the
-- child it has just enqueued; the child is listed all the same, for whoever cancels the
-- parent's children.
--
-- KEYS: jobs stats events
-- ARGV[1]  the function name (the parent's)
-- ARGV[2]  the parent's job number
-- ARGV[3]  the child's id (`G:N`) to list; '' to ask first
-- ARGV[4]  optional: 'group' to have the parent's group answered too (its children join it)
--
-- Returns: {children, status}: how many children the parent lists (afterwards), and
--          'running' when it may have children; 'cancelling' when its cancel has been
--          asked for; its state when it is not running (`queued`, ..., `succeeded`, ...);
--          'full' when it lists MAX_CHILDREN already (asking only: nothing is listed). Or
--          the error reply `NOJOB` when there is no such job, `BADARGS` for a child id that
--          is not one (both change nothing). With ARGV[4] 'group': {children, status, group},
--          group the parent's ('' when it has none).

local number, child = ARGV[2], ARGV[3]
if child ~= '' and not split_id(child or '') then
  return redis.error_reply('BADARGS adopt: the child must be a job id (FUNCTION:NUMBER), or empty to ask')
end
local record = load(number)
if not record then return redis.error_reply('NOJOB no such job ' .. id_of(number)) end
local children = record.children or {}
local status = record.state
if status == 'running' and record.cancel_requested_ms then status = 'cancelling' end
local function reply()
  if ARGV[4] == 'group' then return { #children, status, record.group_id or '' } end
  return { #children, status }
end
if child == '' then
  if status == 'running' and #children >= MAX_CHILDREN then status = 'full' end
  return reply()
end
if not contains(children, child) and #children < MAX_CHILDREN then
  children[#children + 1] = child
  record.children = children
  save(number, record)
end
return reply()

end)()
end_call()
return reply

end }

function KEYS_OF.retry(keys) return { jobs = keys[1], ready = keys[2], scheduled = keys[3], waiting = keys[4], expires = keys[5], uniq = keys[6], failed = keys[7], counts = keys[8], stats = keys[9], config = keys[10], events = keys[11], work = keys[12], groups = keys[13], group_ready = keys[14], group_running = keys[15], group_config = keys[16], checkpoints = keys[17] } end
redis.register_function{ function_name = 'wg2_retry', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.retry)
local reply = (function()
-- retry: run failed (or cancelled) jobs again, with as many attempts as they first had
-- (qless' retry of a failure group), or the serving plugin's default again for a job
-- enqueued without a number. A job runs no earlier than it was first scheduled for, and
-- waits again for those of its dependencies (`after`) that have not succeeded (but those
-- whose failure it tolerates, `after_ignore` and `after_continue`, and that have ended).
-- Jobs that were cancelled because this one failed stay cancelled.
--
-- KEYS: jobs ready scheduled waiting expires uniq failed counts stats config events work groups group_ready group_running group_config checkpoints
-- ARGV[1]  the function name
-- ARGV[2]  'job': ARGV[3] is a job number, which must be failed or cancelled;
--          'group': ARGV[3] is a failure group and ARGV[4] the most of its jobs to look at
--          (oldest first)
-- ARGV[4] ('job') or ARGV[5] ('group'), optional: 'fresh' drops each job's checkpoint, so
--          that it starts again from the beginning rather than resuming (see `checkpoint`)
--
-- Returns: {moved, links, looked}: moved lists the numbers of the jobs queued (or scheduled, or
--          waiting) again (for 'job', an empty list when the job had not ended failed or
--          cancelled); links is a flat list of dependent id, dependency id for dependencies
--          in other functions the caller must link again (see `enqueue`). Or the error reply
--          `NOJOB` when there is no such job, or `CONFLICT` when a dependency in this function
--          has failed, was cancelled or is gone (retry it first; nothing changes); looked
--          is how many members of the group were looked at (fewer than ARGV[4]: the group
--          has no more). Every job looked at leaves the group.
-- Publishes: `retry` for each job.

local LINKS = {}

-- Whether the job has been leased: then every dependency had succeeded first, and it does
-- not wait for them again (they may have been forgotten since).
local function started(record)
  return record.started_ms ~= nil
end

-- Why a job that never started cannot run (a dependency in this function that will never
-- succeed), or nil.
local function blocked(record)
  if started(record) then return nil end
  for _, dep in ipairs(record.after or {}) do
    local fn, dep_number = split_id(dep)
    if fn == FN then
      local dep_record = load(dep_number)
      local tolerated = tolerates(record, dep)
      if not dep_record and not tolerated then return 'dependency ' .. dep .. ' no longer exists' end
      if dep_record and ENDED[dep_record.state] == 'unsuccessful' and not tolerated then
        return 'dependency ' .. dep .. ' has ' .. dep_record.state .. ': retry it first'
      end
    end
  end
  return nil
end

local function requeue(number, record, fresh)
  unfinish(number, record)
  if fresh then CHECKPOINT.drop(number, record) end
  -- Run again now, its deadline is gone (an expired job would expire again at once).
  record.expires_ms = nil
  if record.default_attempts or record.max_attempts == 0 then
    -- The serving plugin's default again, fixed by the next lease.
    record.max_attempts = 0
  else
    record.first_attempts = record.first_attempts or record.max_attempts
    record.max_attempts = record.attempt + math.max(record.first_attempts, 1)
  end
  if record.uniq and not redis.call('HGET', K.uniq, record.uniq) then
    redis.call('HSET', K.uniq, record.uniq, number)
  end
  local waiting_on = {}
  local deps = record.after or {}
  if started(record) then deps = {} end
  for _, dep in ipairs(deps) do
    local fn, dep_number = split_id(dep)
    if fn == FN then
      local dep_record = load(dep_number)
      -- Gone, failed or cancelled: tolerated (see `blocked`), nothing to wait for.
      local ended = not dep_record or ENDED[dep_record.state] == 'unsuccessful'
      if not ended and dep_record.state ~= 'succeeded' then
        if not contains(dep_record.dependents, id_of(number)) then
          local dependents = dep_record.dependents or {}
          dependents[#dependents + 1] = id_of(number)
          dep_record.dependents = dependents
          save(dep_number, dep_record)
        end
        waiting_on[#waiting_on + 1] = dep
      end
    else
      waiting_on[#waiting_on + 1] = dep
      LINKS[#LINKS + 1] = id_of(number)
      LINKS[#LINKS + 1] = dep
    end
  end
  if #waiting_on > 0 then
    record.state = 'waiting'
    record.waiting_on = waiting_on
    record.relinks = nil
    if (record.not_before_ms or 0) > NOW then record.run_at_ms = record.not_before_ms end
    redis.call('ZADD', K.waiting, int(NOW + RELINK_FIRST_MS), number)
  elseif (record.not_before_ms or 0) > NOW then
    make_scheduled(number, record, record.not_before_ms)
  else
    make_ready(number, record)
  end
  save(number, record)
  publish({ event = 'retry', id = id_of(number), attempt = record.attempt, at_ms = NOW })
end

if ARGV[2] ~= 'job' and (ARGV[2] ~= 'group' or not whole(ARGV[4] or '', 1, 10000)) then
  return redis.error_reply("BADARGS retry: 'job' and a number, or 'group', a group and the most jobs (1..10000)")
end
local fresh_at = ARGV[2] == 'job' and 4 or 5
if ARGV[fresh_at] ~= nil and ARGV[fresh_at] ~= 'fresh' then
  return redis.error_reply("BADARGS retry: the last argument may only be 'fresh'")
end
local fresh = ARGV[fresh_at] == 'fresh'

local moved, looked = {}, 0
if ARGV[2] == 'job' then
  local number = ARGV[3]
  local record = load(number)
  if not record then return redis.error_reply('NOJOB no such job ' .. id_of(number)) end
  if ENDED[record.state] == 'unsuccessful' then
    local why = blocked(record)
    if why then return redis.error_reply('CONFLICT job ' .. id_of(number) .. ' cannot run: ' .. why) end
    requeue(number, record, fresh)
    moved[1] = tonumber(number)
  end
else
  local group, limit = ARGV[3], tonumber(ARGV[4])
  local members = redis.call('ZRANGEBYLEX', K.failed, '[' .. group .. '\0', '(' .. group .. '\1', 'LIMIT', 0, int(limit))
  looked = #members
  for _, member in ipairs(members) do
    local number = tostring(tonumber(string.sub(member, #group + 2)))
    local record = load(number)
    -- A failed job has started (see `blocked`): it can always run again.
    if record and (record.state == 'failed' or record.state == 'expired') then
      requeue(number, record, fresh)
      moved[#moved + 1] = tonumber(number)
    else
      redis.call('ZREM', K.failed, member)
    end
  end
end
return { moved, LINKS, looked }

end)()
end_call()
return reply

end }

function KEYS_OF.configure(keys) return { stats = keys[1], config = keys[2], events = keys[3], work = keys[4], jobs = keys[5], leased = keys[6], group_running = keys[7], group_config = keys[8] } end
redis.register_function{ function_name = 'wg2_configure', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.configure)
local reply = (function()
-- configure: set or clear settings of one function's queue, shared by all workers.
--
-- KEYS: stats config events work jobs leased group_running group_config
-- ARGV[1]  the function name
-- ARGV[2..] pairs of setting and value; an empty value clears the setting:
--   paused            '1': workers lease none of the function's jobs (enqueueing goes on)
--   concurrency       the most jobs running at once, over all workers
--   rate_limit        the most leases per rate_interval_ms, over all workers
--   rate_interval_ms  the rate limit's window, ms
--   keep_finished     the most finished jobs kept (oldest forgotten first); default 50000
--   group_concurrency       each group's most jobs running at once (a group's own, set with
--                           `configure_group`, overrides it); 1 makes each group a sequence
--   group_rate_limit        each group's most leases per group_rate_interval_ms
--   group_rate_interval_ms  the window of each group's rate limit, ms
--   encrypt           '1': the function stores only encrypted input (`enqueue` refuses a
--                     plain one, before writing; see crates/proto/src/crypto.rs)
--   min_replicas      how many replicas must confirm an enqueue of the function's jobs, and
--                     a worker's completion of them, before the call reports success
--                     (producers and workers send `WAIT` after the write: see `enqueue`)
--
-- Returns: the settings afterwards, as a flat list of setting, value.
-- Publishes: `config`, so idle workers look again at once.

-- Every pair is checked before the first is written: a refused call changes nothing.
local RANGES = {
  concurrency = { 1, MAX_WHOLE }, rate_limit = { 1, MAX_WHOLE }, rate_interval_ms = { 1, MAX_DURATION_MS },
  keep_finished = { 1, MAX_WHOLE }, group_concurrency = { 1, MAX_WHOLE }, group_rate_limit = { 1, MAX_WHOLE },
  group_rate_interval_ms = { 1, MAX_DURATION_MS }, min_replicas = { 1, MAX_MIN_REPLICAS },
}
if #ARGV % 2 ~= 1 then return redis.error_reply('BADARGS configure: settings come in SETTING VALUE pairs') end
for i = 2, #ARGV - 1, 2 do
  local setting, value = ARGV[i], ARGV[i + 1]
  local range = RANGES[setting]
  if setting == 'paused' or setting == 'encrypt' then
    if value ~= '' and value ~= '1' then return redis.error_reply('BADARGS configure: ' .. setting .. " is '1' or ''") end
  elseif not range then
    return redis.error_reply('BADARGS configure: unknown setting ' .. setting)
  elseif value ~= '' and not whole(value, range[1], range[2]) then
    return redis.error_reply(string.format('BADARGS configure: %s must be a whole number in %d..%d, or empty to clear it',
      setting, range[1], range[2]))
  end
end
for i = 2, #ARGV - 1, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', K.config, ARGV[i])
  else
    redis.call('HSET', K.config, ARGV[i], ARGV[i + 1])
  end
end
CONFIG = nil -- read again if asked
for i = 2, #ARGV - 1, 2 do
  if ARGV[i] == 'group_concurrency' then
    -- The groups' slots counted again under the new limit.
    GROUP.LIMITS, GROUP.CONFIGURED = {}, nil
    GROUP.recount()
    break
  end
end
publish({ event = 'config', id = '' })
return redis.call('HGETALL', K.config)

end)()
end_call()
return reply

end }

function KEYS_OF.configure_group(keys) return { ready = keys[1], stats = keys[2], config = keys[3], events = keys[4], work = keys[5], groups = keys[6], group_ready = keys[7], group_running = keys[8], group_config = keys[9], jobs = keys[10], leased = keys[11] } end
redis.register_function{ function_name = 'wg2_configure_group', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.configure_group)
local reply = (function()
-- configure_group: set or clear one group's own limits, or pause or resume it (lib.lua,
-- "Groups"). A limit left empty falls back to the function's (`group_concurrency`,
-- `group_rate_limit`, `group_rate_interval_ms`, set with `configure`).
--
-- KEYS: ready stats config events work groups group_ready group_running group_config jobs leased
-- ARGV[1]  the function name
-- ARGV[2]  the group key
-- ARGV[3..] pairs of setting and value; an empty value clears the setting:
--   concurrency       the most jobs of the group running at once, over all workers (1: a
--                     sequence, one at a time in order)
--   rate_limit        the most leases of the group per rate_interval_ms
--   rate_interval_ms  the window of its rate limit, ms
--   paused            '1': workers lease none of the group's jobs (the other groups go on)
--
-- Returns: {concurrency, rate_limit, rate_interval_ms, paused}, the group's own settings
--          afterwards ('' where it has none). Or, having written nothing, the error reply
--          `BADARGS configure_group: ...`.
-- Publishes: `config`, so idle workers look again at once.

local group = ARGV[2]
if not GROUP.fits(group) then
  return redis.error_reply('BADARGS configure_group: ' .. tostring(group) .. " is not a group key (1 to "
    .. MAX_KEY_BYTES .. " bytes of printable ASCII but space, '\"', '\\' and '|')")
end
if #ARGV % 2 ~= 0 then return redis.error_reply('BADARGS configure_group: settings come in SETTING VALUE pairs') end
local SETTINGS = { concurrency = 1, rate_limit = 2, rate_interval_ms = 3, paused = 4 }
local RANGES = { concurrency = MAX_WHOLE, rate_limit = MAX_WHOLE, rate_interval_ms = MAX_DURATION_MS }
-- Every pair is checked before the first is written: a refused call changes nothing.
for i = 3, #ARGV - 1, 2 do
  local setting, value = ARGV[i], ARGV[i + 1]
  if not SETTINGS[setting] then
    return redis.error_reply('BADARGS configure_group: unknown setting ' .. setting
      .. ' (concurrency, rate_limit, rate_interval_ms, paused)')
  elseif setting == 'paused' then
    if value ~= '' and value ~= '1' then return redis.error_reply("BADARGS configure_group: paused is '1' or ''") end
  elseif value ~= '' and not whole(value, 1, RANGES[setting]) then
    return redis.error_reply(string.format('BADARGS configure_group: %s must be a whole number in 1..%d, or empty to clear it',
      setting, RANGES[setting]))
  end
end
local own = { string.match(redis.call('HGET', K.group_config, group) or '', '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$') }
if #own == 0 then own = { '', '', '', '' } end
for i = 3, #ARGV - 1, 2 do own[SETTINGS[ARGV[i]]] = ARGV[i + 1] end
if table.concat(own) == '' then
  redis.call('HDEL', K.group_config, group)
else
  redis.call('HSET', K.group_config, group, table.concat(own, '|'))
end
GROUP.LIMITS, GROUP.CONFIGURED = {}, nil
for i = 3, #ARGV - 1, 2 do
  -- The groups' slots counted again under the new limit.
  if ARGV[i] == 'concurrency' then GROUP.recount() break end
end
-- Resumed, or given more room: back in the round if it has ready jobs (a group that still
-- may not lease leaves it again at its turn).
if own[4] ~= '1' and GROUP.has_ready(group) then GROUP.join(group) end
publish({ event = 'config', id = '' })
return own

end)()
end_call()
return reply

end }

function KEYS_OF.groups(keys) return { ready = keys[1], stats = keys[2], events = keys[3], groups = keys[4], group_ready = keys[5], group_running = keys[6], group_config = keys[7], group_wait = keys[8], jobs = keys[9], leased = keys[10] } end
redis.register_function{ function_name = 'wg2_groups', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.groups)
local reply = (function()
-- groups: a function's groups (lib.lua, "Groups"), the deepest first: each group's ready
-- jobs, jobs holding a slot, own settings and whether it waits for its rate window.
--
-- KEYS: ready stats events groups group_ready group_running group_config group_wait jobs leased
-- ARGV[1]  the function name
-- ARGV[2]  the most groups to answer, 1..MAX_GROUPS_LISTED
-- ARGV[3]  one group to answer alone ('': every group)
--
-- Returns: {groups, truncated, ungrouped, rows}: groups, how many groups were looked at
--          (those with ready jobs, running jobs or their own settings); truncated, 1 when
--          there were more than MAX_GROUPS_SCANNED (the rest were not looked at);
--          ungrouped, the ready jobs without a group; rows, the deepest `most` groups, each
--          {group, ready, running, own settings 'CONCURRENCY|RATE_LIMIT|RATE_INTERVAL_MS|
--          PAUSED' ('' where it has none), waits until (ms; 0 when it does not wait)}. Or
--          the error reply `BADARGS groups: ...`.

local most = whole(ARGV[2] or '', 1, MAX_GROUPS_LISTED)
if not most then
  return redis.error_reply('BADARGS groups: the most groups to answer must be a whole number in 1..' .. MAX_GROUPS_LISTED)
end
local only = ARGV[3] or ''
if only ~= '' and not GROUP.fits(only) then
  return redis.error_reply('BADARGS groups: ' .. only .. ' is not a group key')
end

local seen, names, truncated = {}, {}, 0
local function note(group)
  if seen[group] then return true end
  if #names >= MAX_GROUPS_SCANNED then
    truncated = 1
    return false
  end
  seen[group] = true
  names[#names + 1] = group
  return true
end
if only ~= '' then
  note(only)
else
  -- Each group with ready jobs once: from one group's first member to the next group's.
  local from = '-'
  while true do
    local first = redis.call('ZRANGE', K.group_ready, from, '+', 'BYLEX', 'LIMIT', '0', '1')
    if #first == 0 then break end
    local group = string.match(first[1], '^([^%z]*)%z')
    if not group or not note(group) then break end
    from = GROUP.last(group)
  end
  for _, group in ipairs(redis.call('HKEYS', K.group_running)) do if not note(group) then break end end
  for _, group in ipairs(redis.call('HKEYS', K.group_config)) do if not note(group) then break end end
end

-- Each group's running jobs, counted from the jobs leased now (a group without a
-- concurrency limit keeps no count).
local running = {}
local leased = redis.call('ZRANGE', K.leased, '0', '-1')
local raws = hmget(K.jobs, leased)
for i = 1, #leased do
  local group = raws[i] and string.match(raws[i], '"group_id":"([^"]*)"')
  if group then
    group = string.gsub(group, '\\/', '/')
    running[group] = (running[group] or 0) + 1
    if only == '' then note(group) end
  end
end

local rows = {}
for _, group in ipairs(names) do
  rows[#rows + 1] = {
    group,
    redis.call('ZLEXCOUNT', K.group_ready, GROUP.first(group), GROUP.last(group)),
    running[group] or 0,
    redis.call('HGET', K.group_config, group) or '',
    tonumber(redis.call('ZSCORE', K.group_wait, group) or '0'),
  }
end
table.sort(rows, function(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  if a[3] ~= b[3] then return a[3] > b[3] end
  return a[1] < b[1]
end)
local listed = {}
for i = 1, math.min(most, #rows) do listed[i] = rows[i] end
return { #names, truncated, redis.call('ZCARD', K.ready), listed }

end)()
end_call()
return reply

end, flags = { 'no-writes' } }

function KEYS_OF.priority(keys) return { jobs = keys[1], ready = keys[2], stats = keys[3], events = keys[4], groups = keys[5], group_ready = keys[6] } end
redis.register_function{ function_name = 'wg2_priority', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.priority)
local reply = (function()
-- priority: change the priority of a job that has not started (qless' priority). A queued
-- job moves to its new place in the ready set at once.
--
-- KEYS: jobs ready stats events groups group_ready
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  the new priority, MIN_PRIORITY..MAX_PRIORITY (-1000..1000)
--
-- Returns: {1, state} when changed; {0, state} when the job is running or has ended (nothing
--          changes); {0, 'missing'} when there is no such job.

local number, priority = ARGV[2], whole(ARGV[3] or '', MIN_PRIORITY, MAX_PRIORITY)
if not priority then
  return redis.error_reply(string.format('BADARGS priority: the priority must be a whole number in %d..%d, not %s',
    MIN_PRIORITY, MAX_PRIORITY, tostring(ARGV[3])))
end

local record = load(number)
if not record then return { 0, 'missing' } end
if record.state ~= 'queued' and record.state ~= 'scheduled' and record.state ~= 'waiting' then
  return { 0, record.state }
end
if record.state == 'queued' then
  GROUP.unready(number, record)
  record.priority = priority
  if record.group_id and K.groups then
    redis.call('ZADD', K.group_ready, 0, GROUP.member(record.group_id, priority, number))
  else
    redis.call('ZADD', K.ready, int((PRIORITY_BASE - priority) * NUMBER_SPAN + tonumber(number)), number)
  end
end
record.priority = priority
save(number, record)
return { 1, record.state }

end)()
end_call()
return reply

end }

function KEYS_OF.get(keys) return { jobs = keys[1], output = keys[2], stats = keys[3], events = keys[4] } end
redis.register_function{ function_name = 'wg2_get', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.get)
local reply = (function()
-- get: a job's record as JSON (the fields PROTOCOL.md lists), and its output. How records
-- are kept in `jobs` is this library's business (lib.lua, job records): clients read them
-- here.
--
-- KEYS: jobs output stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
--
-- Returns: {record, output} (output false unless the job succeeded and is kept), or false
--          when there is no such job.

local number = ARGV[2]
local raw = redis.call('HGET', K.jobs, number)
if not raw then return false end
return { cjson.encode(WATCH.public(decode(raw))), redis.call('HGET', K.output, number) }

end)()
end_call()
return reply

end, flags = { 'no-writes' } }

function KEYS_OF.watch(keys) return { jobs = keys[1], output = keys[2], stats = keys[3], events = keys[4] } end
redis.register_function{ function_name = 'wg2_watch', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.watch)
local reply = (function()
-- watch: what `get` answers, and the mark that a client waits on the job: when it ends, its
-- `finish` event carries its record and (when small) its output, so the waiting client
-- needs no read of its own. A wait calls it first, after subscribing to the events.
-- Calling it again, or on a job that has ended, changes nothing.
--
-- KEYS: jobs output stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
--
-- Returns: {record, output} as `get` answers them, or false when there is no such job.
-- Publishes, when the job ends: `finish` with `record` (as `get` answers it) and `output`
-- (the output, when it succeeded with at most MAX_EVENT_OUTPUT bytes of printable ASCII,
-- tabs and line ends) or `output_omitted` true (it has an output: read it with `get`).

local number = ARGV[2]
local raw = redis.call('HGET', K.jobs, number)
if not raw then return false end
local record = decode(raw)
if not ENDED[record.state] and not record.watched then
  record.watched = true
  redis.call('HSET', K.jobs, number, encode(record))
end
return { cjson.encode(WATCH.public(record)), redis.call('HGET', K.output, number) }

end)()
end_call()
return reply

end }

function KEYS_OF.outcomes(keys) return { jobs = keys[1], output = keys[2], stats = keys[3], events = keys[4] } end
redis.register_function{ function_name = 'wg2_outcomes', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.outcomes)
local reply = (function()
-- outcomes: how jobs of this function stand, for a dependent reading its dependencies
-- (`wasmgear:job/dependencies`): each one's state, the size of its output and its error,
-- without the outputs themselves (`output` reads those a piece at a time), so that a job
-- with many dependencies reads only what it asks for.
--
-- KEYS: jobs output stats events
-- ARGV[1]  the function name
-- ARGV[2]  n: how many jobs, 1..MAX_OUTCOMES
-- ARGV[3..2+n]  their numbers
--
-- Returns: n entries {state, output_bytes, error}, in the order asked: state `missing` for a
--          job not kept (never made, or forgotten after its retention); output_bytes 0 unless
--          it succeeded with its output kept; error the message it failed or was cancelled
--          with, or false.

local n = whole(ARGV[2], 1, MAX_OUTCOMES)
if not n or #ARGV ~= 2 + n then
  return redis.error_reply('BADARGS outcomes: give a count of 1..' .. MAX_OUTCOMES .. ' and as many job numbers')
end
local numbers = {}
for i = 1, n do
  local number = ARGV[2 + i]
  if not job_number(number) then
    return redis.error_reply('BADARGS outcomes: ' .. tostring(number) .. ' is not a job number')
  end
  numbers[i] = number
end

-- Read from the records' text: only a failed or cancelled job's other fields are decoded
-- (for its error).
local raws = hmget(K.jobs, numbers)
local answers = {}
for i, number in ipairs(numbers) do
  local raw = raws[i]
  local f = raw and record_fields(raw)
  -- A record in the former layout is decoded whole.
  local record = raw and not f and decode(raw)
  local state = (f and f[R_STATE]) or (record and record.state)
  if not state then
    answers[i] = { 'missing', 0, false }
  else
    local size = 0
    if state == 'succeeded' then size = redis.call('HSTRLEN', K.output, number) end
    local message = false
    if ENDED[state] == 'unsuccessful' then
      record = record or (f[R_OTHERS] ~= '' and cjson.decode(f[R_OTHERS])) or {}
      if type(record.error) == 'table' then message = record.error.message or false end
    end
    answers[i] = { state, size, message }
  end
end
return answers

end)()
end_call()
return reply

end, flags = { 'no-writes' } }

function KEYS_OF.output(keys) return { output = keys[1], stats = keys[2], events = keys[3] } end
redis.register_function{ function_name = 'wg2_output', callback = function(KEYS, ARGV)
begin(KEYS, ARGV, KEYS_OF.output)
local reply = (function()
-- output: a piece of a succeeded job's output, for a dependent that reads its dependencies'
-- outputs a piece at a time (the whole of one may be larger than the dependent wants to
-- hold at once).
--
-- KEYS: output stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  offset: the first byte wanted (0-based)
-- ARGV[4]  most: how many bytes at most, 1..MAX_OUTPUT_PIECE
--
-- Returns: the bytes from `offset` (empty past the end), or false when no output of the job
--          is kept (it has not succeeded, or it was forgotten).

local number = ARGV[2]
local offset = whole(ARGV[3])
local most = whole(ARGV[4], 1, MAX_OUTPUT_PIECE)
if not job_number(number) or not offset or not most then
  return redis.error_reply('BADARGS output: give a job number, an offset and a size of 1..' .. MAX_OUTPUT_PIECE)
end
local output = redis.call('HGET', K.output, number)
if not output then return false end
return string.sub(output, offset + 1, offset + most)

end)()
end_call()
return reply

end, flags = { 'no-writes' } }

redis.register_function{ function_name = 'wg2_advertise', callback = function(KEYS, ARGV)
-- advertise: put a worker in the worker list (or take it out), and forget dead workers.
--
-- KEYS[1]  wg:{workers}:expiry  zset  worker id scored by when its entry expires (ms)
-- KEYS[2]  wg:{workers}:info    hash  worker id -> what it advertises (JSON)
--
-- ARGV[1]  worker id
-- ARGV[2]  the worker's advertisement (JSON: host, pid, version, functions, running, ...)
-- ARGV[3]  how long the entry lives without a renewal, ms; 0 takes the worker out
--
-- Returns: how many workers are live after the change.

local expiry_key, info_key = KEYS[1], KEYS[2]
local id, ad, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

for _, dead in ipairs(redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('ZREM', expiry_key, dead)
  redis.call('HDEL', info_key, dead)
end
if ttl_ms > 0 then
  redis.call('ZADD', expiry_key, now + ttl_ms, id)
  redis.call('HSET', info_key, id, ad)
else
  redis.call('ZREM', expiry_key, id)
  redis.call('HDEL', info_key, id)
end
return redis.call('ZCARD', expiry_key)

end }

redis.register_function{ function_name = 'wg2_rollcall', callback = function(KEYS, ARGV)
-- rollcall: the live workers serving one function (GearMonkey's roll call). A worker joins
-- (or renews), leaves, or a client only counts.
--
-- KEYS[1]  wg:{F}:workers  zset  worker id scored by when its membership expires (ms)
-- KEYS[2], KEYS[3]  optional: wg:{F}:idle and wg:{F}:idle-args (lib.lua, "Idle workers
--          handed jobs directly"): a worker that leaves is no longer handed jobs either
--
-- ARGV[1]  worker id; '' to only count
-- ARGV[2]  how long the membership lives without a renewal, ms; 0 leaves
--
-- Returns: how many live workers serve the function after the change.

local workers_key = KEYS[1]
local id, ttl_ms = ARGV[1], tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', workers_key, '-inf', now)
if id ~= '' then
  if ttl_ms > 0 then
    redis.call('ZADD', workers_key, now + ttl_ms, id)
  else
    redis.call('ZREM', workers_key, id)
    if #KEYS == 3 then
      redis.call('ZREM', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
    end
  end
end
return redis.call('ZCARD', workers_key)

end }

redis.register_function{ function_name = 'wg2_workers', callback = function(KEYS, ARGV)
-- workers: what every live worker advertises.
--
-- KEYS[1]  wg:{workers}:expiry  zset  worker id scored by when its entry expires (ms)
-- KEYS[2]  wg:{workers}:info    hash  worker id -> its advertisement (JSON)
--
-- Returns: array of {id, advertisement, expires_ms} for the live workers, soonest expiry first.

local expiry_key, info_key = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local live = {}
local entries = redis.call('ZRANGEBYSCORE', expiry_key, now, '+inf', 'WITHSCORES')
for i = 1, #entries, 2 do
  local ad = redis.call('HGET', info_key, entries[i])
  if ad then live[#live + 1] = { entries[i], ad, tonumber(entries[i + 1]) } end
end
return live

end, flags = { 'no-writes' } }

redis.register_function{ function_name = 'wg2_deploy', callback = function(KEYS, ARGV)
-- deploy: record a version of a plugin whose chunks are stored, for each function it
-- serves, and make it their current version (unless told not to). Only for a deploy still
-- under way (`deploy_begin`) that no collector has doomed: then no chunk of the version was
-- deleted since the deploy pinned it and wrote them.
--
-- KEYS[1]  wg:{deploy}:versions   hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current    hash     function -> current version
-- KEYS[3]  wg:{deploy}:history    hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events     channel  `FUNCTION VERSION` after each change
-- KEYS[5]  wg:{deploy}:pending    zset     `VERSION TOKEN` of each deploy under way, scored by
--                                          when it lapses (ms; 0: doomed by a collector)
-- KEYS[6]  wg:{deploy}:graveyard  zset     versions no record names any more, to collect,
--                                          scored by when their last record went (ms)
--
-- ARGV[1]  the version (hex digits: the first 16 of the component's SHA-256)
-- ARGV[2]  its record (JSON object: sha256, size, chunks, name, functions, manifest); the
--          function and the time of the deploy (Redis' clock) are set here
-- ARGV[3]  `1` to make it current, `0` to store it only
-- ARGV[4]  how many versions of each function to keep (1 to 100000)
-- ARGV[5]  the deploy's token, as given to `deploy_begin`
--
-- Returns: {'ok', then the `FUNCTION VERSION`s no longer kept} (the caller checks that no
-- kept job names them, then calls `deploy_forget`), or {'lapsed'} when the deploy is not
-- under way any more (a collector doomed it, or forgot it: it starts again, pins and writes
-- the chunks anew); or the error reply `BADDEPLOY why`, having written nothing.

if #ARGV ~= 5 then return refuse('BADDEPLOY', 'deploy takes 5 arguments') end
local version, text, activate, keep, token = ARGV[1], ARGV[2], ARGV[3], whole(ARGV[4]), ARGV[5]
if not fits_version(version) then return refuse('BADDEPLOY', 'the version must be hex digits') end
local decoded, record = pcall(cjson.decode, text)
if not decoded or type(record) ~= 'table' or type(record.functions) ~= 'table'
  or #record.functions == 0 then
  return refuse('BADDEPLOY', 'the record must be a JSON object with a list of functions')
end
for _, fn in ipairs(record.functions) do
  if not fits_name(fn) then
    return refuse('BADDEPLOY', 'the record lists a function that is not a function name: ' .. tostring(fn))
  end
end
if activate ~= '0' and activate ~= '1' then
  return refuse('BADDEPLOY', 'ARGV[3] must be 1 (make it current) or 0')
end
if not keep or keep < 1 or keep > 100000 then
  return refuse('BADDEPLOY', 'the versions kept must be 1 to 100000')
end
if not fits_token(token) then return refuse('BADDEPLOY', 'the token must be 1 to 64 letters or digits') end
local member = version .. ' ' .. token
local under_way = redis.call('ZSCORE', KEYS[5], member)
if not under_way or under_way == '0' then return { 'lapsed' } end
record.deployed_ms = clock_ms()
record.version = version
-- Every record's text before the first write (an encoding that fails writes nothing).
local texts = {}
for i, fn in ipairs(record.functions) do
  record['function'] = fn
  local encoded, stored = pcall(cjson.encode, record)
  if not encoded then
    return refuse('BADDEPLOY', 'the record cannot be stored: ' .. tostring(stored))
  end
  texts[i] = stored
end

for i, fn in ipairs(record.functions) do
  redis.call('HSET', KEYS[1], fn .. ' ' .. version, texts[i])
  if activate == '1' then deploy_make_current(KEYS, fn, version) end
end
redis.call('ZREM', KEYS[5], member)
redis.call('ZREM', KEYS[6], version)
local kept, fields = deploy_kept(KEYS, keep)
local reply = { 'ok' }
local gone = {}
for _, field in ipairs(fields) do
  if not kept[field] then gone[#gone + 1] = field end
end
table.sort(gone)
for _, field in ipairs(gone) do reply[#reply + 1] = field end
return reply

end }

redis.register_function{ function_name = 'wg2_deploy_activate', callback = function(KEYS, ARGV)
-- deploy_activate: make a stored version of a function its current version.
--
-- KEYS[1]  wg:{deploy}:versions  hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current   hash     function -> current version
-- KEYS[3]  wg:{deploy}:history   hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events    channel  `FUNCTION VERSION` after each change
--
-- ARGV[1]  the function
-- ARGV[2]  the version, or a prefix of it that only one stored version of it has
--
-- Returns: {'ok', VERSION}, {'missing', why} (no such version) or {'refused', why}.

local fn, wanted = ARGV[1], ARGV[2]
if not fits_name(fn) or type(wanted) ~= 'string' or wanted == '' then
  return { 'refused', 'give a function name and a version (or a prefix of it)' }
end
local version, matches, elsewhere = nil, 0, {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local f, v = string.match(field, '^(%S+) (%S+)$')
  if v and string.sub(v, 1, #wanted) == wanted then
    if f == fn then
      if v == wanted then
        version, matches = v, 1
        break
      end
      version, matches = v, matches + 1
    else
      elsewhere[#elsewhere + 1] = f
    end
  end
end
if matches > 1 then
  return { 'refused', 'more than one deployed version of ' .. fn .. ' starts with ' .. wanted .. ': give more of it' }
end
if matches == 0 and #elsewhere > 0 then
  table.sort(elsewhere)
  return { 'refused', 'version ' .. wanted .. ' serves ' .. table.concat(elsewhere, ', ') .. ', not ' .. fn }
end
if matches == 0 then
  return { 'missing', 'no deployed version ' .. wanted .. ' of ' .. fn .. ' (`wasmgear deploy --list` shows the versions kept)' }
end
deploy_make_current(KEYS, fn, version)
return { 'ok', version }

end }

redis.register_function{ function_name = 'wg2_deploy_rollback', callback = function(KEYS, ARGV)
-- deploy_rollback: put a function back on the version it had before its current one.
--
-- KEYS[1]  wg:{deploy}:versions  hash     version -> its record (JSON)
-- KEYS[2]  wg:{deploy}:current   hash     function -> current version
-- KEYS[3]  wg:{deploy}:history   hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events    channel  `FUNCTION VERSION` after each change
--
-- ARGV[1]  the function
--
-- Returns: {'ok', VERSION_LEFT, VERSION_NOW} or {'refused', why}. The version left is taken off
-- the function's stack (a second rollback goes further back, not forth again).

local fn = ARGV[1]
if not fits_name(fn) then return { 'refused', 'give a function name' } end
local stack = deploy_stack(KEYS[3], fn)
if #stack == 0 then
  return { 'refused', fn .. ' has no deployed version (deploy one with `wasmgear deploy`)' }
end
if #stack == 1 then
  return { 'refused', fn .. ' has no earlier deployed version to roll back to' }
end
local left = table.remove(stack)
redis.call('HSET', KEYS[3], fn, cjson.encode(stack))
local now = stack[#stack]
redis.call('HSET', KEYS[2], fn, now)
redis.call('PUBLISH', KEYS[4], fn .. ' ' .. now)
return { 'ok', left, now }

end }

redis.register_function{ function_name = 'wg2_deploy_forget', callback = function(KEYS, ARGV)
-- deploy_forget: forget stored versions that are no longer kept. A version no record names
-- any more goes to the graveyard: a collector deletes its chunks (`deploy_doom`).
--
-- KEYS[1]  wg:{deploy}:versions   hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current    hash     function -> current version
-- KEYS[3]  wg:{deploy}:history    hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events     channel  `FUNCTION VERSION` after each change
-- KEYS[5]  wg:{deploy}:pending    zset     `VERSION TOKEN` of each deploy under way, scored by
--                                          when it lapses (ms; 0: doomed by a collector)
-- KEYS[6]  wg:{deploy}:graveyard  zset     versions no record names any more, to collect,
--                                          scored by when their last record went (ms)
--
-- ARGV[1]  how many versions of each function to keep (1 to 100000)
-- ARGV[2..]  the `FUNCTION VERSION`s to forget: those `deploy` returned that no kept job
--            names (one kept again since, by a deploy or an activation, is not forgotten)
--
-- Returns: the `FUNCTION VERSION`s forgotten; or the error reply `BADDEPLOY why`, having
-- written nothing.

local keep = whole(ARGV[1])
if not keep or keep < 1 or keep > 100000 then
  return refuse('BADDEPLOY', 'the versions kept must be 1 to 100000')
end
local kept, fields = deploy_kept(KEYS, keep)
local known = {}
for _, field in ipairs(fields) do known[field] = true end
-- What to forget, and each function's history without it, before the first write.
local forgotten, stacks = {}, {}
for i = 2, #ARGV do
  local field = ARGV[i]
  local fn, version = string.match(field, '^(%S+) (%S+)$')
  if fn and known[field] and not kept[field] then
    known[field] = nil
    forgotten[#forgotten + 1] = field
    local stack = {}
    for _, v in ipairs(stacks[fn] or deploy_stack(KEYS[3], fn)) do
      if v ~= version then stack[#stack + 1] = v end
    end
    stacks[fn] = stack
  end
end
local texts = {}
for fn, stack in pairs(stacks) do
  -- An empty Lua table would be encoded as an object.
  texts[fn] = #stack == 0 and '[]' or cjson.encode(stack)
end

local now = clock_ms()
for _, field in ipairs(forgotten) do redis.call('HDEL', KEYS[1], field) end
for fn, text in pairs(texts) do redis.call('HSET', KEYS[3], fn, text) end
-- Versions no record names any more.
local named = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local version = string.match(field, ' (%S+)$')
  if version then named[version] = true end
end
for _, field in ipairs(forgotten) do
  local version = string.match(field, ' (%S+)$')
  if not named[version] then redis.call('ZADD', KEYS[6], 'NX', now, version) end
end
return forgotten

end }

redis.register_function{ function_name = 'wg2_deploy_remove', callback = function(KEYS, ARGV)
-- deploy_remove: stop serving a function from the deployed-plugin store. Its versions stay
-- stored (replay finds them; `deploy_activate` serves one again).
--
-- KEYS[1]  wg:{deploy}:versions  hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current   hash     function -> current version
-- KEYS[3]  wg:{deploy}:history   hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events    channel  `FUNCTION VERSION` after each change (`FUNCTION -`
--                                         here)
--
-- ARGV[1]  the function
--
-- Returns: {'ok', VERSION_LEFT} or {'refused', why}.

local fn = ARGV[1]
if not fits_name(fn) then return { 'refused', 'give a function name' } end
local current = redis.call('HGET', KEYS[2], fn)
if not current then
  return { 'refused', fn .. ' is not served from the deployed-plugin store' }
end
redis.call('HDEL', KEYS[2], fn)
redis.call('HDEL', KEYS[3], fn)
redis.call('PUBLISH', KEYS[4], fn .. ' -')
return { 'ok', current }

end }

redis.register_function{ function_name = 'wg2_deploy_begin', callback = function(KEYS, ARGV)
-- deploy_begin: note a deploy of a version as under way, before it pins the version and
-- writes its chunks (or, renewing, that it still is). A collector deletes no chunks of a
-- version with a deploy under way; a deploy not renewed in the time it said is taken for an
-- interrupted one, and its chunks may be collected: then it is doomed, and renewing it
-- fails (it starts again with a fresh token, and writes every chunk anew).
--
-- KEYS[1]  wg:{deploy}:versions   hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current    hash     function -> current version
-- KEYS[3]  wg:{deploy}:history    hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events     channel  `FUNCTION VERSION` after each change
-- KEYS[5]  wg:{deploy}:pending    zset     `VERSION TOKEN` of each deploy under way, scored by
--                                          when it lapses (ms; 0: doomed by a collector)
-- KEYS[6]  wg:{deploy}:graveyard  zset     versions no record names any more, to collect,
--                                          scored by when their last record went (ms)
--
-- ARGV[1]  the version (hex digits)
-- ARGV[2]  the deploy's token (letters and digits, fresh for each try)
-- ARGV[3]  how long it may stay under way (ms, 1 to 86400000)
-- ARGV[4]  `0` to begin (a fresh token), `1` to renew
--
-- Returns: 1, or 0 when the deploy cannot go on: renewing one that a collector doomed or
-- forgot, or beginning with a token in use; or the error reply `BADDEPLOY why`, having
-- written nothing.

if #ARGV ~= 4 then return refuse('BADDEPLOY', 'deploy_begin takes 4 arguments') end
local version, token, ms, renew = ARGV[1], ARGV[2], whole(ARGV[3]), ARGV[4]
if not fits_version(version) then return refuse('BADDEPLOY', 'the version must be hex digits') end
if not fits_token(token) then return refuse('BADDEPLOY', 'the token must be 1 to 64 letters or digits') end
if not ms or ms < 1 or ms > 86400000 then
  return refuse('BADDEPLOY', 'the time under way must be 1 to 86400000 ms')
end
if renew ~= '0' and renew ~= '1' then
  return refuse('BADDEPLOY', 'ARGV[4] must be 0 (begin) or 1 (renew)')
end
local member = version .. ' ' .. token
local score = redis.call('ZSCORE', KEYS[5], member)
if (renew == '1') ~= (score ~= false) or score == '0' then return 0 end
redis.call('ZADD', KEYS[5], string.format('%d', clock_ms() + ms), member)
return 1

end }

redis.register_function{ function_name = 'wg2_deploy_pin', callback = function(KEYS, ARGV)
-- deploy_pin: pin a version's chunks, in their slot. A deploy pins them before writing them
-- (sharing the pin with other deploys of the same version, refused while a collector holds
-- it); a collector pins them alone before deleting them (refused while anyone holds it).
--
-- KEYS[1]  wg:{plugin:VERSION}:pin  string  `deploy`, or `collect:TOKEN`; expires by itself
--
-- ARGV[1]  `deploy`, or `collect:TOKEN` (TOKEN letters and digits)
-- ARGV[2]  how long the pin holds (ms, 1 to 86400000)
--
-- Returns: 1 if pinned, 0 if not; or the error reply `BADDEPLOY why`, having written nothing.

if #ARGV ~= 2 then return refuse('BADDEPLOY', 'deploy_pin takes 2 arguments') end
local who, ms = ARGV[1], whole(ARGV[2])
local collector = string.match(who, '^collect:(.*)$')
if who ~= 'deploy' and not fits_token(collector) then
  return refuse('BADDEPLOY', 'the pin is taken by `deploy` or `collect:TOKEN`')
end
if not ms or ms < 1 or ms > 86400000 then
  return refuse('BADDEPLOY', 'the pin must hold for 1 to 86400000 ms')
end
local held = redis.call('GET', KEYS[1])
if collector then
  if held then return 0 end
elseif held and held ~= 'deploy' then
  return 0
elseif held and redis.call('PTTL', KEYS[1]) >= ms then
  return 1
end
redis.call('SET', KEYS[1], who, 'PX', ms)
return 1

end }

redis.register_function{ function_name = 'wg2_deploy_unpin', callback = function(KEYS, ARGV)
-- deploy_unpin: let go of a version's pin: a deploy once it has recorded the version (the
-- record keeps the chunks from then on), or a collector, deleting the chunks first if it
-- says so. Nothing happens unless the pin is still the caller's (it has not expired).
--
-- KEYS[1]  wg:{plugin:VERSION}:chunks  hash    chunk number -> part of the component
-- KEYS[2]  wg:{plugin:VERSION}:pin     string  `deploy`, or `collect:TOKEN`
--
-- ARGV[1]  `deploy`, or `collect:TOKEN` as the collector pinned it
-- ARGV[2]  `1` to delete the chunks (a collector only), `0` to let go only
--
-- Returns: 1 if done, 0 if the pin is not the caller's (any more); or the error reply
-- `BADDEPLOY why`, having written nothing.

local who, drop = ARGV[1], ARGV[2]
local collector = #ARGV == 2 and who ~= 'deploy' and fits_token(string.match(who, '^collect:(.*)$'))
if #ARGV ~= 2 or not (who == 'deploy' or collector) or (drop ~= '0' and drop ~= '1')
  or (drop == '1' and not collector) then
  return refuse('BADDEPLOY', 'deploy_unpin takes `deploy` and 0, or `collect:TOKEN` and 1 or 0')
end
if redis.call('GET', KEYS[2]) ~= who then return 0 end
if drop == '1' then redis.call('DEL', KEYS[1]) end
redis.call('DEL', KEYS[2])
return 1

end }

redis.register_function{ function_name = 'wg2_deploy_collectable', callback = function(KEYS, ARGV)
-- deploy_collectable: the versions whose chunks may be collected (read only): those in the
-- graveyard, and those of deploys whose time under way is over (interrupted, or doomed).
--
-- KEYS[1]  wg:{deploy}:versions   hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current    hash     function -> current version
-- KEYS[3]  wg:{deploy}:history    hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events     channel  `FUNCTION VERSION` after each change
-- KEYS[5]  wg:{deploy}:pending    zset     `VERSION TOKEN` of each deploy under way, scored by
--                                          when it lapses (ms; 0: doomed by a collector)
-- KEYS[6]  wg:{deploy}:graveyard  zset     versions no record names any more, to collect,
--                                          scored by when their last record went (ms)
--
-- ARGV[1]  the most versions to return (1 to 10000)
--
-- Returns: the versions, each once; or the error reply `BADDEPLOY why`.

local most = whole(ARGV[1])
if #ARGV ~= 1 or not most or most < 1 or most > 10000 then
  return refuse('BADDEPLOY', 'ARGV[1] must be a count of 1 to 10000')
end
local seen, reply = {}, {}
local function add(version)
  if version and not seen[version] and #reply < most then
    seen[version] = true
    reply[#reply + 1] = version
  end
end
for _, version in ipairs(redis.call('ZRANGE', KEYS[6], 0, most - 1)) do add(version) end
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. string.format('%d', clock_ms()), 'LIMIT', 0, most)
for _, member in ipairs(lapsed) do add(string.match(member, '^(%S+) ')) end
return reply

end, flags = { 'no-writes' } }

redis.register_function{ function_name = 'wg2_deploy_doom', callback = function(KEYS, ARGV)
-- deploy_doom: a collector holding a version's pin asks whether it may delete the version's
-- chunks: not while a record names the version (it is taken out of the graveyard, and the
-- lapsed deploys of it forgotten), nor while a deploy of it is under way. Otherwise every
-- lapsed deploy of it is doomed (scored 0: recording it is refused, it starts again), and
-- the collector deletes the chunks, then calls `deploy_bury`.
--
-- KEYS[1]  wg:{deploy}:versions   hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current    hash     function -> current version
-- KEYS[3]  wg:{deploy}:history    hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events     channel  `FUNCTION VERSION` after each change
-- KEYS[5]  wg:{deploy}:pending    zset     `VERSION TOKEN` of each deploy under way, scored by
--                                          when it lapses (ms; 0: doomed by a collector)
-- KEYS[6]  wg:{deploy}:graveyard  zset     versions no record names any more, to collect,
--                                          scored by when their last record went (ms)
--
-- ARGV[1]  the version
--
-- Returns: 'doomed' (delete its chunks), 'named' or 'busy' (leave them); or the error reply
-- `BADDEPLOY why`, having written nothing.

if #ARGV ~= 1 or not fits_version(ARGV[1]) then
  return refuse('BADDEPLOY', 'deploy_doom takes a version (hex digits)')
end
local version = ARGV[1]
local suffix = ' ' .. version
local named = false
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(field, -#suffix) == suffix then named = true end
end
local current = redis.call('HVALS', KEYS[2])
for _, v in ipairs(current) do
  if v == version then named = true end
end
local now = clock_ms()
local pending = deploy_pending_of(KEYS[5], version)
if named then
  redis.call('ZREM', KEYS[6], version)
  for _, entry in ipairs(pending) do
    if entry[2] < now then redis.call('ZREM', KEYS[5], entry[1]) end
  end
  return 'named'
end
for _, entry in ipairs(pending) do
  if entry[2] >= now then return 'busy' end
end
for _, entry in ipairs(pending) do redis.call('ZADD', KEYS[5], 0, entry[1]) end
return 'doomed'

end }

redis.register_function{ function_name = 'wg2_deploy_bury', callback = function(KEYS, ARGV)
-- deploy_bury: once a collector has deleted a version's chunks, forget that they were to be
-- collected: the version leaves the graveyard, its doomed deploys leave :pending (a deploy
-- of it begun since stays, and writes the chunks again).
--
-- KEYS[1]  wg:{deploy}:versions   hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current    hash     function -> current version
-- KEYS[3]  wg:{deploy}:history    hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events     channel  `FUNCTION VERSION` after each change
-- KEYS[5]  wg:{deploy}:pending    zset     `VERSION TOKEN` of each deploy under way, scored by
--                                          when it lapses (ms; 0: doomed by a collector)
-- KEYS[6]  wg:{deploy}:graveyard  zset     versions no record names any more, to collect,
--                                          scored by when their last record went (ms)
--
-- ARGV[1]  the version
--
-- Returns: 1; or the error reply `BADDEPLOY why`, having written nothing.

if #ARGV ~= 1 or not fits_version(ARGV[1]) then
  return refuse('BADDEPLOY', 'deploy_bury takes a version (hex digits)')
end
local version = ARGV[1]
redis.call('ZREM', KEYS[6], version)
for _, entry in ipairs(deploy_pending_of(KEYS[5], version)) do
  if entry[2] == 0 then redis.call('ZREM', KEYS[5], entry[1]) end
end
return 1

end }

redis.register_function{ function_name = 'wg2_reseal', callback = function(KEYS, ARGV)
-- reseal: writes values of one hash sealed again with the newest key (`wasmgear keys
-- rotate`), each only if it is still the value that was read: one changed since (a job that
-- ran on, was retried or forgotten) is left as it is, for the next run.
--
-- KEYS[1]  the hash: a function's jobs, input, output, logs or checkpoints, or the
--          schedules' inputs
--
-- ARGV     field old new [field old new ...]: each field's value as read, and as sealed again
--
-- Returns: how many fields were written.

if #ARGV == 0 or #ARGV % 3 ~= 0 then
  return redis.error_reply('BADARGS reseal: give FIELD OLD NEW triples')
end
local written = 0
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    written = written + 1
  end
end
return written

end }

redis.register_function{ function_name = 'wg2_schedule_set', callback = function(KEYS, ARGV)
-- schedule_set: add a recurring schedule (or replace one of the same name). It starts anew:
-- no error of the one it replaces is kept.
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms); none while paused
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name (1 to 100 letters, digits, '_', '-', '.')
-- ARGV[2]  the definition (JSON object naming its `function`); `created_ms` is set here
--          (Redis' clock)
-- ARGV[3]  the input
-- ARGV[4]  its next tick (ms): the first after Redis' `TIME`, computed by the caller;
--          empty when it is paused
-- ARGV[5]  `1` to replace a schedule of that name, `0` to refuse
--
-- Returns: {'ok', created_ms} or {'exists', ''}; or the error reply `BADSCHEDULE why`, having
-- written nothing.

if #ARGV ~= 5 then return refuse('BADSCHEDULE', 'schedule_set takes 5 arguments') end
local name, text, input, next_text, replace = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not fits_name(name) then
  return refuse('BADSCHEDULE', 'the name must be 1 to 100 letters, digits, _, - or .')
end
local decoded, def = pcall(cjson.decode, text)
if not decoded or type(def) ~= 'table' then
  return refuse('BADSCHEDULE', 'the definition of ' .. name .. ' is not a JSON object')
end
if not fits_name(def['function']) then
  return refuse('BADSCHEDULE', 'the definition of ' .. name .. ' names no valid function')
end
local next_tick = nil
if next_text ~= '' then
  next_tick = whole(next_text)
  if not next_tick then
    return refuse('BADSCHEDULE', 'the next tick must be ms since the epoch, not ' .. next_text)
  end
end
if replace ~= '0' and replace ~= '1' then
  return refuse('BADSCHEDULE', 'ARGV[5] must be 1 (replace) or 0, not ' .. replace)
end
if replace ~= '1' and redis.call('HEXISTS', KEYS[1], name) == 1 then return { 'exists', '' } end
local now = clock_ms()
def.created_ms = now
local encoded, stored = pcall(cjson.encode, def)
if not encoded then
  return refuse('BADSCHEDULE', 'the definition of ' .. name .. ' cannot be stored: ' .. tostring(stored))
end

redis.call('HSET', KEYS[1], name, stored)
redis.call('HSET', KEYS[2], name, input)
if next_tick then
  redis.call('ZADD', KEYS[3], next_text, name)
  redis.call('ZADD', KEYS[4], now, name)
else
  redis.call('ZREM', KEYS[3], name)
  redis.call('ZREM', KEYS[4], name)
end
redis.call('HDEL', KEYS[5], name)
return { 'ok', string.format('%d', now) }

end }

redis.register_function{ function_name = 'wg2_schedule_pause', callback = function(KEYS, ARGV)
-- schedule_pause: pause a schedule (no tick fires) or resume it. Either way it starts anew:
-- an error of its last tick is dropped.
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms); none while paused
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
-- ARGV[2]  `1` to pause, `0` to resume
-- ARGV[3]  when resuming, its next tick (ms, after now on Redis' clock); else empty
--
-- Returns: 1, or 0 when there is no such schedule; or the error reply `BADSCHEDULE why`,
-- having written nothing.

if #ARGV ~= 3 then return refuse('BADSCHEDULE', 'schedule_pause takes 3 arguments') end
local name, pause, next_text = ARGV[1], ARGV[2], ARGV[3]
if pause ~= '0' and pause ~= '1' then
  return refuse('BADSCHEDULE', 'ARGV[2] must be 1 (pause) or 0 (resume), not ' .. pause)
end
if pause == '0' and not whole(next_text) then
  return refuse('BADSCHEDULE', 'the next tick must be ms since the epoch, not ' .. next_text)
end
local raw = redis.call('HGET', KEYS[1], name)
if not raw then return 0 end
local decoded, def = pcall(cjson.decode, raw)
if not decoded or type(def) ~= 'table' then
  return refuse('BADSCHEDULE', 'schedule ' .. name .. ' has an unreadable definition: replace it (schedule add --replace) or remove it')
end
def.paused = pause == '1'
local encoded, stored = pcall(cjson.encode, def)
if not encoded then
  return refuse('BADSCHEDULE', 'schedule ' .. name .. ' has a definition that cannot be stored again: ' .. tostring(stored))
end

redis.call('HSET', KEYS[1], name, stored)
if def.paused then
  redis.call('ZREM', KEYS[3], name)
  redis.call('ZREM', KEYS[4], name)
else
  redis.call('ZADD', KEYS[3], next_text, name)
  redis.call('ZADD', KEYS[4], clock_ms(), name)
end
redis.call('HDEL', KEYS[5], name)
return 1

end }

redis.register_function{ function_name = 'wg2_schedule_remove', callback = function(KEYS, ARGV)
-- schedule_remove: remove a schedule; jobs it enqueued stay.
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
--
-- Returns: the definition removed (the caller forgets the last tick its function's queue
-- keeps for it), or '' when there is no such schedule.

local name = ARGV[1]
local def = redis.call('HGET', KEYS[1], name)
if not def then return '' end
redis.call('HDEL', KEYS[1], name)
redis.call('HDEL', KEYS[2], name)
redis.call('ZREM', KEYS[3], name)
redis.call('ZREM', KEYS[4], name)
redis.call('HDEL', KEYS[5], name)
return def

end }

redis.register_function{ function_name = 'wg2_schedule_due', callback = function(KEYS, ARGV)
-- schedule_due: the schedules whose next tick has come, and those whose next tick was set
-- on a clock ahead of Redis' clock now (read only).
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the most schedules of each kind to return (1 to 10000)
--
-- Returns: {now_ms, next_ms of the earliest schedule not due ('' if none), the number D of
-- due schedules, then for each due schedule, earliest first: name, its score in `next`
-- (its due tick, or when to try again a tick that could not fire), its definition, its
-- input, its error ('' if none); then for each schedule not due whose `next` was set at a
-- time after now (Redis' clock went back since): name, its score in `next`, its
-- definition}. Or the error reply `BADSCHEDULE why`.

local most = whole(ARGV[1])
if not most or most < 1 or most > 10000 then
  return refuse('BADSCHEDULE', 'ARGV[1] must be a count of 1 to 10000')
end
local now = clock_ms()
local reply, count = { string.format('%d', now), '', '0' }, 0
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'WITHSCORES', 'LIMIT', 0, most)
for i = 1, #due, 2 do
  local def = redis.call('HGET', KEYS[1], due[i])
  if def then
    count = count + 1
    reply[#reply + 1] = due[i]
    reply[#reply + 1] = due[i + 1]
    reply[#reply + 1] = def
    reply[#reply + 1] = redis.call('HGET', KEYS[2], due[i]) or ''
    reply[#reply + 1] = redis.call('HGET', KEYS[5], due[i]) or ''
  end
end
reply[3] = string.format('%d', count)
local later = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if #later == 2 then reply[2] = later[2] end
local ahead = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. now, '+inf', 'LIMIT', 0, most)
for _, name in ipairs(ahead) do
  local score = redis.call('ZSCORE', KEYS[3], name)
  local def = redis.call('HGET', KEYS[1], name)
  if score and def and tonumber(score) > now then
    reply[#reply + 1] = name
    reply[#reply + 1] = score
    reply[#reply + 1] = def
  end
end
return reply

end, flags = { 'no-writes' } }

redis.register_function{ function_name = 'wg2_schedule_advance', callback = function(KEYS, ARGV)
-- schedule_advance: move a schedule on to its next tick once its due tick is dealt with,
-- unless another worker has already (or it was paused, resumed, replaced or removed
-- meanwhile). Its error, if its tick could not fire before, is dropped.
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
-- ARGV[2]  its score in `next` as the caller read it (ms)
-- ARGV[3]  the next tick (ms)
--
-- Returns: 2 if moved and an error dropped, 1 if moved, 0 if not; or the error reply
-- `BADSCHEDULE why`, having written nothing.

if #ARGV ~= 3 then return refuse('BADSCHEDULE', 'schedule_advance takes 3 arguments') end
local name, read, next_text = ARGV[1], whole(ARGV[2]), ARGV[3]
if not read or not whole(next_text) then
  return refuse('BADSCHEDULE', 'the score read and the next tick must be ms since the epoch')
end
local score = redis.call('ZSCORE', KEYS[3], name)
if not score or tonumber(score) ~= read then return 0 end
redis.call('ZADD', KEYS[3], next_text, name)
redis.call('ZADD', KEYS[4], clock_ms(), name)
if redis.call('HDEL', KEYS[5], name) == 1 then return 2 end
return 1

end }

redis.register_function{ function_name = 'wg2_schedule_failed', callback = function(KEYS, ARGV)
-- schedule_failed: note that a schedule's due tick could not fire (its job's enqueue was
-- refused), and when to try it again: only this schedule waits, the others go on. Unless
-- another worker has moved it already (or it was paused, resumed, replaced or removed
-- meanwhile).
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
-- ARGV[2]  its score in `next` as the caller read it (ms)
-- ARGV[3]  when to try again (ms): its new score in `next`
-- ARGV[4]  the error (JSON object: error, tick_ms, since_ms, failures, retry_ms)
--
-- Returns: 1 if noted, 0 if not; or the error reply `BADSCHEDULE why`, having written
-- nothing.

if #ARGV ~= 4 then return refuse('BADSCHEDULE', 'schedule_failed takes 4 arguments') end
local name, read, retry_text, error_text = ARGV[1], whole(ARGV[2]), ARGV[3], ARGV[4]
if not read or not whole(retry_text) then
  return refuse('BADSCHEDULE', 'the score read and the retry time must be ms since the epoch')
end
local decoded, noted = pcall(cjson.decode, error_text or '')
if not decoded or type(noted) ~= 'table' or #error_text > 4096 then
  return refuse('BADSCHEDULE', 'the error must be a JSON object of at most 4096 bytes')
end
local score = redis.call('ZSCORE', KEYS[3], name)
if not score or tonumber(score) ~= read then return 0 end
redis.call('ZADD', KEYS[3], retry_text, name)
redis.call('ZADD', KEYS[4], clock_ms(), name)
redis.call('HSET', KEYS[5], name, error_text)
return 1

end }

redis.register_function{ function_name = 'wg2_schedule_rewind', callback = function(KEYS, ARGV)
-- schedule_rewind: bring back the next tick of a schedule that was set on a clock ahead of
-- Redis' clock now (the clock went back since), so that it fires again within one tick,
-- unless another worker has already (or it was moved, paused, replaced or removed
-- meanwhile). An error of a tick it was to try again is dropped.
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
-- ARGV[2]  its score in `next` as the caller read it (ms)
-- ARGV[3]  its next tick: the first after Redis' clock now (ms), if earlier than the score
--
-- Returns: 1 if brought back, 0 if not; or the error reply `BADSCHEDULE why`, having
-- written nothing.

if #ARGV ~= 3 then return refuse('BADSCHEDULE', 'schedule_rewind takes 3 arguments') end
local name, read, next_text = ARGV[1], whole(ARGV[2]), ARGV[3]
local next_tick = whole(next_text)
if not read or not next_tick then
  return refuse('BADSCHEDULE', 'the score read and the next tick must be ms since the epoch')
end
local score = redis.call('ZSCORE', KEYS[3], name)
if not score or tonumber(score) ~= read then return 0 end
if next_tick < read then
  redis.call('ZADD', KEYS[3], next_text, name)
  redis.call('HDEL', KEYS[5], name)
end
redis.call('ZADD', KEYS[4], clock_ms(), name)
return 1

end }

redis.register_function{ function_name = 'wg2_schedule_forget', callback = function(KEYS, ARGV)
-- schedule_forget: forget the last tick of a schedule that a function's queue keeps (the
-- dedupe of `enqueue`'s `schedule`/`tick` options): when the schedule is removed, or when
-- it is added or replaced and that tick is later than Redis' clock now (it was fired on a
-- clock that was ahead), so that it fires again from its next tick.
--
-- KEYS[1]  wg:{F}:ticks  hash  schedule name -> 'TICK_MS,NUMBER'
--
-- ARGV[1]  the schedule's name
-- ARGV[2]  `1` to forget it whatever it is, `0` only if its tick is later than now
--
-- Returns: 1 if forgotten, 0 if not; or the error reply `BADSCHEDULE why`, having written
-- nothing.

if #ARGV ~= 2 or not fits_name(ARGV[1]) or (ARGV[2] ~= '0' and ARGV[2] ~= '1') then
  return refuse('BADSCHEDULE', 'schedule_forget takes a schedule name and 1 or 0')
end
local name = ARGV[1]
if ARGV[2] == '0' then
  local tick = string.match(redis.call('HGET', KEYS[1], name) or '', '^(%d+),')
  if not tick or tonumber(tick) <= clock_ms() then return 0 end
end
return redis.call('HDEL', KEYS[1], name)

end }

redis.register_function{ function_name = 'wg2_flow_create', callback = function(KEYS, ARGV)
-- flow_create: record a flow (`wasmgear flow submit`) and hand out its id. The caller has
-- checked the graph and reserved its jobs' numbers (`reserve`), and writes the jobs after
-- this call, each with the flow's id.
--
-- KEYS[1]  wg:{flows}:seq      string  the last flow id handed out
-- KEYS[2]  wg:{flows}:records  hash    id -> 'CREATED_MS|' then the flow as JSON
-- KEYS[3]  wg:{flows}:due      zset    id, scored by when to check whether its jobs are all
--                                      forgotten (then the flow is: `flows_due`)
--
-- ARGV[1]  the flow as JSON: an object with its `name` (text) and `jobs` (a list), at most
--          MAX_FLOW_RECORD_BYTES bytes
--
-- Returns: {id, created_ms}. Or the error reply `BADFLOW why`, having written nothing.

local text = ARGV[1] or ''
if #text > MAX_FLOW_RECORD_BYTES then
  return redis.error_reply('BADFLOW the flow record is larger than ' .. MAX_FLOW_RECORD_BYTES .. ' bytes')
end
local ok, flow = pcall(cjson.decode, text)
if not ok or type(flow) ~= 'table' or type(flow.name) ~= 'string' or type(flow.jobs) ~= 'table' then
  return redis.error_reply('BADFLOW the flow record must be a JSON object with a name and a list of jobs')
end
local now = clock_ms()
local id = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], id, string.format('%d', now) .. '|' .. text)
redis.call('ZADD', KEYS[3], string.format('%d', now + FLOW_CHECK_FIRST_MS), id)
return { id, now }

end }

redis.register_function{ function_name = 'wg2_flow_get', callback = function(KEYS, ARGV)
-- flow_get: a flow's record.
--
-- KEYS[1]  wg:{flows}:records  hash  id -> 'CREATED_MS|' then the flow as JSON
--
-- ARGV[1]  the flow's id
--
-- Returns: the record ('CREATED_MS|JSON'), or nil when there is no such flow (never
-- submitted, or forgotten with its jobs).

return redis.call('HGET', KEYS[1], ARGV[1] or '')

end, flags = { 'no-writes' } }

redis.register_function{ function_name = 'wg2_flows_due', callback = function(KEYS, ARGV)
-- flows_due: hand out flows due for a check of whether all their jobs are forgotten (the
-- caller reads the jobs' states and calls `flow_forget` for such a flow). Each flow handed
-- out is checked next after as long again as it has lived (at least FLOW_CHECK_FIRST_MS, at
-- most FLOW_CHECK_MAX_MS), so repeated calls move on. An entry without a record is removed.
--
-- KEYS[1]  wg:{flows}:records  hash  id -> 'CREATED_MS|' then the flow as JSON
-- KEYS[2]  wg:{flows}:due      zset  id, scored by when to check it
--
-- ARGV[1]  the most flows to hand out, 1..100
--
-- Returns: {id, record} per flow handed out.

local limit = tonumber(ARGV[1] or '')
if not limit or limit < 1 or limit > 100 or limit ~= math.floor(limit) then
  return redis.error_reply('BADARGS flows_due: the most flows must be a whole number in 1..100')
end
local now = clock_ms()
local due = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now), 'LIMIT', '0', string.format('%d', limit))) do
  local record = redis.call('HGET', KEYS[1], id)
  if not record then
    redis.call('ZREM', KEYS[2], id)
  else
    local created = tonumber(string.match(record, '^(%d+)|')) or now
    local wait = math.max(FLOW_CHECK_FIRST_MS, math.min(now - created, FLOW_CHECK_MAX_MS))
    redis.call('ZADD', KEYS[2], string.format('%d', now + wait), id)
    due[#due + 1] = { id, record }
  end
end
return due

end }

redis.register_function{ function_name = 'wg2_flow_forget', callback = function(KEYS, ARGV)
-- flow_forget: forget a flow's record, once its jobs are all forgotten.
--
-- KEYS[1]  wg:{flows}:records  hash  id -> 'CREATED_MS|' then the flow as JSON
-- KEYS[2]  wg:{flows}:due      zset  id, scored by when to check it
--
-- ARGV[1]  the flow's id
--
-- Returns: 1 when the flow was forgotten, 0 when there was none.

redis.call('ZREM', KEYS[2], ARGV[1] or '')
return redis.call('HDEL', KEYS[1], ARGV[1] or '')

end }

redis.register_function{ function_name = 'wg2_batch_open', callback = function(KEYS, ARGV)
-- batch_open: open a batch (`wasmgear batch`): jobs of any functions are added to it while it
-- is open (`batch_add`, then `enqueue` with the option `batch`), and once it is closed and
-- every job has ended, its callbacks are due: `on_success` when all succeeded, `on_complete`
-- in any case. The batch is kept at most BATCH_MAX_MS.
--
-- KEYS[1]  wg:{batch:ID}:state    hash  (see batch_settle in lib.lua)
-- KEYS[2]  wg:{batch:ID}:members  list  the jobs' ids, in the order added
-- KEYS[3]  wg:{batch:ID}:ended    hash  job id -> the state it ended in
--
-- ARGV[1]  the batch's definition: a JSON object (its name and callbacks), at most 64 KiB
--
-- Returns: the time it was opened (ms), or the error `BADBATCH` (a definition that does not
-- read, or a batch of this id already).

local def = ARGV[1] or ''
local ok, decoded = pcall(cjson.decode, def)
if #def > 65536 or not ok or type(decoded) ~= 'table' then
  return redis.error_reply('BADBATCH the batch definition must be a JSON object of at most 64 KiB')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('BADBATCH a batch of this id exists already')
end
local now = clock_ms()
redis.call('HSET', KEYS[1], 'def', def, 'open', '1', 'total', '0', 'succeeded', '0', 'failed', '0',
  'cancelled', '0', 'created_ms', string.format('%d', now), 'added_ms', string.format('%d', now))
for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, string.format('%d', BATCH_MAX_MS)) end
return now

end }

redis.register_function{ function_name = 'wg2_batch_add', callback = function(KEYS, ARGV)
-- batch_add: add jobs to an open batch, before they are written (their numbers reserved with
-- `reserve`, so that none can end before it counts): a job that is never written reads as
-- missing, and the upkeep counts it cancelled once its reservation has lapsed.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- ARGV     the jobs' ids (G:N), at least one
--
-- Returns: the batch's total afterwards. Or the error `NOBATCH` (no such batch), `CONFLICT`
-- (it is closed), or `BADBATCH` (an id that is no job id, or more than MAX_BATCH_JOBS jobs),
-- having written nothing.

if #ARGV == 0 then return redis.error_reply('BADBATCH give the ids of the jobs to add') end
for _, id in ipairs(ARGV) do
  if not split_id(id) then return redis.error_reply('BADBATCH ' .. id .. ' is not a job id (FUNCTION:NUMBER)') end
end
local open, total = unpack(redis.call('HMGET', KEYS[1], 'open', 'total'))
if not open then return redis.error_reply('NOBATCH no such batch (never opened, or forgotten)') end
if open ~= '1' then return redis.error_reply('CONFLICT the batch is closed: no job can be added to it') end
if tonumber(total) + #ARGV > MAX_BATCH_JOBS then
  return redis.error_reply('BADBATCH a batch has at most ' .. MAX_BATCH_JOBS .. ' jobs')
end
local i = 1
while i <= #ARGV do
  local last = math.min(i + 999, #ARGV)
  redis.call('RPUSH', KEYS[2], unpack(ARGV, i, last))
  i = last + 1
end
redis.call('HSET', KEYS[1], 'added_ms', string.format('%d', clock_ms()))
for _, key in ipairs(KEYS) do
  if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, string.format('%d', BATCH_MAX_MS)) end
end
return redis.call('HINCRBY', KEYS[1], 'total', #ARGV)

end }

redis.register_function{ function_name = 'wg2_batch_close', callback = function(KEYS, ARGV)
-- batch_close: close a batch: no job can be added any more, and once every job has ended,
-- its callbacks are due. Closing a closed batch changes nothing.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- Returns: the callbacks now due ('success', 'complete'; see batch_settle), or the error
-- `NOBATCH`.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('NOBATCH no such batch (never opened, or forgotten)')
end
if redis.call('HGET', KEYS[1], 'open') == '1' then
  redis.call('HSET', KEYS[1], 'open', '0', 'closed_ms', string.format('%d', clock_ms()))
end
return batch_settle(KEYS[1])

end }

redis.register_function{ function_name = 'wg2_batch_done', callback = function(KEYS, ARGV)
-- batch_done: count the end of one of a batch's jobs, once (the caller of the script that
-- ended it sends it, as it tells dependents in other functions; the upkeep sends it again
-- for a job whose news was lost). Idempotent.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- ARGV[1]  the job's id (G:N)
-- ARGV[2]  the state it ended in: succeeded, failed, cancelled or expired (counted as failed)
--
-- Returns: the callbacks now due ('success', 'complete'; see batch_settle); none for a
-- batch that is gone.

local STATES = { succeeded = 'succeeded', failed = 'failed', cancelled = 'cancelled', expired = 'failed' }
local counted = STATES[ARGV[2] or '']
if not split_id(ARGV[1] or '') or not counted then
  return redis.error_reply('BADBATCH batch_done takes a job id and succeeded, failed, cancelled or expired')
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
if redis.call('HSETNX', KEYS[3], ARGV[1], counted) == 1 then
  redis.call('HINCRBY', KEYS[1], counted, 1)
  if redis.call('PTTL', KEYS[3]) < 0 then
    redis.call('PEXPIRE', KEYS[3], redis.call('PTTL', KEYS[1]))
  end
end
return batch_settle(KEYS[1])

end }

redis.register_function{ function_name = 'wg2_batch_fired', callback = function(KEYS, ARGV)
-- batch_fired: note that a due callback of a batch has been enqueued (as job G:N, with the
-- `once` key `batch:ID:KIND`, so that enqueueing it again returns the same job). Once no
-- callback is due any more, the batch is kept BATCH_RETENTION_MS more.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- ARGV[1]  'success' or 'complete'
-- ARGV[2]  the callback job's id
--
-- Returns: 1 when it was due, else 0.

if (ARGV[1] ~= 'success' and ARGV[1] ~= 'complete') or not split_id(ARGV[2] or '') then
  return redis.error_reply("BADBATCH batch_fired takes 'success' or 'complete' and a job id")
end
if redis.call('HGET', KEYS[1], ARGV[1]) ~= 'due' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('HGET', KEYS[1], 'success') ~= 'due' and redis.call('HGET', KEYS[1], 'complete') ~= 'due' then
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, string.format('%d', BATCH_RETENTION_MS)) end
end
return 1

end }

redis.register_function{ function_name = 'wg2_batch_get', callback = function(KEYS, ARGV)
-- batch_get: how a batch stands.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- ARGV[1]  '1' to list the jobs that have not ended too (for the upkeep's re-check), else '0'
--
-- Returns: {state, unsuccessful, unended}: state, the fields of the state hash as a flat
-- list (empty: no such batch); unsuccessful, job id and state of each job that failed or
-- was cancelled (at most MAX_BATCH_JOBS); unended, the ids of the jobs not counted as ended
-- yet (with ARGV[1] '1').

local state = redis.call('HGETALL', KEYS[1])
if #state == 0 then return { {}, {}, {} } end
local ended = redis.call('HGETALL', KEYS[3])
local unsuccessful, seen = {}, {}
for i = 1, #ended, 2 do
  seen[ended[i]] = true
  if ended[i + 1] ~= 'succeeded' then
    unsuccessful[#unsuccessful + 1] = ended[i]
    unsuccessful[#unsuccessful + 1] = ended[i + 1]
  end
end
local unended = {}
if ARGV[1] == '1' then
  for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    if not seen[id] then unended[#unended + 1] = id end
  end
end
return { state, unsuccessful, unended }

end, flags = { 'no-writes' } }

redis.register_function{ function_name = 'wg2_batches_due', callback = function(KEYS, ARGV)
-- batches_due: the batches the workers' upkeep re-checks (its safety net: a job whose end
-- was not counted, a callback due but not enqueued, because a caller died between the
-- steps). Hands out up to `n` due ones, each next due BATCH_CHECK_MS later; with ARGV[1]
-- 'watch' or 'unwatch', adds or removes one.
--
-- KEYS[1]  wg:{batches}:due  zset  batch id, scored by when to re-check it (ms)
--
-- ARGV[1]  'due' and the most to hand out (1..100); or 'watch' or 'unwatch' and a batch id
--
-- Returns: the ids handed out; 1 for 'watch' and 'unwatch'.

local now = clock_ms()
if ARGV[1] == 'watch' and ARGV[2] then
  redis.call('ZADD', KEYS[1], string.format('%d', now + BATCH_CHECK_MS), ARGV[2])
  return 1
end
if ARGV[1] == 'unwatch' and ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[2])
  return 1
end
local limit = tonumber(ARGV[2] or '')
if ARGV[1] ~= 'due' or not limit or limit < 1 or limit > 100 or limit ~= math.floor(limit) then
  return redis.error_reply("BADARGS batches_due: 'due' and 1..100, or 'watch'/'unwatch' and a batch id")
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now), 'LIMIT', '0', string.format('%d', limit))
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], string.format('%d', now + BATCH_CHECK_MS), id)
end
return ids

end }

redis.register_function{ function_name = 'wg2_version', callback = function() return 'bdc4ef77a8c81381c17e9c4a4908b17643bcf0f4' end, flags = { 'no-writes' } }
