-- adopt: record a child job in its parent's record (the child was enqueued with the option
-- `parent`; its function may be another, so this is a call of its own on the parent's).
--
-- KEYS: jobs stats events
-- ARGV[1]  the function name (the parent's)
-- ARGV[2]  the parent's job number
-- ARGV[3]  the child's id (`G:N`)
--
-- Returns: how many children the parent has, or the error reply `NOJOB` when there is no
-- such job.

local number, child = ARGV[2], ARGV[3]
local record = load(number)
if not record then return redis.error_reply('NOJOB no such job ' .. id_of(number)) end
local children = record.children or {}
if not contains(children, child) then
  children[#children + 1] = child
  record.children = children
  save(number, record)
end
return #children
