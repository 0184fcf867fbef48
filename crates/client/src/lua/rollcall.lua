-- rollcall: the live workers serving one function (GearMonkey's roll call). A worker joins
-- (or renews), leaves, or a client only counts.
--
-- KEYS[1]  wg:{F}:workers  zset  worker id scored by when its membership expires (ms)
-- KEYS[2], KEYS[3]  optional: wg:{F}:idle and wg:{F}:idle-args (lib.lua, "Idle workers
--          handed jobs directly"): a worker that leaves is no longer handed jobs either
--
-- ARGV[1]  worker id; '' to only count
-- ARGV[2]  how long the membership lives without a renewal, ms; 0 leaves
--
-- Returns: how many live workers serve the function after the change.

local workers_key = KEYS[1]
local id, ttl_ms = ARGV[1], tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', workers_key, '-inf', now)
if id ~= '' then
  if ttl_ms > 0 then
    redis.call('ZADD', workers_key, now + ttl_ms, id)
  else
    redis.call('ZREM', workers_key, id)
    if #KEYS == 3 then
      redis.call('ZREM', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
    end
  end
end
return redis.call('ZCARD', workers_key)
