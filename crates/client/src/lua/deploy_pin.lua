-- deploy_pin: pin a version's chunks, in their slot. A deploy pins them before writing them
-- (sharing the pin with other deploys of the same version, refused while a collector holds
-- it); a collector pins them alone before deleting them (refused while anyone holds it).
--
-- KEYS[1]  wg:{plugin:VERSION}:pin  string  `deploy`, or `collect:TOKEN`; expires by itself
--
-- ARGV[1]  `deploy`, or `collect:TOKEN` (TOKEN letters and digits)
-- ARGV[2]  how long the pin holds (ms, 1 to 86400000)
--
-- Returns: 1 if pinned, 0 if not; or the error reply `BADDEPLOY why`, having written nothing.

if #ARGV ~= 2 then return refuse('BADDEPLOY', 'deploy_pin takes 2 arguments') end
local who, ms = ARGV[1], whole(ARGV[2])
local collector = string.match(who, '^collect:(.*)$')
if who ~= 'deploy' and not fits_token(collector) then
  return refuse('BADDEPLOY', 'the pin is taken by `deploy` or `collect:TOKEN`')
end
if not ms or ms < 1 or ms > 86400000 then
  return refuse('BADDEPLOY', 'the pin must hold for 1 to 86400000 ms')
end
local held = redis.call('GET', KEYS[1])
if collector then
  if held then return 0 end
elseif held and held ~= 'deploy' then
  return 0
elseif held and redis.call('PTTL', KEYS[1]) >= ms then
  return 1
end
redis.call('SET', KEYS[1], who, 'PX', ms)
return 1
