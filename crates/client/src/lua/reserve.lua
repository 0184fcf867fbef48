-- reserve: reserve job numbers for a flow's jobs of this function, so that the flow knows
-- every job's id before it writes any (a job's dependencies may be in any function, written
-- in any order). `enqueue` gives a reserved number to the job whose `number` option names
-- it; a number not used within RESERVATION_MS is let go (a dependent linked to it is then
-- told it is `missing`). Lapsed reservations are forgotten here.
--
-- KEYS: seq stats events reserved
-- ARGV[1]  the function name
-- ARGV[2]  how many numbers, 1..MAX_FLOW_JOBS
--
-- Returns: the first of the numbers reserved (they follow one another).

local count = whole(ARGV[2] or '', 1, MAX_FLOW_JOBS)
if not count then
  return redis.error_reply('BADARGS reserve: how many numbers must be a whole number in 1..' .. MAX_FLOW_JOBS)
end
redis.call('ZREMRANGEBYSCORE', K.reserved, '-inf', int(NOW))
local last = redis.call('INCRBY', K.seq, int(count))
local first = last - count + 1
local until_ms = int(NOW + RESERVATION_MS)
local members = {}
for number = first, last do
  members[#members + 1] = until_ms
  members[#members + 1] = int(number)
end
call_chunked('ZADD', K.reserved, members)
return first
