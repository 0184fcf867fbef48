-- release: hand a leased job back unrun (the worker is shutting down), without counting
-- the attempt. The job goes back to the ready set at its old place.
--
-- KEYS[1]  wg:{F}:jobs    hash  number -> job record (JSON)
-- KEYS[2]  wg:{F}:leased  zset  number scored by lease expiry (ms)
-- KEYS[3]  wg:{F}:ready   zset  number scored by priority, then number
--
-- ARGV[1]  job number
-- ARGV[2]  lease token
--
-- Returns: 1 when handed back; 0 when the token does not hold the job's lease.

local jobs_key, leased_key, ready_key = KEYS[1], KEYS[2], KEYS[3]
local number, token = ARGV[1], ARGV[2]

local PRIORITY_BASE = 1000
local NUMBER_SPAN = 1099511627776 -- 2^40

local raw = redis.call('HGET', jobs_key, number)
if not raw then return 0 end
local record = cjson.decode(raw)
if record.state ~= 'running' or record.token ~= token then return 0 end

record.state = 'queued'
record.attempt = record.attempt - 1
record.worker, record.token, record.lease_until_ms, record.started_ms = nil, nil, nil, nil
record.progress = nil
redis.call('HSET', jobs_key, number, cjson.encode(record))
redis.call('ZREM', leased_key, number)
redis.call('ZADD', ready_key, (PRIORITY_BASE - record.priority) * NUMBER_SPAN + tonumber(number), number)
return 1
