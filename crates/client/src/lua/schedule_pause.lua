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
