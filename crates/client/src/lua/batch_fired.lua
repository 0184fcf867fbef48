-- batch_fired: note that a due callback of a batch has been enqueued (as job G:N, with the
-- `once` key `batch:ID:KIND`, so that enqueueing it again returns the same job). Once no
-- callback is due any more, the batch is kept BATCH_RETENTION_MS more.
--
-- KEYS[1]  wg:{batch:ID}:state    hash
-- KEYS[2]  wg:{batch:ID}:members  list
-- KEYS[3]  wg:{batch:ID}:ended    hash
--
-- ARGV[1]  'success' or 'complete'
-- ARGV[2]  the callback job's id
--
-- Returns: 1 when it was due, else 0.

if (ARGV[1] ~= 'success' and ARGV[1] ~= 'complete') or not split_id(ARGV[2] or '') then
  return redis.error_reply("BADBATCH batch_fired takes 'success' or 'complete' and a job id")
end
if redis.call('HGET', KEYS[1], ARGV[1]) ~= 'due' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('HGET', KEYS[1], 'success') ~= 'due' and redis.call('HGET', KEYS[1], 'complete') ~= 'due' then
  for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, string.format('%d', BATCH_RETENTION_MS)) end
end
return 1
