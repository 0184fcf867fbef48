-- configure: set or clear settings of one function's queue, shared by all workers.
--
-- KEYS: stats config events work
-- ARGV[1]  the function name
-- ARGV[2..] pairs of setting and value; an empty value clears the setting:
--   paused            '1': workers lease none of the function's jobs (enqueueing goes on)
--   concurrency       the most jobs running at once, over all workers
--   rate_limit        the most leases per rate_interval_ms, over all workers
--   rate_interval_ms  the rate limit's window, ms
--   keep_finished     the most finished jobs kept (oldest forgotten first); default 50000
--
-- Returns: the settings afterwards, as a flat list of setting, value.
-- Publishes: `config`, so idle workers look again at once.

for i = 2, #ARGV - 1, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', K.config, ARGV[i])
  else
    redis.call('HSET', K.config, ARGV[i], ARGV[i + 1])
  end
end
CONFIG = nil -- read again if asked
publish({ event = 'config', id = '' })
return redis.call('HGETALL', K.config)
