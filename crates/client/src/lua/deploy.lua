-- deploy: record a version of a plugin whose chunks are stored, for each function it
-- serves, and make it their current version (unless told not to). Only for a deploy still
-- under way (`deploy_begin`) that no collector has doomed: then no chunk of the version was
-- deleted since the deploy pinned it and wrote them.
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
-- ARGV[1]  the version (hex digits: the first 16 of the component's SHA-256)
-- ARGV[2]  its record (JSON object: sha256, size, chunks, name, functions, manifest); the
--          function and the time of the deploy (Redis' clock) are set here
-- ARGV[3]  `1` to make it current, `0` to store it only
-- ARGV[4]  how many versions of each function to keep (1 to 100000)
-- ARGV[5]  the deploy's token, as given to `deploy_begin`
--
-- Returns: {'ok', then the `FUNCTION VERSION`s no longer kept} (the caller checks that no
-- kept job names them, then calls `deploy_forget`), or {'lapsed'} when the deploy is not
-- under way any more (a collector doomed it, or forgot it: it starts again, pins and writes
-- the chunks anew); or the error reply `BADDEPLOY why`, having written nothing.

if #ARGV ~= 5 then return refuse('BADDEPLOY', 'deploy takes 5 arguments') end
local version, text, activate, keep, token = ARGV[1], ARGV[2], ARGV[3], whole(ARGV[4]), ARGV[5]
if not fits_version(version) then return refuse('BADDEPLOY', 'the version must be hex digits') end
local decoded, record = pcall(cjson.decode, text)
if not decoded or type(record) ~= 'table' or type(record.functions) ~= 'table'
  or #record.functions == 0 then
  return refuse('BADDEPLOY', 'the record must be a JSON object with a list of functions')
end
for _, fn in ipairs(record.functions) do
  if not fits_name(fn) then
    return refuse('BADDEPLOY', 'the record lists a function that is not a function name: ' .. tostring(fn))
  end
end
if activate ~= '0' and activate ~= '1' then
  return refuse('BADDEPLOY', 'ARGV[3] must be 1 (make it current) or 0')
end
if not keep or keep < 1 or keep > 100000 then
  return refuse('BADDEPLOY', 'the versions kept must be 1 to 100000')
end
if not fits_token(token) then return refuse('BADDEPLOY', 'the token must be 1 to 64 letters or digits') end
local member = version .. ' ' .. token
local under_way = redis.call('ZSCORE', KEYS[5], member)
if not under_way or under_way == '0' then return { 'lapsed' } end
record.deployed_ms = clock_ms()
record.version = version
-- Every record's text before the first write (an encoding that fails writes nothing).
local texts = {}
for i, fn in ipairs(record.functions) do
  record['function'] = fn
  local encoded, stored = pcall(cjson.encode, record)
  if not encoded then
    return refuse('BADDEPLOY', 'the record cannot be stored: ' .. tostring(stored))
  end
  texts[i] = stored
end

for i, fn in ipairs(record.functions) do
  redis.call('HSET', KEYS[1], fn .. ' ' .. version, texts[i])
  if activate == '1' then deploy_make_current(KEYS, fn, version) end
end
redis.call('ZREM', KEYS[5], member)
redis.call('ZREM', KEYS[6], version)
local kept, fields = deploy_kept(KEYS, keep)
local reply = { 'ok' }
local gone = {}
for _, field in ipairs(fields) do
  if not kept[field] then gone[#gone + 1] = field end
end
table.sort(gone)
for _, field in ipairs(gone) do reply[#reply + 1] = field end
return reply
