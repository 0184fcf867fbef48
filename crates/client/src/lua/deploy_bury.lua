-- deploy_bury: once a collector has deleted a version's chunks, forget that they were to be
-- collected: the version leaves the graveyard, its doomed deploys leave :pending (a deploy
-- of it begun since stays, and writes the chunks again).
--
-- KEYS[1]  wg:{deploy}:versions   hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current    hash     function -> current version
-- KEYS[3]  wg:{deploy}:history    hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events     channel  `FUNCTION VERSION` after each change
-- KEYS[5]  wg:{deploy}:pending    zset     `VERSION TOKEN` of each deploy under way, scored by
--                                          when it lapses (ms; 0: doomed by a collector)
-- KEYS[6]  wg:{deploy}:graveyard  zset     versions no record names any more, to collect,
--                                          scored by when their last record went (ms)
--
-- ARGV[1]  the version
--
-- Returns: 1; or the error reply `BADDEPLOY why`, having written nothing.

if #ARGV ~= 1 or not fits_version(ARGV[1]) then
  return refuse('BADDEPLOY', 'deploy_bury takes a version (hex digits)')
end
local version = ARGV[1]
redis.call('ZREM', KEYS[6], version)
for _, entry in ipairs(deploy_pending_of(KEYS[5], version)) do
  if entry[2] == 0 then redis.call('ZREM', KEYS[5], entry[1]) end
end
return 1
