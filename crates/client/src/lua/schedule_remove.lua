-- schedule_remove: remove a schedule; jobs it enqueued stay.
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
--
-- Returns: the definition removed (the caller forgets the last tick its function's queue
-- keeps for it), or '' when there is no such schedule.

local name = ARGV[1]
local def = redis.call('HGET', KEYS[1], name)
if not def then return '' end
redis.call('HDEL', KEYS[1], name)
redis.call('HDEL', KEYS[2], name)
redis.call('ZREM', KEYS[3], name)
redis.call('ZREM', KEYS[4], name)
redis.call('HDEL', KEYS[5], name)
return def
