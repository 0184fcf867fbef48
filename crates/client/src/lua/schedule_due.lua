-- schedule_due: the schedules whose next tick has come, on Redis' clock (read only).
--
-- KEYS[1]  wg:{schedules}:defs    hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs  hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next    zset  name scored by its next tick (ms)
--
-- ARGV[1]  the most schedules to return
--
-- Returns: {now_ms, next_ms of the earliest schedule not due ('' if none), then for each due
-- schedule, earliest first: name, its due tick, its definition, its input}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reply = { string.format('%d', now), '' }
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
for i = 1, #due, 2 do
  local def = redis.call('HGET', KEYS[1], due[i])
  if def then
    reply[#reply + 1] = due[i]
    reply[#reply + 1] = due[i + 1]
    reply[#reply + 1] = def
    reply[#reply + 1] = redis.call('HGET', KEYS[2], due[i]) or ''
  end
end
local later = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if #later == 2 then reply[2] = later[2] end
return reply
