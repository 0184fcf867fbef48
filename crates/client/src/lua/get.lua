-- get: a job's record as JSON (the fields PROTOCOL.md lists), and its output. How records
-- are kept in `jobs` is this library's business (lib.lua, job records): clients read them
-- here.
--
-- KEYS: jobs output stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
--
-- Returns: {record, output} (output false unless the job succeeded and is kept), or false
--          when there is no such job.

local number = ARGV[2]
local raw = redis.call('HGET', K.jobs, number)
if not raw then return false end
local record = decode(raw)
local final = record.state == 'succeeded' or record.state == 'failed' or record.state == 'cancelled'
  or record.state == 'expired'
if record.state == 'succeeded' and record.worker then
  -- The attempt that succeeded, kept in the hot fields instead of the history.
  local history = record.history or {}
  history[#history + 1] = {
    attempt = record.attempt, worker = record.worker, started_ms = record.started_ms,
    ended_ms = record.finished_ms, outcome = 'succeeded', version = record.version,
  }
  record.history = history
end
if final then record.worker = nil end
-- A lease token is the worker's business (a job that is not running keeps the token of the
-- lease whose report ended it, for that report sent again).
record.token = nil
record.version = nil
return { cjson.encode(record), redis.call('HGET', K.output, number) }
