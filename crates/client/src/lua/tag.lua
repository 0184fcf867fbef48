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

local record = load(number)
if not record then return redis.error_reply('NOJOB no such job ' .. id_of(number)) end
local tags = record.tags or {}
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
