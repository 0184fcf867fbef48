-- complete: an item ends for good, as the libraries complete it (out of the processing
-- list, data and lease deleted), with its outcome kept where producers can read it (the
-- protocol keeps none: wasmgear's addition).
--
-- KEYS[1]  P:item:ID
-- KEYS[2]  P:leased_by_session:ID
-- KEYS[3]  P:processing
-- KEYS[4]  P:wasmgear:attempts
-- KEYS[5]  P:result:ID               hash  status (success | failed), output or error
-- ARGV[1]  id
-- ARGV[2]  session
-- ARGV[3]  status: success | failed
-- ARGV[4]  output (success) or error message (failed)
-- ARGV[5]  how long the result is kept, seconds
-- Returns  1 completed | 0 lost (another session holds it, or it ran out) | -1 already complete

if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('LREM', KEYS[3], 0, ARGV[1])
if redis.call('DEL', KEYS[1]) == 0 then return -1 end
local field = 'output'
if ARGV[3] ~= 'success' then field = 'error' end
redis.call('DEL', KEYS[5])
redis.call('HSET', KEYS[5], 'status', ARGV[3], field, ARGV[4])
redis.call('EXPIRE', KEYS[5], ARGV[5])
return 1
