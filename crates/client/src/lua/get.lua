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
return { cjson.encode(WATCH.public(decode(raw))), redis.call('HGET', K.output, number) }
