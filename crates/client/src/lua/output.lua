-- output: a piece of a succeeded job's output, for a dependent that reads its dependencies'
-- outputs a piece at a time (the whole of one may be larger than the dependent wants to
-- hold at once).
--
-- KEYS: output stats events
-- ARGV[1]  the function name
-- ARGV[2]  job number
-- ARGV[3]  offset: the first byte wanted (0-based)
-- ARGV[4]  most: how many bytes at most, 1..MAX_OUTPUT_PIECE
--
-- Returns: the bytes from `offset` (empty past the end), or false when no output of the job
--          is kept (it has not succeeded, or it was forgotten).

local number = ARGV[2]
local offset = whole(ARGV[3])
local most = whole(ARGV[4], 1, MAX_OUTPUT_PIECE)
if not job_number(number) or not offset or not most then
  return redis.error_reply('BADARGS output: give a job number, an offset and a size of 1..' .. MAX_OUTPUT_PIECE)
end
local output = redis.call('HGET', K.output, number)
if not output then return false end
return string.sub(output, offset + 1, offset + most)
