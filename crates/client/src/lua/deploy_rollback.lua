-- deploy_rollback: put a function back on the version it had before its current one.
--
-- KEYS[1]  wg:{deploy}:versions  hash     version -> its record (JSON)
-- KEYS[2]  wg:{deploy}:current   hash     function -> current version
-- KEYS[3]  wg:{deploy}:history   hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events    channel  `FUNCTION VERSION` after each change
--
-- ARGV[1]  the function
--
-- Returns: {'ok', VERSION_LEFT, VERSION_NOW} or {'refused', why}. The version left is taken off
-- the function's stack (a second rollback goes further back, not forth again).

local fn = ARGV[1]
if not fits_name(fn) then return { 'refused', 'give a function name' } end
local stack = deploy_stack(KEYS[3], fn)
if #stack == 0 then
  return { 'refused', fn .. ' has no deployed version (deploy one with `wasmgear deploy`)' }
end
if #stack == 1 then
  return { 'refused', fn .. ' has no earlier deployed version to roll back to' }
end
local left = table.remove(stack)
redis.call('HSET', KEYS[3], fn, cjson.encode(stack))
local now = stack[#stack]
redis.call('HSET', KEYS[2], fn, now)
redis.call('PUBLISH', KEYS[4], fn .. ' ' .. now)
return { 'ok', left, now }
