-- renew: extends a held lease.
--
-- KEYS[1]  wasmgear:gearmonkey:FN:leases
-- KEYS[2]  wasmgear:gearmonkey:FN:tokens
-- ARGV[1]  id
-- ARGV[2]  token
-- ARGV[3]  lease time, ms
-- Returns  1 held and renewed | 0 lost

if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[3]), ARGV[1])
return 1
