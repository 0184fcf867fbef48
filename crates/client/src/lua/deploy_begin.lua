-- deploy_begin: note a deploy of a version as under way, before it pins the version and
-- writes its chunks (or, renewing, that it still is). A collector deletes no chunks of a
-- version with a deploy under way; a deploy not renewed in the time it said is taken for an
-- interrupted one, and its chunks may be collected: then it is doomed, and renewing it
-- fails (it starts again with a fresh token, and writes every chunk anew).
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
-- ARGV[1]  the version (hex digits)
-- ARGV[2]  the deploy's token (letters and digits, fresh for each try)
-- ARGV[3]  how long it may stay under way (ms, 1 to 86400000)
-- ARGV[4]  `0` to begin (a fresh token), `1` to renew
--
-- Returns: 1, or 0 when the deploy cannot go on: renewing one that a collector doomed or
-- forgot, or beginning with a token in use; or the error reply `BADDEPLOY why`, having
-- written nothing.

if #ARGV ~= 4 then return refuse('BADDEPLOY', 'deploy_begin takes 4 arguments') end
local version, token, ms, renew = ARGV[1], ARGV[2], whole(ARGV[3]), ARGV[4]
if not fits_version(version) then return refuse('BADDEPLOY', 'the version must be hex digits') end
if not fits_token(token) then return refuse('BADDEPLOY', 'the token must be 1 to 64 letters or digits') end
if not ms or ms < 1 or ms > 86400000 then
  return refuse('BADDEPLOY', 'the time under way must be 1 to 86400000 ms')
end
if renew ~= '0' and renew ~= '1' then
  return refuse('BADDEPLOY', 'ARGV[4] must be 0 (begin) or 1 (renew)')
end
local member = version .. ' ' .. token
local score = redis.call('ZSCORE', KEYS[5], member)
if (renew == '1') ~= (score ~= false) or score == '0' then return 0 end
redis.call('ZADD', KEYS[5], string.format('%d', clock_ms() + ms), member)
return 1
