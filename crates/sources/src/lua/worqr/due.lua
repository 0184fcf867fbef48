-- due: the processes whose retry is due now (Redis clock), at most ARGV[1]; read only.
--
-- KEYS[1]  P:wasmgear:retries:Q    zset    process id -> due, ms
-- ARGV[1]  how many at most
-- Returns  process ids

local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms, 'LIMIT', 0, tonumber(ARGV[1]))
