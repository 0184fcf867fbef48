-- batch_close: close a batch: no job can be added any more, and once every job has ended,
-- its callbacks are due. Closing a closed batch changes nothing.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- Returns: the callbacks now due ('success', 'complete'; see batch_settle), or the error
-- `NOBATCH`.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('NOBATCH no such batch (never opened, or forgotten)')
end
if redis.call('HGET', KEYS[1], 'open') == '1' then
  redis.call('HSET', KEYS[1], 'open', '0', 'closed_ms', string.format('%d', clock_ms()))
end
return batch_settle(KEYS[1])
