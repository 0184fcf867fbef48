-- schedule_remove: remove a schedule; jobs it enqueued stay.
--
-- KEYS[1]  wg:{schedules}:defs    hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs  hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next    zset  name scored by its next tick (ms)
--
-- ARGV[1]  the name
--
-- Returns: 1, or 0 when there is no such schedule.

local removed = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return removed
