-- renew: whether W still holds process PID (a peer's failWorker or stopWork may have put
-- its task back and deleted it). A held process is put back in the queue's working
-- processes if a peer's non-atomic clean-up dropped it from there, so that a later
-- clean-up still finds it.
--
-- KEYS[1]  P:processes:PID         list
-- KEYS[2]  P:workingProcesses:Q    set
-- KEYS[3]  P:wasmgear:owners       hash    process id -> wasmgear worker
-- ARGV[1]  process id
-- ARGV[2]  worker id
-- Returns  1 held | 0 lost

if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[2] then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[1])
return 1
