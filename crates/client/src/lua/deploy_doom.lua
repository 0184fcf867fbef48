-- deploy_doom: a collector holding a version's pin asks whether it may delete the version's
-- chunks: not while a record names the version (it is taken out of the graveyard, and the
-- lapsed deploys of it forgotten), nor while a deploy of it is under way. Otherwise every
-- lapsed deploy of it is doomed (scored 0: recording it is refused, it starts again), and
-- the collector deletes the chunks, then calls `deploy_bury`.
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
-- Returns: 'doomed' (delete its chunks), 'named' or 'busy' (leave them); or the error reply
-- `BADDEPLOY why`, having written nothing.

if #ARGV ~= 1 or not fits_version(ARGV[1]) then
  return refuse('BADDEPLOY', 'deploy_doom takes a version (hex digits)')
end
local version = ARGV[1]
local suffix = ' ' .. version
local named = false
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(field, -#suffix) == suffix then named = true end
end
local current = redis.call('HVALS', KEYS[2])
for _, v in ipairs(current) do
  if v == version then named = true end
end
local now = clock_ms()
local pending = deploy_pending_of(KEYS[5], version)
if named then
  redis.call('ZREM', KEYS[6], version)
  for _, entry in ipairs(pending) do
    if entry[2] < now then redis.call('ZREM', KEYS[5], entry[1]) end
  end
  return 'named'
end
for _, entry in ipairs(pending) do
  if entry[2] >= now then return 'busy' end
end
for _, entry in ipairs(pending) do redis.call('ZADD', KEYS[5], 0, entry[1]) end
return 'doomed'
