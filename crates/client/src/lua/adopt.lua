-- adopt: the parent's side of a child job (`wasmgear:job/jobs`). The child may be of another
-- function, so each step is a call of its own on the parent's: asked first (may the parent
-- have another child?), then told the child's id once it is enqueued. Once a parent's
-- cancel is asked for, or it has ended, it may have no new child: the first step says so,
-- and the second says so too (the cancel came in between), so that the caller cancels the
-- child it has just enqueued; the child is listed all the same, for whoever cancels the
-- parent's children.
--
-- KEYS: jobs stats events
-- ARGV[1]  the function name (the parent's)
-- ARGV[2]  the parent's job number
-- ARGV[3]  the child's id (`G:N`) to list; '' to ask first
-- ARGV[4]  optional: 'group' to have the parent's group answered too (its children join it)
--
-- Returns: {children, status}: how many children the parent lists (afterwards), and
--          'running' when it may have children; 'cancelling' when its cancel has been
--          asked for; its state when it is not running (`queued`, ..., `succeeded`, ...);
--          'full' when it lists MAX_CHILDREN already (asking only: nothing is listed). Or
--          the error reply `NOJOB` when there is no such job, `BADARGS` for a child id that
--          is not one (both change nothing). With ARGV[4] 'group': {children, status, group},
--          group the parent's ('' when it has none).

local number, child = ARGV[2], ARGV[3]
if child ~= '' and not split_id(child or '') then
  return redis.error_reply('BADARGS adopt: the child must be a job id (FUNCTION:NUMBER), or empty to ask')
end
local record = load(number)
if not record then return redis.error_reply('NOJOB no such job ' .. id_of(number)) end
local children = record.children or {}
local status = record.state
if status == 'running' and record.cancel_requested_ms then status = 'cancelling' end
local function reply()
  if ARGV[4] == 'group' then return { #children, status, record.group_id or '' } end
  return { #children, status }
end
if child == '' then
  if status == 'running' and #children >= MAX_CHILDREN then status = 'full' end
  return reply()
end
if not contains(children, child) and #children < MAX_CHILDREN then
  children[#children + 1] = child
  record.children = children
  save(number, record)
end
return reply()
