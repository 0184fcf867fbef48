-- schedule_advance: move a schedule on to its next tick once its due tick is dealt with,
-- unless another worker has already (or it was paused, resumed, replaced or removed
-- meanwhile). Its error, if its tick could not fire before, is dropped.
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
-- ARGV[2]  its score in `next` as the caller read it (ms)
-- ARGV[3]  the next tick (ms)
--
-- Returns: 2 if moved and an error dropped, 1 if moved, 0 if not; or the error reply
-- `BADSCHEDULE why`, having written nothing.

if #ARGV ~= 3 then return refuse('BADSCHEDULE', 'schedule_advance takes 3 arguments') end
local name, read, next_text = ARGV[1], whole(ARGV[2]), ARGV[3]
if not read or not whole(next_text) then
  return refuse('BADSCHEDULE', 'the score read and the next tick must be ms since the epoch')
end
local score = redis.call('ZSCORE', KEYS[3], name)
if not score or tonumber(score) ~= read then return 0 end
redis.call('ZADD', KEYS[3], next_text, name)
redis.call('ZADD', KEYS[4], clock_ms(), name)
if redis.call('HDEL', KEYS[5], name) == 1 then return 2 end
return 1
