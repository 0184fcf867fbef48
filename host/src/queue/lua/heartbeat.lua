-- heartbeat: extend the lease of a running job.
--
-- KEYS[1]  wg:{F}:jobs    hash  number -> job record (JSON)
-- KEYS[2]  wg:{F}:leased  zset  number scored by lease expiry (ms)
--
-- ARGV[1]  job number
-- ARGV[2]  lease token
-- ARGV[3]  new lease duration from now, ms
--
-- Returns: {expiry, cancel}: expiry is the new lease expiry (ms since the epoch, queue
--          clock), or 0 when the token no longer holds the lease (the caller must stop the
--          job: it belongs to no one or to someone else now); cancel is 1 when a client
--          asked for the job to be cancelled (the caller should stop it), else 0.

local jobs_key, leased_key = KEYS[1], KEYS[2]
local number, token, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])

local raw = redis.call('HGET', jobs_key, number)
if not raw then return { 0, 0 } end
local record = cjson.decode(raw)
if record.state ~= 'running' or record.token ~= token then return { 0, 0 } end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
record.lease_until_ms = now + lease_ms
redis.call('HSET', jobs_key, number, cjson.encode(record))
redis.call('ZADD', leased_key, now + lease_ms, number)
local cancel = 0
if record.cancel_requested_ms then cancel = 1 end
return { now + lease_ms, cancel }
