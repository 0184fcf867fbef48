-- cancel: stop a job. A queued or scheduled job is cancelled at once; a running job is
-- flagged and its worker told (the `cancel` event; the heartbeat reply repeats it), and the
-- job ends `cancelled` when the worker reports it stopped.
--
-- KEYS[1]  wg:{F}:jobs       hash    number -> job record (JSON)
-- KEYS[2]  wg:{F}:ready      zset    number scored by priority, then number
-- KEYS[3]  wg:{F}:scheduled  zset    number scored by ready time (ms)
-- KEYS[4]  wg:{F}:expires    zset    number scored by deletion time (ms)
-- KEYS[5]  wg:{F}:events     channel
--
-- ARGV[1]  function name
-- ARGV[2]  job number
--
-- Returns: {1, 'cancelled'} when the job was waiting and is now cancelled;
--          {1, 'cancelling'} when it is running and its worker has been asked to stop;
--          {0, STATE} when it had already ended in STATE; {0, 'missing'} when there is no such job.
-- Publishes: `finish` (state `cancelled`) for a waiting job; `cancel` for a running one.

local jobs_key, ready_key, scheduled_key, expires_key, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local fn, number = ARGV[1], ARGV[2]
local id = fn .. ':' .. number

local raw = redis.call('HGET', jobs_key, number)
if not raw then return { 0, 'missing' } end
local record = cjson.decode(raw)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if record.state == 'queued' or record.state == 'scheduled' then
  redis.call('ZREM', ready_key, number)
  redis.call('ZREM', scheduled_key, number)
  record.state = 'cancelled'
  record.run_at_ms = nil
  record.finished_ms = now
  record.error = { class = 'cancelled', message = 'cancelled before it ran' }
  redis.call('HSET', jobs_key, number, cjson.encode(record))
  redis.call('ZADD', expires_key, now + record.retention_ms, number)
  redis.call('PUBLISH', channel, cjson.encode({ event = 'finish', id = id, state = 'cancelled' }))
  return { 1, 'cancelled' }
end

if record.state == 'running' then
  if not record.cancel_requested_ms then
    record.cancel_requested_ms = now
    redis.call('HSET', jobs_key, number, cjson.encode(record))
  end
  redis.call('PUBLISH', channel, cjson.encode({ event = 'cancel', id = id }))
  return { 1, 'cancelling' }
end

return { 0, record.state }
