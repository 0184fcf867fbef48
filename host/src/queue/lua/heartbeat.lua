-- heartbeat: extend the lease of a running job.
--
-- KEYS[1]  wg:{F}:jobs    hash  number -> job record (JSON)
-- KEYS[2]  wg:{F}:leased  zset  number scored by lease expiry (ms)
--
-- ARGV[1]  job number
-- ARGV[2]  lease token
-- ARGV[3]  new lease duration from now, ms
--
-- Returns: the new expiry (ms since the epoch, queue clock) when the token still holds the
--          lease; 0 when it does not (the caller must stop the job: it belongs to no one
--          or to someone else now).

local jobs_key, leased_key = KEYS[1], KEYS[2]
local number, token, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])

local raw = redis.call('HGET', jobs_key, number)
if not raw then return 0 end
local record = cjson.decode(raw)
if record.state ~= 'running' or record.token ~= token then return 0 end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
record.lease_until_ms = now + lease_ms
redis.call('HSET', jobs_key, number, cjson.encode(record))
redis.call('ZADD', leased_key, now + lease_ms, number)
return now + lease_ms
