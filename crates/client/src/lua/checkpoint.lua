-- checkpoint: keep a running job's checkpoint, the bytes its guest saved to resume from
-- (replacing the one before). The attempts that follow read it with `checkpoint_get`: a
-- retry, a reclaim after the worker died or lost the lease, a `retry` of the failed job.
--
-- KEYS: jobs checkpoints stats config events work
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  the checkpoint's bytes (at most MAX_CHECKPOINT_BYTES; the plugin's manifest
--          may allow less, which the worker checks)
--
-- Returns: 1 when kept; 0 when the token does not hold the job's lease (nothing changes).
-- Publishes: {"event":"checkpoint","id":"F:N","bytes":B}

local number, token, data = ARGV[2], ARGV[3], ARGV[4]
if type(data) ~= 'string' or #data > MAX_CHECKPOINT_BYTES then
  return redis.error_reply('BADARGS checkpoint: a checkpoint of at most ' .. MAX_CHECKPOINT_BYTES .. ' bytes')
end

local record = load(number)
if not record then return 0 end
if record.state ~= 'running' or record.token ~= token then return 0 end

redis.call('HSET', K.checkpoints, number, data)
record.checkpoint = { bytes = #data, ms = NOW }
record.unconfirmed = nil -- the worker has the job: the attempt counts (see `lease`)
save(number, record)
publish({ event = 'checkpoint', id = id_of(number), bytes = #data })
return 1
