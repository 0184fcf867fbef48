-- reclaim: the libraries' cleaning step for one id of P:processing: an item that exists
-- and has no lease (its worker died, or a retry's backoff ran out) goes back to the queue.
--
-- KEYS[1]  P:item:ID
-- KEYS[2]  P:leased_by_session:ID
-- KEYS[3]  P:processing
-- KEYS[4]  P:queue
-- ARGV[1]  id
-- Returns  1 put back | 0 left alone

if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('LREM', KEYS[3], 0, ARGV[1]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('LPUSH', KEYS[4], ARGV[1]) end
return 1
