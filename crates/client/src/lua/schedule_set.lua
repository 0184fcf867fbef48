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
