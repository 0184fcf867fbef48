-- resolve: tell waiting jobs of this function what became of their dependencies in other
-- functions (the second step; see `enqueue` and `link`). Idempotent. Many at once: a
-- worker tells all it has in one call, so a fan-in's dependent is loaded and saved once per
-- call, not once per dependency.
--
-- KEYS: jobs logs ready scheduled leased waiting expires uniq failed counts stats config events work groups group_ready group_running group_config dedup dedup_exp expiring
-- ARGV[1]  the function name
-- ARGV[2..] triples, 1..MAX_TELLS_PER_CALL of them: a waiting job's number, the id of one
--          of its dependencies ('G:N'), and that dependency's state: 'succeeded' (the job
--          runs once all its dependencies have), 'failed', 'cancelled' or 'missing' (the job
--          is cancelled, naming the dependency, unless it tolerates that: `after_ignore`,
--          `after_continue`), or 'pending' (nothing changes but the time of the next
--          re-check)
--
-- Returns: notify, the dependents in other functions to tell in turn (see lib.lua).
-- Publishes: `ready` when a job may now run, `finish` when one was cancelled.

local STATES = { succeeded = true, failed = true, cancelled = true, missing = true, pending = true }
local n = (#ARGV - 1) / 3
if n < 1 or n ~= math.floor(n) or n > MAX_TELLS_PER_CALL then
  return redis.error_reply('BADARGS resolve: 1..' .. MAX_TELLS_PER_CALL .. ' triples of a job number, a dependency id and its state')
end
for i = 0, n - 1 do
  local number, dep, state = ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i]
  if not (job_number(number) and split_id(dep) and STATES[state]) then
    return redis.error_reply('BADARGS resolve: a job number, a dependency id (FUNCTION:NUMBER) and its state (succeeded, failed, cancelled, missing or pending)')
  end
end
begin_batch()
for i = 0, n - 1 do
  resolve(ARGV[2 + 3 * i], ARGV[3 + 3 * i], ARGV[4 + 3 * i])
end
settle()
flush()
return NOTIFY
