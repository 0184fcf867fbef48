-- bury: worqr's failWorker for a dead worker D (its liveness key ran out), for the one
-- queue Q this source serves. worqr's own failWorker puts back every process of D's queues,
-- a live peer's too, because P:workingProcesses:Q is one set per queue, not per worker.
-- Here only D's processes go back: those wasmgear records as D's, or, when D is no wasmgear
-- worker, those no wasmgear worker holds (worqr itself cannot tell them apart). Q leaves D's
-- working queues; a D with none left is taken off the worker lists.
--
-- KEYS[1]  P:workers               set
-- KEYS[2]  P:expiringWorkers       set
-- KEYS[3]  P:permanentWorkers      set
-- KEYS[4]  P:workerTimers:D        string  (gone: D is dead)
-- KEYS[5]  P:workingQueues:D       set
-- KEYS[6]  P:workingProcesses:Q    set
-- KEYS[7]  P:queues:Q              list
-- KEYS[8]  P:wasmgear:owners       hash    process id -> wasmgear worker
-- KEYS[9]  P:wasmgear:workers      set
-- KEYS[10] P:wasmgear:retries:Q    zset
-- KEYS[11..] P:processes:PID       list    one per candidate process, as ARGV[4..]
-- ARGV[1]  worker id D
-- ARGV[2]  queue Q
-- ARGV[3]  channel P_Q_work
-- ARGV[4..] candidate process ids (members of P:workingProcesses:Q when read)
-- Returns  how many tasks went back | -1 (D is alive again: nothing done)

if redis.call('EXISTS', KEYS[4]) == 1 then return -1 end
local ours = redis.call('SISMEMBER', KEYS[9], ARGV[1]) == 1
local moved = 0
for i = 4, #ARGV do
  local pid = ARGV[i]
  local process = KEYS[i + 7]
  if redis.call('SISMEMBER', KEYS[6], pid) == 1 then
    local owner = redis.call('HGET', KEYS[8], pid)
    if owner == ARGV[1] or (not owner and not ours) then
      if redis.call('RPOPLPUSH', process, KEYS[7]) then moved = moved + 1 end
      redis.call('DEL', process)
      redis.call('SREM', KEYS[6], pid)
      redis.call('HDEL', KEYS[8], pid)
      redis.call('ZREM', KEYS[10], pid)
    end
  end
end
redis.call('SREM', KEYS[5], ARGV[2])
if redis.call('SCARD', KEYS[5]) == 0 then
  redis.call('SREM', KEYS[1], ARGV[1])
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('SREM', KEYS[3], ARGV[1])
  redis.call('SREM', KEYS[9], ARGV[1])
end
if moved > 0 then redis.call('PUBLISH', ARGV[3], tostring(moved)) end
return moved
