-- retry: run failed (or cancelled) jobs again, with as many attempts as they first had
-- (qless' retry of a failure group). Jobs that were cancelled because this one failed stay
-- cancelled.
--
-- KEYS: the function's keys (lib.lua). ARGV[1]: the function name.
-- ARGV[2]  'job': ARGV[3] is a job number, which must be failed or cancelled;
--          'group': ARGV[3] is a failure group and ARGV[4] the most jobs to move (oldest first)
--
-- Returns: the numbers of the jobs queued again (for 'job', an empty list when the job had
--          not ended failed or cancelled); or the error reply `NOJOB` when there is no such job.
-- Publishes: `retry` for each job.

local function requeue(number, record)
  unfinish(number, record)
  record.first_attempts = record.first_attempts or record.max_attempts
  record.max_attempts = record.attempt + math.max(record.first_attempts, 1)
  if record.uniq and not redis.call('HGET', K.uniq, record.uniq) then
    redis.call('HSET', K.uniq, record.uniq, number)
  end
  make_ready(number, record)
  save(number, record)
  publish({ event = 'retry', id = id_of(number), attempt = record.attempt, at_ms = NOW })
end

local moved = {}
if ARGV[2] == 'job' then
  local number = ARGV[3]
  local record = load(number)
  if not record then return redis.error_reply('NOJOB no such job ' .. id_of(number)) end
  if record.state == 'failed' or record.state == 'cancelled' then
    requeue(number, record)
    moved[1] = tonumber(number)
  end
else
  local group, limit = ARGV[3], tonumber(ARGV[4])
  local members = redis.call('ZRANGEBYLEX', K.failed, '[' .. group .. '\0', '(' .. group .. '\1', 'LIMIT', 0, limit)
  for _, member in ipairs(members) do
    local number = tostring(tonumber(string.sub(member, #group + 2)))
    local record = load(number)
    if record and record.state == 'failed' then
      requeue(number, record)
      moved[#moved + 1] = tonumber(number)
    else
      redis.call('ZREM', K.failed, member)
    end
  end
end
return moved
