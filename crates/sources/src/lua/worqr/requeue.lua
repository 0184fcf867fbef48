-- requeue: worqr's stopProcess: the process's task goes back to its queue and the process
-- ends. 'back' (a retry whose backoff ran out) pushes it where new tasks go, as
-- stopProcess's RPOPLPUSH does; 'front' (handed back at shutdown) puts it where the next
-- dequeue takes from, and that attempt is not counted. Workers are told on `_work`.
--
-- KEYS[1]  P:processes:PID         list
-- KEYS[2]  P:workingProcesses:Q    set
-- KEYS[3]  P:wasmgear:owners       hash    process id -> wasmgear worker
-- KEYS[4]  P:queues:Q              list
-- KEYS[5]  P:wasmgear:retries:Q    zset
-- KEYS[6]  P:wasmgear:attempts     hash
-- ARGV[1]  process id
-- ARGV[2]  worker id
-- ARGV[3]  back | front
-- ARGV[4]  channel P_Q_work
-- Returns  1 | 0 (W no longer holds the process)

if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
local task = redis.call('RPOP', KEYS[1])
redis.call('DEL', KEYS[1])
if not task then return 0 end
if ARGV[3] == 'front' then
  redis.call('RPUSH', KEYS[4], task)
  redis.call('HINCRBY', KEYS[6], redis.sha1hex(task), -1)
else
  redis.call('LPUSH', KEYS[4], task)
end
redis.call('PUBLISH', ARGV[4], '1')
return 1
