-- dequeue: worqr's dequeue, in one step. The task at the tail of the queue moves to a
-- fresh process list (RPOPLPUSH) and the process joins the queue's working processes;
-- wasmgear also records which worker holds it and counts the attempts of the task (by the
-- SHA-1 of its text: worqr tasks carry no id).
--
-- KEYS[1]  P:queues:Q              list    tasks (pushed left, taken from the right)
-- KEYS[2]  P:processes:PID         list    the process's task
-- KEYS[3]  P:workingProcesses:Q    set     the queue's processes
-- KEYS[4]  P:workingQueues:W       set     the queues W works on
-- KEYS[5]  P:wasmgear:owners       hash    process id -> the wasmgear worker holding it
-- KEYS[6]  P:wasmgear:attempts     hash    SHA-1 of a task -> attempts started
-- ARGV[1]  process id PID (Q_...)
-- ARGV[2]  worker id W
-- ARGV[3]  queue Q
-- Returns  {task, attempt} | false (the queue is empty) | -1 (W does not work on Q now)

if redis.call('SISMEMBER', KEYS[4], ARGV[3]) == 0 then return -1 end
local task = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
if not task then return false end
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[2])
local attempt = redis.call('HINCRBY', KEYS[6], redis.sha1hex(task), 1)
return { task, attempt }
