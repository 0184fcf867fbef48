-- batches_due: the batches the workers' upkeep re-checks (its safety net: a job whose end
-- was not counted, a callback due but not enqueued, because a caller died between the
-- steps). Hands out up to `n` due ones, each next due BATCH_CHECK_MS later; with ARGV[1]
-- 'watch' or 'unwatch', adds or removes one.
--
-- KEYS[1]  wg:{batches}:due  zset  batch id, scored by when to re-check it (ms)
--
-- ARGV[1]  'due' and the most to hand out (1..100); or 'watch' or 'unwatch' and a batch id
--
-- Returns: the ids handed out; 1 for 'watch' and 'unwatch'.

local now = clock_ms()
if ARGV[1] == 'watch' and ARGV[2] then
  redis.call('ZADD', KEYS[1], string.format('%d', now + BATCH_CHECK_MS), ARGV[2])
  return 1
end
if ARGV[1] == 'unwatch' and ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[2])
  return 1
end
local limit = tonumber(ARGV[2] or '')
if ARGV[1] ~= 'due' or not limit or limit < 1 or limit > 100 or limit ~= math.floor(limit) then
  return redis.error_reply("BADARGS batches_due: 'due' and 1..100, or 'watch'/'unwatch' and a batch id")
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now), 'LIMIT', '0', string.format('%d', limit))
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], string.format('%d', now + BATCH_CHECK_MS), id)
end
return ids
