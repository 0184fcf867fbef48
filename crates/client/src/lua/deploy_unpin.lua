-- deploy_unpin: let go of a version's pin: a deploy once it has recorded the version (the
-- record keeps the chunks from then on), or a collector, deleting the chunks first if it
-- says so. Nothing happens unless the pin is still the caller's (it has not expired).
--
-- KEYS[1]  wg:{plugin:VERSION}:chunks  hash    chunk number -> part of the component
-- KEYS[2]  wg:{plugin:VERSION}:pin     string  `deploy`, or `collect:TOKEN`
--
-- ARGV[1]  `deploy`, or `collect:TOKEN` as the collector pinned it
-- ARGV[2]  `1` to delete the chunks (a collector only), `0` to let go only
--
-- Returns: 1 if done, 0 if the pin is not the caller's (any more); or the error reply
-- `BADDEPLOY why`, having written nothing.

local who, drop = ARGV[1], ARGV[2]
local collector = #ARGV == 2 and who ~= 'deploy' and fits_token(string.match(who, '^collect:(.*)$'))
if #ARGV ~= 2 or not (who == 'deploy' or collector) or (drop ~= '0' and drop ~= '1')
  or (drop == '1' and not collector) then
  return refuse('BADDEPLOY', 'deploy_unpin takes `deploy` and 0, or `collect:TOKEN` and 1 or 0')
end
if redis.call('GET', KEYS[2]) ~= who then return 0 end
if drop == '1' then redis.call('DEL', KEYS[1]) end
redis.call('DEL', KEYS[2])
return 1
