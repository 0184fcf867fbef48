-- requeue: a leased job goes back to wait, status idle again: a retry after a failure
-- (ARGV[3] 'retry': into the scheduled queue at its due time), a job handed back unrun at
-- shutdown (ARGV[3] 'release': to the front of its queue, the attempt not counted), or the
-- job of a lease that ran out, its worker gone (ARGV[3] 'expired': to the front of its
-- queue; only if the lease has really run out).
--
-- KEYS[1]  job:FN:ID
-- KEYS[2]  wasmgear:gearmonkey:FN:leases
-- KEYS[3]  wasmgear:gearmonkey:FN:tokens
-- KEYS[4]  wasmgear:gearmonkey:FN:prios
-- KEYS[5]  wasmgear:gearmonkey:FN:attempts
-- KEYS[6]  queue:FN:scheduled
-- KEYS[7]  queue:FN:high
-- KEYS[8]  queue:FN:normal
-- KEYS[9]  queue:FN:low
-- ARGV[1]  id
-- ARGV[2]  token ('retry', 'release')
-- ARGV[3]  retry | release | expired
-- ARGV[4]  delay before the retry, ms
-- Returns  1 requeued | 0 lost (or, for 'expired', not expired)

local id, mode = ARGV[1], ARGV[3]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if mode == 'expired' then
  local ends = redis.call('ZSCORE', KEYS[2], id)
  if not ends or tonumber(ends) > now_ms then return 0 end
elseif redis.call('HGET', KEYS[3], id) ~= ARGV[2] then
  return 0
end
local prio = redis.call('HGET', KEYS[4], id) or 'normal'
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
if mode == 'release' then redis.call('HINCRBY', KEYS[5], id, -1) end
if mode == 'retry' then
  local due = math.floor((now_ms + tonumber(ARGV[4]) + 999) / 1000)
  redis.call('ZADD', KEYS[6], due, id)
else
  local queue = ({ high = KEYS[7], normal = KEYS[8], low = KEYS[9] })[prio] or KEYS[8]
  redis.call('RPUSH', queue, id)
end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'status', 'idle') end
return 1
