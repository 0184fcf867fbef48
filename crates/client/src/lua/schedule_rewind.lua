-- schedule_rewind: bring back the next tick of a schedule that was set on a clock ahead of
-- Redis' clock now (the clock went back since), so that it fires again within one tick,
-- unless another worker has already (or it was moved, paused, replaced or removed
-- meanwhile). An error of a tick it was to try again is dropped.
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
-- ARGV[2]  its score in `next` as the caller read it (ms)
-- ARGV[3]  its next tick: the first after Redis' clock now (ms), if earlier than the score
--
-- Returns: 1 if brought back, 0 if not; or the error reply `BADSCHEDULE why`, having
-- written nothing.

if #ARGV ~= 3 then return refuse('BADSCHEDULE', 'schedule_rewind takes 3 arguments') end
local name, read, next_text = ARGV[1], whole(ARGV[2]), ARGV[3]
local next_tick = whole(next_text)
if not read or not next_tick then
  return refuse('BADSCHEDULE', 'the score read and the next tick must be ms since the epoch')
end
local score = redis.call('ZSCORE', KEYS[3], name)
if not score or tonumber(score) ~= read then return 0 end
if next_tick < read then
  redis.call('ZADD', KEYS[3], next_text, name)
  redis.call('HDEL', KEYS[5], name)
end
redis.call('ZADD', KEYS[4], clock_ms(), name)
return 1
