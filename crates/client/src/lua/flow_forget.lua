-- flow_forget: forget a flow's record, once its jobs are all forgotten.
--
-- KEYS[1]  wg:{flows}:records  hash  id -> 'CREATED_MS|' then the flow as JSON
-- KEYS[2]  wg:{flows}:due      zset  id, scored by when to check it
--
-- ARGV[1]  the flow's id
--
-- Returns: 1 when the flow was forgotten, 0 when there was none.

redis.call('ZREM', KEYS[2], ARGV[1] or '')
return redis.call('HDEL', KEYS[1], ARGV[1] or '')
