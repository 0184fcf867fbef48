-- enqueue: add one or more jobs for one function, atomically: all of them or, when one is
-- refused, none (every check is made before the first write).
--
-- KEYS: the function's keys (lib.lua). ARGV[1]: the function name.
-- ARGV[2]  call id: unique per call ('' for none); the same call sent again within 10
--          minutes (its reply was lost) gets the first reply and adds nothing
-- ARGV[3]  n, how many jobs follow; then for each job i (0-based), at 4 + 11*i:
--   +0  priority          integer -1000..1000, higher runs first
--   +1  max attempts      integer >= 1; 0: the serving plugin's default, fixed at the first lease
--   +2  timeout           ms the job may run; 0: the serving plugin's default
--   +3  retention         ms a finished job's record is kept
--   +4  failed retention  ms a failed job's record is kept (the longer of the two applies)
--   +5  delay             ms before the job may run (0: ready now)
--   +6  at                ms since the epoch (Redis clock) before which the job may not run;
--                         0: none. Must not be in the past.
--   +7  uniq              '' or a key: while an unfinished job of this function holds the
--                         key, enqueueing another with it returns that job instead
--   +8  tags              '' or a JSON array of strings
--   +9  after             '' or a JSON array of job ids ('G:N') that must succeed first
--   +10 input             bytes
-- Then, optionally, k and k ids of earlier calls on this function whose replies the caller
-- has: what was kept to answer them again is forgotten now (as for `complete`).
--
-- A job with dependencies waits (state `waiting`) until all of them have succeeded.
-- Dependencies in this function are linked here; those in other functions are returned for
-- the caller to link (`link` on their function, then `resolve` here when one has already
-- ended): a script touches one function only, so that it runs on Redis Cluster.
--
-- Returns: one {number, created, links} per job, in the order given: created is 1 for a new
--          job, 0 when the uniq key returned an unfinished job; links lists the dependencies
--          in other functions the caller must link. Or the error reply `BADJOB job I: ...`,
--          having written nothing.
-- Publishes: `create` for each new job.

local call_id = ARGV[2]
local n = tonumber(ARGV[3])
local FIELDS = 11
local FIRST = 4

local function final(state) return state == 'succeeded' or state == 'failed' or state == 'cancelled' end

local function bad(i, text)
  return redis.error_reply(string.format('BADJOB job %d: %s', i + 1, text))
end

local replay = remembered(call_id)
if replay then return cjson.decode(replay) end

-- A JSON array of strings, or nil and why not.
local function strings(text)
  local ok, list = pcall(cjson.decode, text)
  if not ok or type(list) ~= 'table' then return nil, 'is not a JSON array' end
  for _, item in ipairs(list) do
    if type(item) ~= 'string' then return nil, 'holds something other than strings' end
  end
  return list
end

-- Check every job before writing anything, so a batch is all or nothing. The dependencies
-- in this function are kept (not forgotten by the housekeeping below) while this call runs.
local TAGS, AFTER, depended = {}, {}, {}
local ACKED = FIRST + FIELDS * (n or 0)
local acked = tonumber(ARGV[ACKED] or '0')
if not n or n < 0 or not acked or acked < 0
  or (#ARGV ~= ACKED - 1 and #ARGV ~= ACKED + acked) then
  return redis.error_reply('BADJOB job 1: the call does not carry ' .. tostring(n) .. ' jobs of ' .. FIELDS .. ' fields')
end
for i = 0, n - 1 do
  local a = FIRST + FIELDS * i
  for f = 0, 6 do
    if not tonumber(ARGV[a + f]) then return bad(i, 'field ' .. f .. ' is not a number: ' .. ARGV[a + f]) end
  end
  local at = tonumber(ARGV[a + 6])
  if at > 0 and at < NOW then
    return bad(i, string.format('scheduled time %d is in the past (the queue clock says %d)', at, NOW))
  end
  if ARGV[a + 8] ~= '' then
    local tags, why = strings(ARGV[a + 8])
    if not tags then return bad(i, 'the tags ' .. why) end
    TAGS[i] = tags
  end
  if ARGV[a + 9] ~= '' then
    local after, why = strings(ARGV[a + 9])
    if not after then return bad(i, 'the dependencies ' .. why) end
    AFTER[i] = after
    for _, dep in ipairs(after) do
      local fn, number = split_id(dep)
      if not fn then return bad(i, 'dependency ' .. dep .. ' is not a job id (FUNCTION:NUMBER)') end
      if fn == FN then
        local record = load(number)
        if not record then
          return bad(i, 'dependency ' .. dep .. ' does not exist (never enqueued, or its retention is over)')
        end
        if record.state == 'failed' or record.state == 'cancelled' then
          return bad(i, 'dependency ' .. dep .. ' has already ' .. record.state .. ', so the job could never run')
        end
        depended[number] = true
      end
    end
  end
end

forget_expired(depended)

-- Records and inputs are written together at the end (flush), one call per key.
begin_batch()
local inputs, ready, records = {}, {}, {}
local results = {}

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
-- The rest of a new record: the end of ready_ms, run_at_ms to version empty, no other fields.
local QUEUED_TAIL = string.rep('|', #RECORD_FIELDS - R_READY + 1)

for i = 0, n - 1 do
  local a = FIRST + FIELDS * i
  local uniq = ARGV[a + 7]
  local existing = nil
  if uniq == '' and ARGV[a + 8] == '' and ARGV[a + 9] == '' and ARGV[a + 5] == '0' and ARGV[a + 6] == '0' then
    -- The common job (ready now; no uniq key, tags or dependencies): its record is
    -- written out directly, the same fields the general path below gives it.
    local number = int(redis.call('INCR', K.seq))
    records[#records + 1] = number
    -- (lib.lua, job records: queued, attempt 0, created and ready now, no other field.)
    records[#records + 1] = 'queued|' .. canonical(ARGV[a]) .. '|0|' .. canonical(ARGV[a + 1]) .. '|'
      .. canonical(ARGV[a + 2]) .. '|' .. canonical(ARGV[a + 3]) .. '|' .. canonical(ARGV[a + 4]) .. '|'
      .. now .. '|' .. now .. QUEUED_TAIL
    ready[#ready + 1] = int((PRIORITY_BASE - number_of(ARGV[a])) * NUMBER_SPAN + tonumber(number))
    ready[#ready + 1] = number
    inputs[#inputs + 1] = number
    inputs[#inputs + 1] = ARGV[a + 10]
    EVENTS[#EVENTS + 1] = '{"event":"create","id":"' .. FN .. ':' .. number .. '"}'
    wake_workers()
    results[#results + 1] = { tonumber(number), 1, {} }
  else
    if uniq ~= '' then
      local holder = redis.call('HGET', K.uniq, uniq)
      if holder then
        local held = load(holder)
        if held and not final(held.state) then existing = tonumber(holder) end
      end
    end
    if existing then
      results[#results + 1] = { existing, 0, {} }
    else
      local number = int(redis.call('INCR', K.seq))
      local record = {
        priority = tonumber(ARGV[a]),
        attempt = 0,
        max_attempts = tonumber(ARGV[a + 1]),
        timeout_ms = tonumber(ARGV[a + 2]),
        retention_ms = tonumber(ARGV[a + 3]),
        failed_retention_ms = tonumber(ARGV[a + 4]),
        created_ms = NOW,
      }
      local run_at = NOW + tonumber(ARGV[a + 5])
      local at = tonumber(ARGV[a + 6])
      if at > run_at then run_at = at end
      -- Kept for good (a retry runs the job no earlier either).
      if run_at > NOW then record.not_before_ms = run_at end
      if uniq ~= '' then
        record.uniq = uniq
        redis.call('HSET', K.uniq, uniq, number)
      end
      if ARGV[a + 8] ~= '' then
        local tags = {}
        for _, tag in ipairs(TAGS[i]) do
          if not contains(tags, tag) then
            tags[#tags + 1] = tag
            redis.call('ZADD', K.tagged, 0, tag .. '\0' .. pad(number))
          end
        end
        record.tags = list_or_nil(tags)
      end
      local after, waiting_on, links = {}, {}, {}
      if ARGV[a + 9] ~= '' then
        for _, dep in ipairs(AFTER[i]) do
          if not contains(after, dep) then
            after[#after + 1] = dep
            local fn, dep_number = split_id(dep)
            if fn == FN then
              local dep_record = load(dep_number)
              if dep_record.state ~= 'succeeded' then
                local dependents = dep_record.dependents or {}
                dependents[#dependents + 1] = id_of(number)
                dep_record.dependents = dependents
                save(dep_number, dep_record)
                waiting_on[#waiting_on + 1] = dep
              end
            else
              waiting_on[#waiting_on + 1] = dep
              links[#links + 1] = dep
            end
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
      end
      save(number, record)
      inputs[#inputs + 1] = number
      inputs[#inputs + 1] = ARGV[a + 10]
      -- Built without cjson: sent for every job.
      EVENTS[#EVENTS + 1] = '{"event":"create","id":"' .. FN .. ':' .. number .. '"}'
      wake_workers()
      results[#results + 1] = { tonumber(number), 1, links }
    end
  end
end
call_chunked('HSET', K.jobs, records)
call_chunked('ZADD', K.ready, ready)
call_chunked('HSET', K.input, inputs)
flush()
forget_replies(ARGV, ACKED)
remember(call_id, cjson.encode(results))
return results
