-- watch: what `get` answers, and the mark that a client waits on the job: when it ends, its
-- `finish` event carries its record and (when small) its output, so the waiting client
-- needs no read of its own. A wait calls it first, after subscribing to the events.
-- Calling it again, or on a job that has ended, changes nothing.
--
-- KEYS: jobs output stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
--
-- Returns: {record, output} as `get` answers them, or false when there is no such job.
-- Publishes, when the job ends: `finish` with `record` (as `get` answers it) and `output`
-- (the output, when it succeeded with at most MAX_EVENT_OUTPUT bytes of printable ASCII,
-- tabs and line ends) or `output_omitted` true (it has an output: read it with `get`).

local number = ARGV[2]
local raw = redis.call('HGET', K.jobs, number)
if not raw then return false end
local record = decode(raw)
if not ENDED[record.state] and not record.watched then
  record.watched = true
  redis.call('HSET', K.jobs, number, encode(record))
end
return { cjson.encode(WATCH.public(record)), redis.call('HGET', K.output, number) }
