-- tag: add tags to a job or remove them (qless' tag add/remove).
--
-- KEYS: jobs tagged stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  'add' or 'remove'
-- ARGV[4..] the tags
--
-- Returns: the job's tags afterwards, or the error reply `NOJOB` when there is no such job.

local number, how = ARGV[2], ARGV[3]
if how ~= 'add' and how ~= 'remove' then return redis.error_reply("BADARGS tag: 'add' or 'remove'") end
for i = 4, #ARGV do
  if ARGV[i] == '' or not short(ARGV[i], MAX_KEY_BYTES) then
    return redis.error_reply('BADARGS tag: a tag must be 1 to ' .. MAX_KEY_BYTES .. ' bytes')
  end
end

local record = load(number)
if not record then return redis.error_reply('NOJOB no such job ' .. id_of(number)) end
local tags = record.tags or {}
if how == 'add' then
  local after = #tags
  local seen = {}
  for _, tag in ipairs(tags) do seen[tag] = true end
  for i = 4, #ARGV do
    if not seen[ARGV[i]] then
      seen[ARGV[i]] = true
      after = after + 1
    end
  end
  if after > MAX_TAGS then
    return redis.error_reply('BADARGS tag: a job has at most ' .. MAX_TAGS .. ' tags (it would have ' .. after .. ')')
  end
end
for i = 4, #ARGV do
  local tag = ARGV[i]
  if how == 'add' and not contains(tags, tag) then
    tags[#tags + 1] = tag
    redis.call('ZADD', K.tagged, 0, tag .. '\0' .. pad(number))
  elseif how == 'remove' and contains(tags, tag) then
    local kept = {}
    for _, t in ipairs(tags) do if t ~= tag then kept[#kept + 1] = t end end
    tags = kept
    redis.call('ZREM', K.tagged, tag .. '\0' .. pad(number))
  end
end
record.tags = list_or_nil(tags)
save(number, record)
return tags
