-- renew: extends a lease this session still holds.
--
-- KEYS[1]  P:leased_by_session:ID
-- ARGV[1]  session
-- ARGV[2]  lease time, ms
-- Returns  1 held and renewed | 0 lost

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
