-- deploy_collectable: the versions whose chunks may be collected (read only): those in the
-- graveyard, and those of deploys whose time under way is over (interrupted, or doomed).
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
-- ARGV[1]  the most versions to return (1 to 10000)
--
-- Returns: the versions, each once; or the error reply `BADDEPLOY why`.

local most = whole(ARGV[1])
if #ARGV ~= 1 or not most or most < 1 or most > 10000 then
  return refuse('BADDEPLOY', 'ARGV[1] must be a count of 1 to 10000')
end
local seen, reply = {}, {}
local function add(version)
  if version and not seen[version] and #reply < most then
    seen[version] = true
    reply[#reply + 1] = version
  end
end
for _, version in ipairs(redis.call('ZRANGE', KEYS[6], 0, most - 1)) do add(version) end
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. string.format('%d', clock_ms()), 'LIMIT', 0, most)
for _, member in ipairs(lapsed) do add(string.match(member, '^(%S+) ')) end
return reply
