-- leave: worqr's stopWork for W on queue Q at a clean exit, without its hazard: W's own
-- processes were handed back one by one before this, so the queue's shared
-- P:workingProcesses:Q (other workers' processes are in it too) is left alone. A W that
-- works on no queue any more is taken off the worker lists and its liveness key deleted.
--
-- KEYS[1]  P:workers               set
-- KEYS[2]  P:expiringWorkers       set
-- KEYS[3]  P:workerTimers:W        string
-- KEYS[4]  P:workingQueues:W       set
-- KEYS[5]  P:wasmgear:workers      set
-- ARGV[1]  worker id W
-- ARGV[2]  queue Q
-- Returns  1 W is gone | 0 W still works on other queues

redis.call('SREM', KEYS[4], ARGV[2])
if redis.call('SCARD', KEYS[4]) > 0 then return 0 end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
redis.call('SREM', KEYS[5], ARGV[1])
return 1
