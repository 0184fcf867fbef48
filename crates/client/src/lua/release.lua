-- release: hand a leased job back unrun (the worker is shutting down), without counting
-- the attempt. The job goes back to the ready set at its old place.
--
-- A job whose cancellation was asked for is not handed back: it ends `cancelled`.
--
-- KEYS: jobs logs ready scheduled leased waiting expires uniq failed counts stats config events work groups group_ready group_running group_config dedup dedup_exp expiring
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
--
-- Returns: {1, 'queued', {}} when handed back, {1, 'cancelled', notify} when it ended
--          cancelled (notify: see lib.lua); {0, 'stale', {}} / {0, 'missing', {}} when the
--          token does not hold the job's lease.

local number, token = ARGV[2], ARGV[3]

local record = load(number)
if not record then return { 0, 'missing', {} } end
-- Handed back before by this lease (sent again): the same answer.
if record.state ~= 'running' and record.token == token then return { 1, record.state, {} } end
if record.state ~= 'running' or record.token ~= token then return { 0, 'stale', {} } end
GROUP.unlease(number, record)

if record.cancel_requested_ms then
  finish(number, record, 'cancelled', { class = 'cancelled', message = 'cancelled while running' })
  record.token = token
  save(number, record)
  settle()
  return { 1, 'cancelled', NOTIFY }
end

record.attempt = record.attempt - 1
-- (started_ms stays: the job has been leased, so its dependencies had all succeeded, which
-- `retry` reads from it; the token stays until the next lease, for a report sent again.)
record.worker, record.lease_until_ms = nil, nil
record.unconfirmed = nil
record.progress = nil
make_ready(number, record)
save(number, record)
publish({ event = 'ready', id = id_of(number) })
return { 1, 'queued', {} }
