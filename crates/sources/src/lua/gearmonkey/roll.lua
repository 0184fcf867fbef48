-- roll: keeps `count:FN` (the spec's roll call) equal to what the spec's workers added plus
-- the live wasmgear workers: a wasmgear worker counts itself once (INCR) while its entry
-- lives and uncounts itself (DECR) when it leaves; the entry of a worker that died without
-- leaving runs out, and whoever calls this next takes its count back.
--
-- KEYS[1]  count:FN
-- KEYS[2]  wasmgear:gearmonkey:FN:workers  zset  worker id -> entry end (ms, Redis clock)
-- ARGV[1]  worker id
-- ARGV[2]  entry time, ms (0: the worker leaves)
-- Returns  the count

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], 0, now_ms, 'LIMIT', 0, 100)
for _, worker in ipairs(dead) do
  if worker ~= ARGV[1] then
    redis.call('ZREM', KEYS[2], worker)
    redis.call('DECR', KEYS[1])
  end
end
if ttl > 0 then
  if redis.call('ZADD', KEYS[2], now_ms + ttl, ARGV[1]) == 1 then redis.call('INCR', KEYS[1]) end
elseif redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('DECR', KEYS[1])
end
return tonumber(redis.call('GET', KEYS[1]) or '0')
