-- schedule_advance: move a schedule on to its next tick once its due tick is dealt with,
-- unless another worker has already (or it was paused, resumed or removed meanwhile).
--
-- KEYS[1]  wg:{schedules}:next    zset  name scored by its next tick (ms)
--
-- ARGV[1]  the name
-- ARGV[2]  the due tick the caller read (ms)
-- ARGV[3]  the next tick (ms)
--
-- Returns: 1 if moved, 0 if not.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
