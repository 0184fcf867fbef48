-- resolve: tell a waiting job of this function what became of one of its dependencies in
-- another function (the second step; see `enqueue` and `link`). Idempotent.
--
-- KEYS: jobs logs ready scheduled leased waiting expires uniq failed counts stats config events work
-- ARGV[1]  the function name
-- ARGV[2]  the waiting job's number
-- ARGV[3]  the dependency's id ('G:N')
-- ARGV[4]  the dependency's state: 'succeeded' (the job runs once all its dependencies
--          have), 'failed', 'cancelled' or 'missing' (the job is cancelled, naming the
--          dependency), or 'pending' (nothing changes but the time of the next re-check)
--
-- Returns: notify, the dependents in other functions to tell in turn (see lib.lua).
-- Publishes: `ready` when the job may now run, `finish` when it was cancelled.

local STATES = { succeeded = true, failed = true, cancelled = true, missing = true, pending = true }
if not (split_id(ARGV[3] or '') and STATES[ARGV[4] or '']) then
  return redis.error_reply('BADARGS resolve: a dependency id (FUNCTION:NUMBER) and its state (succeeded, failed, cancelled, missing or pending)')
end
resolve(ARGV[2], ARGV[3], ARGV[4])
settle()
return NOTIFY
