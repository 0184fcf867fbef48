-- recheck: hand out the jobs of this function whose links to dependencies in other
-- functions are due for a re-check (the safety net for a caller that died between the
-- steps of a link; see `link`), on the queue's clock. Each job handed out has its next
-- re-check pushed further out (30 s, doubling, at most hourly) here, so repeated calls
-- move on; entries of the waiting set without a waiting job behind them are removed.
--
-- KEYS: jobs waiting stats events
-- ARGV[1]  the function name
-- ARGV[2]  the most jobs to hand out
--
-- Returns: {looked, due}: how many entries of the waiting set it looked at (fewer than asked
--          for: no more are due), and {number, dependencies} per job handed out,
--          dependencies being the ids of the jobs of other functions it still waits on (the
--          caller runs `link` for each and tells the job with `resolve` about those that have
--          ended).

local limit = whole(ARGV[2] or '', 1, 1000)
if not limit then return redis.error_reply('BADARGS recheck: the most jobs must be a whole number in 1..1000') end

local due = {}
local entries = redis.call('ZRANGEBYSCORE', K.waiting, '-inf', int(NOW), 'LIMIT', '0', int(limit))
for _, number in ipairs(entries) do
  local record = load(number)
  if not record or record.state ~= 'waiting' then
    redis.call('ZREM', K.waiting, number)
  else
    record.relinks = (record.relinks or 0) + 1
    local wait = math.min(RELINK_FIRST_MS * 2 ^ math.min(record.relinks, 20), RELINK_MAX_MS)
    redis.call('ZADD', K.waiting, int(NOW + wait), number)
    save(number, record)
    local others = {}
    for _, dep in ipairs(record.waiting_on or {}) do
      if split_id(dep) ~= FN then others[#others + 1] = dep end
    end
    due[#due + 1] = { tonumber(number), others }
  end
end
return { #entries, due }
