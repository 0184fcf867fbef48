-- beat: worqr's keepWorkerAlive, run every second. The liveness key is renewed only if it
-- is still there (SET ... XX), as worqr does. When it is gone, a peer's cleanupWorkers has
-- failed this worker (its tasks went back to their queues) or it never started: it is
-- registered afresh, as worqr's startWorker does, and marked as a wasmgear worker (whose
-- processes are named in P:wasmgear:owners). The queue is added to its working queues, as
-- worqr's startWork does.
--
-- KEYS[1]  P:workers               set     every worker
-- KEYS[2]  P:expiringWorkers       set     workers with a liveness key
-- KEYS[3]  P:workerTimers:W        string  'RUN', expiring: the worker is alive
-- KEYS[4]  P:workingQueues:W       set     the queues W works on
-- KEYS[5]  P:wasmgear:workers      set     the workers that are wasmgear's
-- ARGV[1]  worker id W
-- ARGV[2]  liveness, seconds
-- ARGV[3]  queue
-- Returns  1 renewed | 0 registered (afresh, or on this queue)

local renewed = redis.call('SET', KEYS[3], 'RUN', 'EX', ARGV[2], 'XX')
if not renewed then
  redis.call('SADD', KEYS[1], ARGV[1])
  redis.call('SADD', KEYS[2], ARGV[1])
  redis.call('SET', KEYS[3], 'RUN', 'EX', ARGV[2])
  redis.call('SADD', KEYS[5], ARGV[1])
end
-- One worker serving several queues of a prefix registers once per queue.
local added = redis.call('SADD', KEYS[4], ARGV[3])
if renewed and added == 0 then return 1 end
return 0
