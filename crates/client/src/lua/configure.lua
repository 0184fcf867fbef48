-- configure: set or clear settings of one function's queue, shared by all workers.
--
-- KEYS: stats config events work jobs leased group_running group_config
-- ARGV[1]  the function name
-- ARGV[2..] pairs of setting and value; an empty value clears the setting:
--   paused            '1': workers lease none of the function's jobs (enqueueing goes on)
--   concurrency       the most jobs running at once, over all workers
--   rate_limit        the most leases per rate_interval_ms, over all workers
--   rate_interval_ms  the rate limit's window, ms
--   keep_finished     the most finished jobs kept (oldest forgotten first); default 50000
--   group_concurrency       each group's most jobs running at once (a group's own, set with
--                           `configure_group`, overrides it); 1 makes each group a sequence
--   group_rate_limit        each group's most leases per group_rate_interval_ms
--   group_rate_interval_ms  the window of each group's rate limit, ms
--   encrypt           '1': the function stores only encrypted input (`enqueue` refuses a
--                     plain one, before writing; see crates/proto/src/crypto.rs)
--   min_replicas      how many replicas must confirm an enqueue of the function's jobs, and
--                     a worker's completion of them, before the call reports success
--                     (producers and workers send `WAIT` after the write: see `enqueue`)
--
-- Returns: the settings afterwards, as a flat list of setting, value.
-- Publishes: `config`, so idle workers look again at once.

-- Every pair is checked before the first is written: a refused call changes nothing.
local RANGES = {
  concurrency = { 1, MAX_WHOLE }, rate_limit = { 1, MAX_WHOLE }, rate_interval_ms = { 1, MAX_DURATION_MS },
  keep_finished = { 1, MAX_WHOLE }, group_concurrency = { 1, MAX_WHOLE }, group_rate_limit = { 1, MAX_WHOLE },
  group_rate_interval_ms = { 1, MAX_DURATION_MS }, min_replicas = { 1, MAX_MIN_REPLICAS },
}
if #ARGV % 2 ~= 1 then return redis.error_reply('BADARGS configure: settings come in SETTING VALUE pairs') end
for i = 2, #ARGV - 1, 2 do
  local setting, value = ARGV[i], ARGV[i + 1]
  local range = RANGES[setting]
  if setting == 'paused' or setting == 'encrypt' then
    if value ~= '' and value ~= '1' then return redis.error_reply('BADARGS configure: ' .. setting .. " is '1' or ''") end
  elseif not range then
    return redis.error_reply('BADARGS configure: unknown setting ' .. setting)
  elseif value ~= '' and not whole(value, range[1], range[2]) then
    return redis.error_reply(string.format('BADARGS configure: %s must be a whole number in %d..%d, or empty to clear it',
      setting, range[1], range[2]))
  end
end
for i = 2, #ARGV - 1, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', K.config, ARGV[i])
  else
    redis.call('HSET', K.config, ARGV[i], ARGV[i + 1])
  end
end
CONFIG = nil -- read again if asked
for i = 2, #ARGV - 1, 2 do
  if ARGV[i] == 'group_concurrency' then
    -- The groups' slots counted again under the new limit.
    GROUP.LIMITS, GROUP.CONFIGURED = {}, nil
    GROUP.recount()
    break
  end
end
publish({ event = 'config', id = '' })
return redis.call('HGETALL', K.config)
