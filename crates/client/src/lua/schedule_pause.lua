-- schedule_pause: pause a schedule (no tick fires) or resume it.
--
-- KEYS[1]  wg:{schedules}:defs    hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:next    zset  name scored by its next tick (ms); none while paused
--
-- ARGV[1]  the name
-- ARGV[2]  `1` to pause, `0` to resume
-- ARGV[3]  when resuming, its next tick (ms, after now on Redis' clock)
--
-- Returns: 1, or 0 when there is no such schedule.

local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local def = cjson.decode(raw)
def.paused = ARGV[2] == '1'
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(def))
if def.paused then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return 1
