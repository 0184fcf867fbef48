-- complete: store a leased job's output and mark it succeeded, exactly once.
--
-- Fenced by the lease token: a worker that no longer holds the lease (it expired and the
-- job was reclaimed, or the job was already finished) is refused and changes nothing.
-- Jobs waiting on this one run once their other dependencies have succeeded too.
--
-- KEYS: the function's keys (lib.lua). ARGV[1]: the function name.
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  output bytes
-- ARGV[5]  this attempt's log lines (text, may be empty)
-- ARGV[6]  the version (content hash) of the plugin that ran the attempt ('' if unknown)
--
-- Returns: {1, 'succeeded', notify} when accepted (notify: dependents in other functions to
--          tell, see lib.lua); {0, reason, {}} when refused, reason one of 'missing' (no such
--          job) or 'stale' (the token does not hold the job's lease).
-- Publishes: `finish` with state `succeeded`; `ready` for each dependent that may now run.

local number, token, output, log_text, version = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

local record = load(number)
if not record then return { 0, 'missing', {} } end
if record.state ~= 'running' or record.token ~= token then return { 0, 'stale', {} } end

add_history(record, 'succeeded', nil, version)
stat_time('run', NOW - record.started_ms)
redis.call('HSET', K.output, number, output)
append_log(number, record.attempt, log_text)
finish(number, record, 'succeeded', nil)
settle()
return { 1, 'succeeded', NOTIFY }
