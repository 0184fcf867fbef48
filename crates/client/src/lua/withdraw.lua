-- withdraw: take a worker's registration to be handed jobs of this function out, unless it
-- was used or has lapsed (lease.lua, ARGV[8]; lib.lua, "Idle workers handed jobs directly").
-- A worker calls it to take back the slots it keeps free for the registration: when it
-- needs them for jobs of another function, or when it stops.
--
-- KEYS: stats events idle idle_args
-- ARGV[1]  the function name
-- ARGV[2]  the worker id
-- ARGV[3]  the registering call's id
--
-- Returns: 1 when the registration was taken out (no job can be handed through it now),
--          0 when it was not there (it lapsed or was handed jobs, whose messages may still
--          be on their way) or is another call's (left alone).

local worker, call_id = ARGV[2], ARGV[3]
local args = redis.call('HGET', K.idle_args, worker)
if not args or string.match(args, '^([^|]+)|') ~= call_id then return 0 end
idle_leave(worker)
return 1
