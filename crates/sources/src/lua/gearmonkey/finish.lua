-- finish: a held job ends for good, as the spec says a worker ends one: status success or
-- error with its output, the hash kept 25 hours, `finish:ID` published, the lock list
-- pushed for blocking clients (kept 10 s).
--
-- KEYS[1]  job:FN:ID
-- KEYS[2]  lock:FN:ID
-- KEYS[3]  wasmgear:gearmonkey:FN:leases
-- KEYS[4]  wasmgear:gearmonkey:FN:tokens
-- KEYS[5]  wasmgear:gearmonkey:FN:prios
-- KEYS[6]  wasmgear:gearmonkey:FN:attempts
-- ARGV[1]  id
-- ARGV[2]  token
-- ARGV[3]  status: success | error
-- ARGV[4]  output (the error message for error)
-- ARGV[5]  channel:FN
-- Returns  1 finished | 0 lost | -1 the job hash is gone

local id = ARGV[1]
if redis.call('HGET', KEYS[4], id) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HDEL', KEYS[5], id)
redis.call('HDEL', KEYS[6], id)
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'status', ARGV[3], 'output', ARGV[4])
redis.call('EXPIRE', KEYS[1], 90000)
redis.call('PUBLISH', ARGV[5], 'finish:' .. id)
redis.call('LPUSH', KEYS[2], 'OK')
redis.call('EXPIRE', KEYS[2], 10)
return 1
