-- configure_group: set or clear one group's own limits, or pause or resume it (lib.lua,
-- "Groups"). A limit left empty falls back to the function's (`group_concurrency`,
-- `group_rate_limit`, `group_rate_interval_ms`, set with `configure`).
--
-- KEYS: ready stats config events work groups group_ready group_running group_config jobs leased
-- ARGV[1]  the function name
-- ARGV[2]  the group key
-- ARGV[3..] pairs of setting and value; an empty value clears the setting:
--   concurrency       the most jobs of the group running at once, over all workers (1: a
--                     sequence, one at a time in order)
--   rate_limit        the most leases of the group per rate_interval_ms
--   rate_interval_ms  the window of its rate limit, ms
--   paused            '1': workers lease none of the group's jobs (the other groups go on)
--
-- Returns: {concurrency, rate_limit, rate_interval_ms, paused}, the group's own settings
--          afterwards ('' where it has none). Or, having written nothing, the error reply
--          `BADARGS configure_group: ...`.
-- Publishes: `config`, so idle workers look again at once.

local group = ARGV[2]
if not GROUP.fits(group) then
  return redis.error_reply('BADARGS configure_group: ' .. tostring(group) .. " is not a group key (1 to "
    .. MAX_KEY_BYTES .. " bytes of printable ASCII but space, '\"', '\\' and '|')")
end
if #ARGV % 2 ~= 0 then return redis.error_reply('BADARGS configure_group: settings come in SETTING VALUE pairs') end
local SETTINGS = { concurrency = 1, rate_limit = 2, rate_interval_ms = 3, paused = 4 }
local RANGES = { concurrency = MAX_WHOLE, rate_limit = MAX_WHOLE, rate_interval_ms = MAX_DURATION_MS }
-- Every pair is checked before the first is written: a refused call changes nothing.
for i = 3, #ARGV - 1, 2 do
  local setting, value = ARGV[i], ARGV[i + 1]
  if not SETTINGS[setting] then
    return redis.error_reply('BADARGS configure_group: unknown setting ' .. setting
      .. ' (concurrency, rate_limit, rate_interval_ms, paused)')
  elseif setting == 'paused' then
    if value ~= '' and value ~= '1' then return redis.error_reply("BADARGS configure_group: paused is '1' or ''") end
  elseif value ~= '' and not whole(value, 1, RANGES[setting]) then
    return redis.error_reply(string.format('BADARGS configure_group: %s must be a whole number in 1..%d, or empty to clear it',
      setting, RANGES[setting]))
  end
end
local own = { string.match(redis.call('HGET', K.group_config, group) or '', '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$') }
if #own == 0 then own = { '', '', '', '' } end
for i = 3, #ARGV - 1, 2 do own[SETTINGS[ARGV[i]]] = ARGV[i + 1] end
if table.concat(own) == '' then
  redis.call('HDEL', K.group_config, group)
else
  redis.call('HSET', K.group_config, group, table.concat(own, '|'))
end
GROUP.LIMITS, GROUP.CONFIGURED = {}, nil
for i = 3, #ARGV - 1, 2 do
  -- The groups' slots counted again under the new limit.
  if ARGV[i] == 'concurrency' then GROUP.recount() break end
end
-- Resumed, or given more room: back in the round if it has ready jobs (a group that still
-- may not lease leaves it again at its turn).
if own[4] ~= '1' and GROUP.has_ready(group) then GROUP.join(group) end
publish({ event = 'config', id = '' })
return own
