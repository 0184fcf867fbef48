-- link: make jobs of other functions wait on jobs of this one (dependencies across
-- functions, the first of two steps; see `enqueue`). Idempotent. Many at once: a flow's
-- fan-in links its 1,000 dependencies in one call per function.
--
-- KEYS: jobs stats events reserved
--          (of the dependencies' function)
-- ARGV[1]  the dependencies' function name
-- ARGV[2..] pairs, 1..MAX_TELLS_PER_CALL of them: a dependency's number here, and the id
--          of the job waiting on it ('G:M')
--
-- Returns: per pair, 'pending' when the dependency has not ended (the dependent is now
--          recorded and will be told when it does), its final state 'succeeded', 'failed'
--          or 'cancelled' when it already ended (the caller tells the dependent itself, with
--          `resolve`; the job is held for the dependent, as for one told of its end), or 'missing' when there is no such job. A number reserved for a
--          flow's job not yet written answers 'pending' (the dependent's re-check asks
--          again) until its reservation lapses. With one pair, that state; with more, the
--          list of them in order.

local n = (#ARGV - 1) / 2
if n < 1 or n ~= math.floor(n) or n > MAX_TELLS_PER_CALL then
  return redis.error_reply('BADARGS link: 1..' .. MAX_TELLS_PER_CALL .. ' pairs of a job number and a dependent id')
end
for i = 0, n - 1 do
  if not split_id(ARGV[3 + 2 * i] or '') then
    return redis.error_reply('BADARGS link: the dependent must be a job id (FUNCTION:NUMBER)')
  end
end

-- Each record loaded once, saved once (a fan-out's dependency is named by every pair).
local loaded, changed = {}, {}
local states = {}
for i = 0, n - 1 do
  local number, dependent = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  if loaded[number] == nil then loaded[number] = load(number) or false end
  local record = loaded[number]
  if not record then
    if tonumber(redis.call('ZSCORE', K.reserved, number) or '0') > NOW then
      states[#states + 1] = 'pending'
    else
      states[#states + 1] = 'missing'
    end
  elseif ENDED[record.state] then
    -- Held for the dependent until it has ended, as if it had waited (lib.lua,
    -- tell_dependents).
    if list_add(record, 'untold', dependent) then changed[number] = true end
    states[#states + 1] = record.state
  else
    if list_add(record, 'dependents', dependent) then changed[number] = true end
    states[#states + 1] = 'pending'
  end
end
for number in pairs(changed) do save(number, loaded[number]) end
if n == 1 then return states[1] end
return states
