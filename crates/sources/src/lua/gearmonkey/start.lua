-- start: a leased job begins: its status becomes busy and `start:ID` is published, as the
-- spec says a worker does; its input is returned.
--
-- KEYS[1]  job:FN:ID          hash  status, input, output, status:dividend, status:divisor
-- KEYS[2]  lock:FN:ID         list  pushed when the job finishes (blocking clients wait on it)
-- KEYS[3]  wasmgear:gearmonkey:FN:leases
-- KEYS[4]  wasmgear:gearmonkey:FN:tokens
-- KEYS[5]  wasmgear:gearmonkey:FN:prios
-- KEYS[6]  wasmgear:gearmonkey:FN:attempts
-- ARGV[1]  id
-- ARGV[2]  token
-- ARGV[3]  channel:FN
-- ARGV[4]  what to record as the output of a job that has no input
-- Returns  {'ok', input} | {'lost'} | {'missing'} (no job hash: dropped) |
--          {'no-input'} (finished as an error)

local id = ARGV[1]
local function drop()
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
end
if redis.call('HGET', KEYS[4], id) ~= ARGV[2] then return { 'lost' } end
if redis.call('EXISTS', KEYS[1]) == 0 then
  drop()
  return { 'missing' }
end
local input = redis.call('HGET', KEYS[1], 'input')
if not input then
  redis.call('HSET', KEYS[1], 'status', 'error', 'output', ARGV[4])
  redis.call('EXPIRE', KEYS[1], 90000)
  redis.call('PUBLISH', ARGV[3], 'finish:' .. id)
  redis.call('LPUSH', KEYS[2], 'OK')
  redis.call('EXPIRE', KEYS[2], 10)
  drop()
  return { 'no-input' }
end
redis.call('HSET', KEYS[1], 'status', 'busy')
redis.call('PUBLISH', ARGV[3], 'start:' .. id)
return { 'ok', input }
