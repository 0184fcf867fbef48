-- link: make a job of another function wait on a job of this one (a dependency across
-- functions, the first of two steps; see `enqueue`). Idempotent.
--
-- KEYS: jobs stats events reserved
--          (of the dependency's function)
-- ARGV[1]  the dependency's function name
-- ARGV[2]  the dependency's number here
-- ARGV[3]  the dependent job's id ('G:M')
--
-- Returns: 'pending' when the dependency has not ended (the dependent is now recorded and
--          will be told when it does), its final state 'succeeded', 'failed' or 'cancelled'
--          when it already ended (the caller tells the dependent itself, with `resolve`), or
--          'missing' when there is no such job. A number reserved for a flow's job not yet
--          written answers 'pending' (the dependent's re-check asks again) until its
--          reservation lapses.

local number, dependent = ARGV[2], ARGV[3]
if not split_id(dependent or '') then
  return redis.error_reply('BADARGS link: the dependent must be a job id (FUNCTION:NUMBER)')
end

local record = load(number)
if not record then
  if tonumber(redis.call('ZSCORE', K.reserved, number) or '0') > NOW then return 'pending' end
  return 'missing'
end
if record.state == 'succeeded' or record.state == 'failed' or record.state == 'cancelled' then
  return record.state
end
if not contains(record.dependents, dependent) then
  local dependents = record.dependents or {}
  dependents[#dependents + 1] = dependent
  record.dependents = dependents
  save(number, record)
end
return 'pending'
