-- lapse: a held item goes back to be worked on again, the protocol's only way: its lease
-- lapses. For a retry (ARGV[3] 'retry') the lease key is left to run out after the backoff,
-- and a cleaner (any library's light_clean, or wasmgear's own `reclaim`) then puts the item
-- back in the queue. At shutdown (ARGV[3] 'release') it goes back at once, to the end the
-- next lease takes from, the attempt not counted.
--
-- KEYS[1]  P:leased_by_session:ID
-- KEYS[2]  P:processing
-- KEYS[3]  P:queue
-- KEYS[4]  P:wasmgear:attempts
-- ARGV[1]  id
-- ARGV[2]  session
-- ARGV[3]  retry | release
-- ARGV[4]  backoff, ms (retry)
-- Returns  1 | 0 lost

if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
if ARGV[3] == 'retry' then
  -- A key's expiry must be positive: at least 1 ms.
  redis.call('SET', KEYS[1], 'wasmgear:retry', 'PX', math.max(1, tonumber(ARGV[4])))
  return 1
end
redis.call('DEL', KEYS[1])
if redis.call('LREM', KEYS[2], 0, ARGV[1]) > 0 then
  redis.call('RPUSH', KEYS[3], ARGV[1])
end
redis.call('HINCRBY', KEYS[4], ARGV[1], -1)
return 1
