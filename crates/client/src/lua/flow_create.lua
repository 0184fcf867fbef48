-- flow_create: record a flow (`wasmgear flow submit`) and hand out its id. The caller has
-- checked the graph and reserved its jobs' numbers (`reserve`), and writes the jobs after
-- this call, each with the flow's id.
--
-- KEYS[1]  wg:{flows}:seq      string  the last flow id handed out
-- KEYS[2]  wg:{flows}:records  hash    id -> 'CREATED_MS|' then the flow as JSON
-- KEYS[3]  wg:{flows}:due      zset    id, scored by when to check whether its jobs are all
--                                      forgotten (then the flow is: `flows_due`)
--
-- ARGV[1]  the flow as JSON: an object with its `name` (text) and `jobs` (a list), at most
--          MAX_FLOW_RECORD_BYTES bytes
--
-- Returns: {id, created_ms}. Or the error reply `BADFLOW why`, having written nothing.

local text = ARGV[1] or ''
if #text > MAX_FLOW_RECORD_BYTES then
  return redis.error_reply('BADFLOW the flow record is larger than ' .. MAX_FLOW_RECORD_BYTES .. ' bytes')
end
local ok, flow = pcall(cjson.decode, text)
if not ok or type(flow) ~= 'table' or type(flow.name) ~= 'string' or type(flow.jobs) ~= 'table' then
  return redis.error_reply('BADFLOW the flow record must be a JSON object with a name and a list of jobs')
end
local now = clock_ms()
local id = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], id, string.format('%d', now) .. '|' .. text)
redis.call('ZADD', KEYS[3], string.format('%d', now + FLOW_CHECK_FIRST_MS), id)
return { id, now }
