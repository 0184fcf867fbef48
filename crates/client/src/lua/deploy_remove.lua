-- deploy_remove: stop serving a function from the deployed-plugin store. Its versions stay
-- stored (replay finds them; `deploy_activate` serves one again).
--
-- KEYS[1]  wg:{deploy}:versions  hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current   hash     function -> current version
-- KEYS[3]  wg:{deploy}:history   hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events    channel  `FUNCTION VERSION` after each change (`FUNCTION -`
--                                         here)
--
-- ARGV[1]  the function
--
-- Returns: {'ok', VERSION_LEFT} or {'refused', why}.

local fn = ARGV[1]
if not fits_name(fn) then return { 'refused', 'give a function name' } end
local current = redis.call('HGET', KEYS[2], fn)
if not current then
  return { 'refused', fn .. ' is not served from the deployed-plugin store' }
end
redis.call('HDEL', KEYS[2], fn)
redis.call('HDEL', KEYS[3], fn)
redis.call('PUBLISH', KEYS[4], fn .. ' -')
return { 'ok', current }
