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
