-- lease: takes up to ARGV[1] jobs of one GearMonkey function for a wasmgear worker: first
-- a due scheduled job (as the spec's script does), then high, normal and low in that order.
-- Unlike a GearMonkey worker's BRPOP, each id is moved into the leases (not lost if the
-- worker dies: `requeue` gives it back when the lease runs out).
--
-- KEYS[1]  queue:FN:scheduled  zset  id -> due time (Unix seconds)
-- KEYS[2]  queue:FN:high       list  ids (LPUSH by clients, taken from the right)
-- KEYS[3]  queue:FN:normal     list
-- KEYS[4]  queue:FN:low        list
-- KEYS[5]  wasmgear:gearmonkey:FN:leases    zset  id -> lease end (ms, Redis clock)
-- KEYS[6]  wasmgear:gearmonkey:FN:tokens    hash  id -> fencing token of the holder
-- KEYS[7]  wasmgear:gearmonkey:FN:prios     hash  id -> the queue it came from
-- KEYS[8]  wasmgear:gearmonkey:FN:attempts  hash  id -> attempts started
-- KEYS[9]  wasmgear:gearmonkey:FN:rejected  list  ids that are no job number (set aside)
-- ARGV[1]  the most jobs to take
-- ARGV[2]  lease time, ms
-- ARGV[3]  token prefix (unique per call; the id is appended)
-- Returns  { {id, token, attempt}..., {rejected ids...} }

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local leased, rejected = {}, {}

local function take(id, prio)
  -- A job number, as `INCR uid:FN` hands out: anything else is set aside.
  if not string.match(id, '^[1-9][0-9]*$') or #id > 15 then
    redis.call('LPUSH', KEYS[9], id)
    rejected[#rejected + 1] = id
    return
  end
  local token = ARGV[3] .. id
  redis.call('ZADD', KEYS[5], now_ms + ttl, id)
  redis.call('HSET', KEYS[6], id, token)
  redis.call('HSET', KEYS[7], id, prio)
  local attempt = redis.call('HINCRBY', KEYS[8], id, 1)
  leased[#leased + 1] = { id, token, attempt }
end

-- Guarded: a malformed queue can only make us take fewer jobs, never loop.
local guard = 0
while #leased < max and guard < max + 100 do
  guard = guard + 1
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], 0, math.floor(now_ms / 1000), 'LIMIT', 0, 1)
  local id, prio = nil, nil
  if #due > 0 then
    redis.call('ZREM', KEYS[1], due[1])
    id, prio = due[1], 'normal'
  else
    for i, name in ipairs({ 'high', 'normal', 'low' }) do
      id = redis.call('RPOP', KEYS[1 + i])
      if id then
        prio = name
        break
      end
    end
  end
  if not id then break end
  take(id, prio)
end
return { leased, rejected }
