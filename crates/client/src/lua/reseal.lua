-- reseal: writes values of one hash sealed again with the newest key (`wasmgear keys
-- rotate`), each only if it is still the value that was read: one changed since (a job that
-- ran on, was retried or forgotten) is left as it is, for the next run.
--
-- KEYS[1]  the hash: a function's jobs, input, output, logs or checkpoints, or the
--          schedules' inputs
--
-- ARGV     field old new [field old new ...]: each field's value as read, and as sealed again
--
-- Returns: how many fields were written.

if #ARGV == 0 or #ARGV % 3 ~= 0 then
  return redis.error_reply('BADARGS reseal: give FIELD OLD NEW triples')
end
local written = 0
for i = 1, #ARGV, 3 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    written = written + 1
  end
end
return written
