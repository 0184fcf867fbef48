-- deploy_forget: forget stored versions that are no longer kept. A version no record names
-- any more goes to the graveyard: a collector deletes its chunks (`deploy_doom`).
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
-- ARGV[1]  how many versions of each function to keep (1 to 100000)
-- ARGV[2..]  the `FUNCTION VERSION`s to forget: those `deploy` returned that no kept job
--            names (one kept again since, by a deploy or an activation, is not forgotten)
--
-- Returns: the `FUNCTION VERSION`s forgotten; or the error reply `BADDEPLOY why`, having
-- written nothing.

local keep = whole(ARGV[1])
if not keep or keep < 1 or keep > 100000 then
  return refuse('BADDEPLOY', 'the versions kept must be 1 to 100000')
end
local kept, fields = deploy_kept(KEYS, keep)
local known = {}
for _, field in ipairs(fields) do known[field] = true end
-- What to forget, and each function's history without it, before the first write.
local forgotten, stacks = {}, {}
for i = 2, #ARGV do
  local field = ARGV[i]
  local fn, version = string.match(field, '^(%S+) (%S+)$')
  if fn and known[field] and not kept[field] then
    known[field] = nil
    forgotten[#forgotten + 1] = field
    local stack = {}
    for _, v in ipairs(stacks[fn] or deploy_stack(KEYS[3], fn)) do
      if v ~= version then stack[#stack + 1] = v end
    end
    stacks[fn] = stack
  end
end
local texts = {}
for fn, stack in pairs(stacks) do
  -- An empty Lua table would be encoded as an object.
  texts[fn] = #stack == 0 and '[]' or cjson.encode(stack)
end

local now = clock_ms()
for _, field in ipairs(forgotten) do redis.call('HDEL', KEYS[1], field) end
for fn, text in pairs(texts) do redis.call('HSET', KEYS[3], fn, text) end
-- Versions no record names any more.
local named = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local version = string.match(field, ' (%S+)$')
  if version then named[version] = true end
end
for _, field in ipairs(forgotten) do
  local version = string.match(field, ' (%S+)$')
  if not named[version] then redis.call('ZADD', KEYS[6], 'NX', now, version) end
end
return forgotten
