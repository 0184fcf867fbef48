-- pop: a qless worker's pop of queue ARGV[2], taking only jobs whose klass names a function
-- asked for. As qless does it, in this order: the queue's expired locks (the first expiry of
-- a lock is only a warning, `lock_lost` to its worker, and extends it by `grace-period`;
-- the next takes one retry off the job, fails it when none is left, and hands it over),
-- recurring jobs that are due, scheduled jobs that are due, then waiting jobs by priority.
-- A paused queue gives nothing; `QUEUE-max-concurrency` caps the jobs running.
-- KEYS[1] ql:q:Q-work  KEYS[2] ql:q:Q-locks  KEYS[3] ql:q:Q-scheduled  KEYS[4] ql:q:Q-recur
-- KEYS[5] ql:config  KEYS[6] ql:paused_queues  KEYS[7] ql:workers  KEYS[8] ql:w:W:jobs
-- KEYS[9] ql:tracked  KEYS[10] ql:failures
-- ARGV[1] now  ARGV[2] queue  ARGV[3] worker  ARGV[4] most jobs in all
-- ARGV[5] most waiting jobs to look at  ARGV[6] this pop's id (kept in `wasmgear-lease`)
-- ARGV[7..] function, most jobs of it, ...
-- Returns {heartbeat seconds, {jid, function, data, retries, remaining}..., skipped jids};
-- a job's function is the last dotted segment of its klass (`jobs.reverse` is `reverse`).
local now = tonumber(ARGV[1])
local queue, worker = ARGV[2], ARGV[3]
local room = tonumber(ARGV[4])
local scan = tonumber(ARGV[5])
local wanted = {}
for i = 7, #ARGV, 2 do
    wanted[ARGV[i]] = tonumber(ARGV[i + 1])
end
local heartbeat = heartbeat_of(KEYS[5], queue)
if redis.call('sismember', KEYS[6], queue) == 1 then
    return {tostring(heartbeat), {}, {}}
end
redis.call('zadd', KEYS[7], now, worker)
local cap = tonumber(redis.call('hget', KEYS[5], queue .. '-max-concurrency') or 0) or 0
if cap > 0 then
    local running = redis.call('zcount', KEYS[2], now, '+inf')
    room = math.min(room, math.max(0, cap - running))
end
if room <= 0 then
    return {tostring(heartbeat), {}, {}}
end

local function function_of(klass)
    local name = string.match(klass or '', '([^.]*)$')
    if name and (wanted[name] or 0) > 0 then
        return name
    end
    return nil
end

local taken, skipped = {}, {}
local function take(jid, name)
    wanted[name] = wanted[name] - 1
    room = room - 1
    table.insert(taken, {jid, name})
end

-- Expired locks.
local grace = setting(KEYS[5], 'grace-period')
for _, jid in ipairs(redis.call('zrangebyscore', KEYS[2], '-inf', now, 'LIMIT', 0, room)) do
    local key = job_key(jid)
    local holder, warned, klass, priority =
        unpack(redis.call('hmget', key, 'worker', 'grace', 'klass', 'priority'))
    if not klass then
        redis.call('zrem', KEYS[2], jid)
        table.insert(skipped, jid)
    else
        holder = holder or ''
        redis.call('zrem', QL .. 'w:' .. holder .. ':jobs', jid)
        local warn = warned ~= '1' or grace <= 0
        local hand_over = warned == '1' or grace <= 0
        if warn then
            if is_tracked(KEYS[9], jid) then
                publish('stalled', jid)
            end
            history(now, jid, 'timed-out')
            redis.call('hset', key, 'grace', 1)
            local lost = cjson.encode({jid = jid, event = 'lock_lost', worker = holder})
            publish('w:' .. holder, lost)
            publish('log', lost)
            redis.call('zadd', KEYS[2], now + grace, jid)
            redis.call('hincrby', QL .. 's:stats:' .. day_of(now) .. ':' .. queue, 'retries', 1)
        end
        if hand_over then
            redis.call('hdel', key, 'grace')
            local remaining = redis.call('hincrby', key, 'remaining', -1)
            if remaining < 0 then
                fail_job(now, jid, queue, holder, 'failed-retries-' .. queue,
                    'Job exhausted retries in queue "' .. queue .. '"', KEYS[10], KEYS[9])
            else
                local name = function_of(klass)
                if name and room > 0 then
                    take(jid, name)
                else
                    -- Not ours to run: back with the waiting jobs for a worker that can.
                    redis.call('zrem', KEYS[2], jid)
                    redis.call('zadd', KEYS[1], work_score(now, priority), jid)
                    redis.call('hset', key, 'state', 'waiting', 'worker', '', 'expires', 0)
                end
            end
        end
    end
end

-- Recurring jobs due: each interval passed makes a job `JID-N` (at most `backlog` of them).
local function promote_recurring(count)
    for _, jid in ipairs(redis.call('zrangebyscore', KEYS[4], 0, now, 'LIMIT', 0, count)) do
        local recur = QL .. 'r:' .. jid
        local klass, data, priority, tags, retries, interval, backlog = unpack(redis.call(
            'hmget', recur, 'klass', 'data', 'priority', 'tags', 'retries', 'interval', 'backlog'))
        interval = tonumber(interval) or 0
        local due = math.floor(tonumber(redis.call('zscore', KEYS[4], jid)))
        backlog = tonumber(backlog) or 0
        if backlog > 0 and interval > 0 then
            local behind = (now - due) / interval
            if behind > backlog then
                due = due + math.ceil(behind - backlog) * interval
            end
        end
        local made = 0
        while due <= now and made < count and interval > 0 do
            local n = redis.call('hincrby', recur, 'count', 1)
            local child = jid .. '-' .. n
            for _, tag in ipairs(cjson.decode(tags or '[]')) do
                redis.call('zadd', QL .. 't:' .. tag, now, child)
                redis.call('zincrby', QL .. 'tags', 1, tag)
            end
            redis.call('hset', job_key(child), 'jid', child, 'klass', klass, 'data', data,
                'priority', priority, 'tags', tags, 'state', 'waiting', 'worker', '',
                'expires', 0, 'queue', queue, 'retries', retries, 'remaining', retries,
                'time', string.format('%.20f', due))
            history(due, child, 'put', {q = queue})
            redis.call('zadd', KEYS[1], work_score(due, priority), child)
            made = made + 1
            due = due + interval
        end
        redis.call('zadd', KEYS[4], due, jid)
    end
end

-- Scheduled jobs due join the waiting ones.
local function promote_scheduled(count)
    for _, jid in ipairs(redis.call('zrangebyscore', KEYS[3], 0, now, 'LIMIT', 0, count)) do
        local priority = redis.call('hget', job_key(jid), 'priority')
        redis.call('zadd', KEYS[1], work_score(now, priority), jid)
        redis.call('zrem', KEYS[3], jid)
        redis.call('hset', job_key(jid), 'state', 'waiting')
    end
end

if room > 0 then
    promote_recurring(room)
    promote_scheduled(room)
    -- Waiting jobs, highest score first, looking past those of functions not asked for.
    for _, jid in ipairs(redis.call('zrevrange', KEYS[1], 0, scan - 1)) do
        if room <= 0 then
            break
        end
        local klass = redis.call('hget', job_key(jid), 'klass')
        if not klass then
            redis.call('zrem', KEYS[1], jid)
            table.insert(skipped, jid)
        else
            local name = function_of(klass)
            if name then
                take(jid, name)
            end
        end
    end
end

local expires = now + heartbeat
local reply = {}
for _, job in ipairs(taken) do
    local jid, name = job[1], job[2]
    local key = job_key(jid)
    history(now, jid, 'popped', {worker = worker})
    local since = tonumber(redis.call('hget', key, 'time') or now) or now
    add_stat(now, queue, 'wait', now - since)
    redis.call('hset', key, 'time', string.format('%.20f', now))
    redis.call('zadd', KEYS[8], expires, jid)
    redis.call('hset', key, 'worker', worker, 'expires', expires, 'state', 'running',
        'wasmgear-lease', ARGV[6])
    redis.call('zadd', KEYS[2], expires, jid)
    redis.call('zrem', KEYS[1], jid)
    if is_tracked(KEYS[9], jid) then
        publish('popped', jid)
    end
    local data, retries, remaining = unpack(redis.call('hmget', key, 'data', 'retries', 'remaining'))
    table.insert(reply, {jid, name, data or '', tonumber(retries) or 0,
        math.floor(tonumber(remaining) or 0)})
end
return {tostring(heartbeat), reply, skipped}
