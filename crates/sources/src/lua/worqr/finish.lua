-- finish: worqr's finishProcess, in one step: the task's unique marker and the process go,
-- the process leaves the queue's working processes, and the outcome is published on the
-- queue's `_done` channel (worqr's {workerId, task}, with wasmgear's status and output or
-- error added). wasmgear's owner entry, attempt count and pending retry go too.
--
-- KEYS[1]  P:processes:PID         list
-- KEYS[2]  P:workingProcesses:Q    set
-- KEYS[3]  P:wasmgear:owners       hash    process id -> wasmgear worker
-- KEYS[4]  P:wasmgear:attempts     hash    SHA-1 of a task -> attempts started
-- KEYS[5]  P:uniqueTasks:MD5       string  the marker of a unique task (MD5 of its text)
-- KEYS[6]  P:wasmgear:retries:Q    zset    process id -> when its retry is due (ms)
-- ARGV[1]  process id
-- ARGV[2]  worker id
-- ARGV[3]  channel P_Q_done
-- ARGV[4]  the message (JSON)
-- Returns  1 | 0 (W no longer holds the process: nothing is changed but its owner entry)

local task = redis.call('LINDEX', KEYS[1], 0)
if not task or redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then
  if redis.call('HGET', KEYS[3], ARGV[1]) == ARGV[2] then
    redis.call('HDEL', KEYS[3], ARGV[1])
  end
  return 0
end
redis.call('DEL', KEYS[5])
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], redis.sha1hex(task))
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
