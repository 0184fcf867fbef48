-- start: a leased redis-work-queue item begins. Its id was moved from P:queue to
-- P:processing (RPOPLPUSH, as the libraries lease); here, as they do, the lease key gets
-- this worker's session with an expiry, and the item's data is read. An id without data is
-- no item: it is taken out of the processing list and skipped.
--
-- KEYS[1]  P:item:ID                 string  the item's data (exists while incomplete)
-- KEYS[2]  P:leased_by_session:ID    string  the holder's session, with the lease's expiry
-- KEYS[3]  P:processing              list    ids being worked on
-- KEYS[4]  P:wasmgear:attempts       hash    id -> attempts started (wasmgear's)
-- ARGV[1]  id
-- ARGV[2]  session (this lease's token)
-- ARGV[3]  lease time, ms
-- Returns  {data, attempt} | false (no such item: skipped)

local data = redis.call('GET', KEYS[1])
if not data then
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return false
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
local attempt = redis.call('HINCRBY', KEYS[4], ARGV[1], 1)
return { data, attempt }
