-- flow_get: a flow's record.
--
-- KEYS[1]  wg:{flows}:records  hash  id -> 'CREATED_MS|' then the flow as JSON
--
-- ARGV[1]  the flow's id
--
-- Returns: the record ('CREATED_MS|JSON'), or nil when there is no such flow (never
-- submitted, or forgotten with its jobs).

return redis.call('HGET', KEYS[1], ARGV[1] or '')
