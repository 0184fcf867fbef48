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
