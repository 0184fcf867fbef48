-- retry: a failed attempt is tried again after a backoff. worqr has no schedule, so the
-- process stays W's (its task in the process list: a dead W's clean-up still recovers it)
-- and is due in P:wasmgear:retries:Q, from where W's housekeeping requeues it.
--
-- KEYS[1]  P:processes:PID         list
-- KEYS[2]  P:wasmgear:owners       hash
-- KEYS[3]  P:wasmgear:retries:Q    zset    process id -> due, ms (Redis clock)
-- ARGV[1]  process id
-- ARGV[2]  worker id
-- ARGV[3]  backoff, ms
-- Returns  1 | 0 (W no longer holds the process)

if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  return 0
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[3], ms + tonumber(ARGV[3]), ARGV[1])
return 1
