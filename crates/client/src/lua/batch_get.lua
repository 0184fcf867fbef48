-- batch_get: how a batch stands.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- ARGV[1]  '1' to list the jobs that have not ended too (for the upkeep's re-check), else '0'
--
-- Returns: {state, unsuccessful, unended}: state, the fields of the state hash as a flat
-- list (empty: no such batch); unsuccessful, job id and state of each job that failed or
-- was cancelled (at most MAX_BATCH_JOBS); unended, the ids of the jobs not counted as ended
-- yet (with ARGV[1] '1').

local state = redis.call('HGETALL', KEYS[1])
if #state == 0 then return { {}, {}, {} } end
local ended = redis.call('HGETALL', KEYS[3])
local unsuccessful, seen = {}, {}
for i = 1, #ended, 2 do
  seen[ended[i]] = true
  if ended[i + 1] ~= 'succeeded' then
    unsuccessful[#unsuccessful + 1] = ended[i]
    unsuccessful[#unsuccessful + 1] = ended[i + 1]
  end
end
local unended = {}
if ARGV[1] == '1' then
  for _, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
    if not seen[id] then unended[#unended + 1] = id end
  end
end
return { state, unsuccessful, unended }
