-- flows_due: hand out flows due for a check of whether all their jobs are forgotten (the
-- caller reads the jobs' states and calls `flow_forget` for such a flow). Each flow handed
-- out is checked next after as long again as it has lived (at least FLOW_CHECK_FIRST_MS, at
-- most FLOW_CHECK_MAX_MS), so repeated calls move on. An entry without a record is removed.
--
-- KEYS[1]  wg:{flows}:records  hash  id -> 'CREATED_MS|' then the flow as JSON
-- KEYS[2]  wg:{flows}:due      zset  id, scored by when to check it
--
-- ARGV[1]  the most flows to hand out, 1..100
--
-- Returns: {id, record} per flow handed out.

local limit = tonumber(ARGV[1] or '')
if not limit or limit < 1 or limit > 100 or limit ~= math.floor(limit) then
  return redis.error_reply('BADARGS flows_due: the most flows must be a whole number in 1..100')
end
local now = clock_ms()
local due = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now), 'LIMIT', '0', string.format('%d', limit))) do
  local record = redis.call('HGET', KEYS[1], id)
  if not record then
    redis.call('ZREM', KEYS[2], id)
  else
    local created = tonumber(string.match(record, '^(%d+)|')) or now
    local wait = math.max(FLOW_CHECK_FIRST_MS, math.min(now - created, FLOW_CHECK_MAX_MS))
    redis.call('ZADD', KEYS[2], string.format('%d', now + wait), id)
    due[#due + 1] = { id, record }
  end
end
return due
