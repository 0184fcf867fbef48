-- schedule_failed: note that a schedule's due tick could not fire (its job's enqueue was
-- refused), and when to try it again: only this schedule waits, the others go on. Unless
-- another worker has moved it already (or it was paused, resumed, replaced or removed
-- meanwhile).
--
-- KEYS[1]  wg:{schedules}:defs      hash  name -> definition (JSON)
-- KEYS[2]  wg:{schedules}:inputs    hash  name -> the input of its jobs
-- KEYS[3]  wg:{schedules}:next      zset  name scored by its next tick (ms)
-- KEYS[4]  wg:{schedules}:advanced  zset  name scored by when `next` was set (ms, Redis' clock)
-- KEYS[5]  wg:{schedules}:errors    hash  name -> why its due tick could not fire (JSON)
--
-- ARGV[1]  the name
-- ARGV[2]  its score in `next` as the caller read it (ms)
-- ARGV[3]  when to try again (ms): its new score in `next`
-- ARGV[4]  the error (JSON object: error, tick_ms, since_ms, failures, retry_ms)
--
-- Returns: 1 if noted, 0 if not; or the error reply `BADSCHEDULE why`, having written
-- nothing.

if #ARGV ~= 4 then return refuse('BADSCHEDULE', 'schedule_failed takes 4 arguments') end
local name, read, retry_text, error_text = ARGV[1], whole(ARGV[2]), ARGV[3], ARGV[4]
if not read or not whole(retry_text) then
  return refuse('BADSCHEDULE', 'the score read and the retry time must be ms since the epoch')
end
local decoded, noted = pcall(cjson.decode, error_text or '')
if not decoded or type(noted) ~= 'table' or #error_text > 4096 then
  return refuse('BADSCHEDULE', 'the error must be a JSON object of at most 4096 bytes')
end
local score = redis.call('ZSCORE', KEYS[3], name)
if not score or tonumber(score) ~= read then return 0 end
redis.call('ZADD', KEYS[3], retry_text, name)
redis.call('ZADD', KEYS[4], clock_ms(), name)
redis.call('HSET', KEYS[5], name, error_text)
return 1
