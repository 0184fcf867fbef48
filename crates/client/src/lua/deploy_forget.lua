-- deploy_forget: forget stored versions that are no longer kept.
--
-- KEYS[1]  wg:{deploy}:versions  hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current   hash     function -> current version
-- KEYS[3]  wg:{deploy}:history   hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events    channel  `FUNCTION VERSION` after each change
--
-- ARGV[1]  how many versions of each function to keep
-- ARGV[2..]  the `FUNCTION VERSION`s to forget: those `deploy` returned that no kept job
--            names (one kept again since, by a deploy or an activation, is not forgotten)
--
-- Returns: the `FUNCTION VERSION`s forgotten, then `-`, then the versions no function has
-- any more (the caller deletes their chunks).

local kept, fields = deploy_kept(KEYS, tonumber(ARGV[1]))
local known = {}
for _, field in ipairs(fields) do known[field] = true end
local forgotten = {}
for i = 2, #ARGV do
  local field = ARGV[i]
  if known[field] and not kept[field] then
    redis.call('HDEL', KEYS[1], field)
    known[field] = nil
    local fn, version = string.match(field, '^(%S+) (%S+)$')
    local stack = {}
    for _, v in ipairs(deploy_stack(KEYS[3], fn)) do
      if v ~= version then stack[#stack + 1] = v end
    end
    redis.call('HSET', KEYS[3], fn, cjson.encode(stack))
    forgotten[#forgotten + 1] = field
  end
end
local reply = {}
local unused = {}
for _, field in ipairs(forgotten) do
  reply[#reply + 1] = field
  unused[string.match(field, ' (%S+)$')] = true
end
for field in pairs(known) do unused[string.match(field, ' (%S+)$')] = nil end
reply[#reply + 1] = '-'
for version in pairs(unused) do reply[#reply + 1] = version end
return reply
