-- checkpoint_get: the checkpoint job `number` keeps (see `checkpoint`), for its attempt to
-- resume from.
--
-- KEYS: jobs checkpoints stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
--
-- Returns: the checkpoint's bytes, or false when the job keeps none (never saved, dropped
--          by `retry` with `fresh`, or the job is gone).

return redis.call('HGET', K.checkpoints, ARGV[2])
