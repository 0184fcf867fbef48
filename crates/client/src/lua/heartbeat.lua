-- heartbeat: extend the lease of a running job.
--
-- KEYS: jobs leased stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  lease token
-- ARGV[4]  new lease duration from now, ms
--
-- Returns: {expiry, cancel}: expiry is the new lease expiry (ms since the epoch, queue
--          clock), or 0 when the token no longer holds the lease (the caller must stop the
--          job: it belongs to no one or to someone else now); cancel is 1 when a client
--          asked for the job to be cancelled (the caller should stop it), else 0.

local number, token, lease_ms = ARGV[2], ARGV[3], whole(ARGV[4] or '', 1, MAX_DURATION_MS)
if not lease_ms then
  return redis.error_reply('BADARGS heartbeat: the lease duration must be a whole number of ms in 1..' .. MAX_DURATION_MS)
end

local record = load(number)
if not record then return { 0, 0 } end
if record.state ~= 'running' or record.token ~= token then return { 0, 0 } end

record.lease_until_ms = NOW + lease_ms
record.unconfirmed = nil -- the worker has the job: the attempt counts (see `lease`)
save(number, record)
redis.call('ZADD', K.leased, int(NOW + lease_ms), number)
local cancel = 0
if record.cancel_requested_ms then cancel = 1 end
return { NOW + lease_ms, cancel }
