-- schedule_set: add a recurring schedule (or replace one of the same name).
--
-- KEYS[1]  wg:{schedules}:defs    hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs  hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next    zset  name scored by its next tick (ms); none while paused
--
-- ARGV[1]  the name
-- ARGV[2]  the definition (JSON); `created_ms` is set here (Redis' clock)
-- ARGV[3]  the input
-- ARGV[4]  its next tick (ms): the first after Redis' `TIME`, computed by the caller;
--          empty when it is paused
-- ARGV[5]  `1` to replace a schedule of that name, `0` to refuse
--
-- Returns: {'ok', created_ms} or {'exists', ''}.

local name = ARGV[1]
if ARGV[5] ~= '1' and redis.call('HEXISTS', KEYS[1], name) == 1 then
  return { 'exists', '' }
end
local def = cjson.decode(ARGV[2])
local t = redis.call('TIME')
def.created_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], name, cjson.encode(def))
redis.call('HSET', KEYS[2], name, ARGV[3])
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[4], name)
else
  redis.call('ZREM', KEYS[3], name)
end
return { 'ok', string.format('%d', def.created_ms) }
