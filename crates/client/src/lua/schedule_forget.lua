-- schedule_forget: forget the last tick of a schedule that a function's queue keeps (the
-- dedupe of `enqueue`'s `schedule`/`tick` options): when the schedule is removed, or when
-- it is added or replaced and that tick is later than Redis' clock now (it was fired on a
-- clock that was ahead), so that it fires again from its next tick.
--
-- KEYS[1]  wg:{F}:ticks  hash  schedule name -> 'TICK_MS,NUMBER'
--
-- ARGV[1]  the schedule's name
-- ARGV[2]  `1` to forget it whatever it is, `0` only if its tick is later than now
--
-- Returns: 1 if forgotten, 0 if not; or the error reply `BADSCHEDULE why`, having written
-- nothing.

if #ARGV ~= 2 or not fits_name(ARGV[1]) or (ARGV[2] ~= '0' and ARGV[2] ~= '1') then
  return refuse('BADSCHEDULE', 'schedule_forget takes a schedule name and 1 or 0')
end
local name = ARGV[1]
if ARGV[2] == '0' then
  local tick = string.match(redis.call('HGET', KEYS[1], name) or '', '^(%d+),')
  if not tick or tonumber(tick) <= clock_ms() then return 0 end
end
return redis.call('HDEL', KEYS[1], name)
