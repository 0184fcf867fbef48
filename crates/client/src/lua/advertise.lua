-- advertise: put a worker in the worker list (or take it out), and forget dead workers.
--
-- KEYS[1]  wg:{workers}:expiry  zset  worker id scored by when its entry expires (ms)
-- KEYS[2]  wg:{workers}:info    hash  worker id -> what it advertises (JSON)
--
-- ARGV[1]  worker id
-- ARGV[2]  the worker's advertisement (JSON: host, pid, version, functions, running, ...)
-- ARGV[3]  how long the entry lives without a renewal, ms; 0 takes the worker out
--
-- Returns: how many workers are live after the change.

local expiry_key, info_key = KEYS[1], KEYS[2]
local id, ad, ttl_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

for _, dead in ipairs(redis.call('ZRANGEBYSCORE', expiry_key, '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('ZREM', expiry_key, dead)
  redis.call('HDEL', info_key, dead)
end
if ttl_ms > 0 then
  redis.call('ZADD', expiry_key, now + ttl_ms, id)
  redis.call('HSET', info_key, id, ad)
else
  redis.call('ZREM', expiry_key, id)
  redis.call('HDEL', info_key, id)
end
return redis.call('ZCARD', expiry_key)
