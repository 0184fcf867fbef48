-- batch_open: open a batch (`wasmgear batch`): jobs of any functions are added to it while it
-- is open (`batch_add`, then `enqueue` with the option `batch`), and once it is closed and
-- every job has ended, its callbacks are due: `on_success` when all succeeded, `on_complete`
-- in any case. The batch is kept at most BATCH_MAX_MS.
--
-- KEYS[1]  wg:{batch:ID}:state    hash  (see batch_settle in lib.lua)
-- KEYS[2]  wg:{batch:ID}:members  list  the jobs' ids, in the order added
-- KEYS[3]  wg:{batch:ID}:ended    hash  job id -> the state it ended in
--
-- ARGV[1]  the batch's definition: a JSON object (its name and callbacks), at most 64 KiB
--
-- Returns: the time it was opened (ms), or the error `BADBATCH` (a definition that does not
-- read, or a batch of this id already).

local def = ARGV[1] or ''
local ok, decoded = pcall(cjson.decode, def)
if #def > 65536 or not ok or type(decoded) ~= 'table' then
  return redis.error_reply('BADBATCH the batch definition must be a JSON object of at most 64 KiB')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('BADBATCH a batch of this id exists already')
end
local now = clock_ms()
redis.call('HSET', KEYS[1], 'def', def, 'open', '1', 'total', '0', 'succeeded', '0', 'failed', '0',
  'cancelled', '0', 'created_ms', string.format('%d', now), 'added_ms', string.format('%d', now))
for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, string.format('%d', BATCH_MAX_MS)) end
return now
