-- cancel: stop a job. A queued, scheduled or waiting job is cancelled at once; a running
-- job is flagged and its worker told (the `cancel` event; the heartbeat reply repeats it),
-- it gives up its uniq key, and it ends `cancelled` however its worker reports it ended
-- (output, failure or hand-back): once asked, a cancel always wins. Jobs waiting on a
-- cancelled job are cancelled too.
--
-- KEYS: jobs input output logs ready scheduled leased waiting expires uniq tagged failed counts stats config events work ticks groups group_ready group_running group_config dedup dedup_exp expiring checkpoints
-- ARGV[1]  the function name
-- ARGV[2]  job number
--
-- Returns: {1, 'cancelled', notify} when the job was waiting and is now cancelled (notify:
--          see lib.lua); {1, 'cancelling', {}} when it is running and its worker has been
--          asked to stop; {0, STATE, {}} when it had already ended in STATE; {0, 'missing', {}}
--          when there is no such job.
-- Publishes: `finish` (state `cancelled`) for a waiting job; `cancel` for a running one.

local number = ARGV[2]

local record = load(number)
if not record then return { 0, 'missing', {} } end
forget_expired({ [number] = true })

if record.state == 'queued' or record.state == 'scheduled' or record.state == 'waiting' then
  finish(number, record, 'cancelled', { class = 'cancelled', message = 'cancelled before it ran' })
  settle()
  return { 1, 'cancelled', NOTIFY }
end

if record.state == 'running' then
  if not record.cancel_requested_ms then
    record.cancel_requested_ms = NOW
    -- A job being cancelled no longer holds its uniq key: an enqueue with the key from now
    -- on makes a new job instead of joining one that will end cancelled.
    if record.uniq and redis.call('HGET', K.uniq, record.uniq) == tostring(number) then
      redis.call('HDEL', K.uniq, record.uniq)
    end
    save(number, record)
  end
  publish({ event = 'cancel', id = id_of(number) })
  return { 1, 'cancelling', {} }
end

return { 0, record.state, {} }
