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
