-- groups: a function's groups (lib.lua, "Groups"), the deepest first: each group's ready
-- jobs, jobs holding a slot, own settings and whether it waits for its rate window.
--
-- KEYS: ready stats events groups group_ready group_running group_config group_wait jobs leased
-- ARGV[1]  the function name
-- ARGV[2]  the most groups to answer, 1..MAX_GROUPS_LISTED
-- ARGV[3]  one group to answer alone ('': every group)
--
-- Returns: {groups, truncated, ungrouped, rows}: groups, how many groups were looked at
--          (those with ready jobs, running jobs or their own settings); truncated, 1 when
--          there were more than MAX_GROUPS_SCANNED (the rest were not looked at);
--          ungrouped, the ready jobs without a group; rows, the deepest `most` groups, each
--          {group, ready, running, own settings 'CONCURRENCY|RATE_LIMIT|RATE_INTERVAL_MS|
--          PAUSED' ('' where it has none), waits until (ms; 0 when it does not wait)}. Or
--          the error reply `BADARGS groups: ...`.

local most = whole(ARGV[2] or '', 1, MAX_GROUPS_LISTED)
if not most then
  return redis.error_reply('BADARGS groups: the most groups to answer must be a whole number in 1..' .. MAX_GROUPS_LISTED)
end
local only = ARGV[3] or ''
if only ~= '' and not GROUP.fits(only) then
  return redis.error_reply('BADARGS groups: ' .. only .. ' is not a group key')
end

local seen, names, truncated = {}, {}, 0
local function note(group)
  if seen[group] then return true end
  if #names >= MAX_GROUPS_SCANNED then
    truncated = 1
    return false
  end
  seen[group] = true
  names[#names + 1] = group
  return true
end
if only ~= '' then
  note(only)
else
  -- Each group with ready jobs once: from one group's first member to the next group's.
  local from = '-'
  while true do
    local first = redis.call('ZRANGE', K.group_ready, from, '+', 'BYLEX', 'LIMIT', '0', '1')
    if #first == 0 then break end
    local group = string.match(first[1], '^([^%z]*)%z')
    if not group or not note(group) then break end
    from = GROUP.last(group)
  end
  for _, group in ipairs(redis.call('HKEYS', K.group_running)) do if not note(group) then break end end
  for _, group in ipairs(redis.call('HKEYS', K.group_config)) do if not note(group) then break end end
end

-- Each group's running jobs, counted from the jobs leased now (a group without a
-- concurrency limit keeps no count).
local running = {}
local leased = redis.call('ZRANGE', K.leased, '0', '-1')
local raws = hmget(K.jobs, leased)
for i = 1, #leased do
  local group = raws[i] and string.match(raws[i], '"group_id":"([^"]*)"')
  if group then
    group = string.gsub(group, '\\/', '/')
    running[group] = (running[group] or 0) + 1
    if only == '' then note(group) end
  end
end

local rows = {}
for _, group in ipairs(names) do
  rows[#rows + 1] = {
    group,
    redis.call('ZLEXCOUNT', K.group_ready, GROUP.first(group), GROUP.last(group)),
    running[group] or 0,
    redis.call('HGET', K.group_config, group) or '',
    tonumber(redis.call('ZSCORE', K.group_wait, group) or '0'),
  }
end
table.sort(rows, function(a, b)
  if a[2] ~= b[2] then return a[2] > b[2] end
  if a[3] ~= b[3] then return a[3] > b[3] end
  return a[1] < b[1]
end)
local listed = {}
for i = 1, math.min(most, #rows) do listed[i] = rows[i] end
return { #names, truncated, redis.call('ZCARD', K.ready), listed }
