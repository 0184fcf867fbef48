-- deploy: record a version of a plugin whose chunks are stored, for each function it
-- serves, and make it their current version (unless told not to).
--
-- KEYS[1]  wg:{deploy}:versions  hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current   hash     function -> current version
-- KEYS[3]  wg:{deploy}:history   hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events    channel  `FUNCTION VERSION` after each change
--
-- ARGV[1]  the version (16 hex digits of the component's SHA-256)
-- ARGV[2]  its record (JSON: sha256, size, chunks, name, functions, manifest); the function
--          and the time of the deploy (Redis' clock) are set here
-- ARGV[3]  `1` to make it current, `0` to store it only
-- ARGV[4]  how many versions of each function to keep
--
-- Returns: the `FUNCTION VERSION`s no longer kept (the caller checks that no kept job
-- names them, then calls `deploy_forget`).

local version, keep = ARGV[1], tonumber(ARGV[4])
local record = cjson.decode(ARGV[2])
local t = redis.call('TIME')
record.deployed_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
record.version = version
for _, fn in ipairs(record.functions) do
  record['function'] = fn
  redis.call('HSET', KEYS[1], fn .. ' ' .. version, cjson.encode(record))
  if ARGV[3] == '1' then deploy_make_current(KEYS, fn, version) end
end
local kept, fields = deploy_kept(KEYS, keep)
local gone = {}
for _, field in ipairs(fields) do
  if not kept[field] then gone[#gone + 1] = field end
end
table.sort(gone)
return gone
