-- progress: records a held job's progress as the spec's dividend and divisor.
--
-- KEYS[1]  job:FN:ID
-- KEYS[2]  wasmgear:gearmonkey:FN:tokens
-- ARGV[1]  id
-- ARGV[2]  token
-- ARGV[3]  dividend
-- ARGV[4]  divisor
-- Returns  1 recorded | 0 lost

if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'status:dividend', ARGV[3], 'status:divisor', ARGV[4])
return 1
