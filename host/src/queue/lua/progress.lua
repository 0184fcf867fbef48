-- progress: store a running job's latest progress and publish it.
--
-- KEYS[1]  wg:{F}:jobs    hash     number -> job record (JSON)
-- KEYS[2]  wg:{F}:events  channel
--
-- ARGV[1]  function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  units done
-- ARGV[5]  units in all (0: unknown)
-- ARGV[6]  message ('' for none)
--
-- Returns: 1 when stored; 0 when the token does not hold the job's lease (nothing changes).
-- Publishes: {"event":"progress","id":"F:N","seq":S,"done":D,"total":T,"message":M}, where
--            S counts the job's progress reports from 1 over all attempts, so a reader can put them in order.

local jobs_key, channel = KEYS[1], KEYS[2]
local fn, number, token = ARGV[1], ARGV[2], ARGV[3]

local raw = redis.call('HGET', jobs_key, number)
if not raw then return 0 end
local record = cjson.decode(raw)
if record.state ~= 'running' or record.token ~= token then return 0 end

-- progress_seq is never reset (not even by a retry), so readers can order reports.
record.progress_seq = (record.progress_seq or 0) + 1
local progress = { seq = record.progress_seq, done = tonumber(ARGV[4]), total = tonumber(ARGV[5]) }
if ARGV[6] ~= '' then progress.message = ARGV[6] end
record.progress = progress
redis.call('HSET', jobs_key, number, cjson.encode(record))
redis.call('PUBLISH', channel, cjson.encode({
  event = 'progress', id = fn .. ':' .. number, seq = progress.seq,
  done = progress.done, total = progress.total, message = progress.message,
}))
return 1
