-- What wasmgear's qless scripts share; each script is this file followed by one operation.
-- The data are qless' own (see docs/sources.md): a job is the hash `ql:j:JID` (jid, klass,
-- data, priority, tags, state, worker, expires, queue, retries, remaining, time, failure)
-- with its history list `ql:j:JID-history` of `[when, what, details]`; queue Q keeps the
-- sorted sets `ql:q:Q-work` (score: priority minus now / 1e10, highest popped first),
-- `-locks` (lock expiry), `-scheduled` (due time), `-depends` and `-recur`. Times are the
-- caller's clock in seconds, as every qless client passes it.
--
-- The keys a script is called with are in its KEYS list; qless' layout also has keys that
-- depend on the data (other jobs, tags, failure groups, a day's statistics), which the
-- scripts build as qless' own do: the source needs one Redis server, not a Cluster.

local QL = 'ql:'

local function job_key(jid)
    return QL .. 'j:' .. jid
end

local DEFAULTS = {
    ['heartbeat'] = 60,
    ['grace-period'] = 10,
    ['jobs-history'] = 604800,
    ['jobs-history-count'] = 50000,
}

-- A number from `ql:config` (key `config`), or qless' default.
local function setting(config, name)
    return tonumber(redis.call('hget', config, name) or DEFAULTS[name] or 0) or 0
end

-- How long a lock on a job of `queue` lasts: the queue's own heartbeat, else the global one.
local function heartbeat_of(config, queue)
    local own = tonumber(redis.call('hget', config, queue .. '-heartbeat') or '')
    return own or setting(config, 'heartbeat')
end

local function history(now, jid, what, details)
    redis.call('rpush', job_key(jid) .. '-history',
        cjson.encode({math.floor(now), what, details}))
end

local function publish(channel, message)
    redis.call('publish', QL .. channel, message)
end

local function is_tracked(tracked, jid)
    return redis.call('zscore', tracked, jid) ~= false
end

local function day_of(now)
    return now - (now % 86400)
end

local function work_score(now, priority)
    return (tonumber(priority) or 0) - now / 10000000000
end

-- Adds `seconds` to a queue's statistic of the day (`wait` or `run`): count, running mean
-- and variance sum (Welford), and a histogram by second, minute, hour and day.
local function add_stat(now, queue, name, seconds)
    local key = QL .. 's:' .. name .. ':' .. day_of(now) .. ':' .. queue
    local total, mean, vk = unpack(redis.call('hmget', key, 'total', 'mean', 'vk'))
    total = tonumber(total) or 0
    mean = tonumber(mean) or 0
    vk = tonumber(vk) or 0
    total = total + 1
    local delta = seconds - mean
    mean = mean + delta / total
    vk = vk + delta * (seconds - mean)
    local whole = math.floor(seconds)
    local bucket
    if whole < 60 then
        bucket = 's' .. whole
    elseif whole < 3600 then
        bucket = 'm' .. math.floor(whole / 60)
    elseif whole < 86400 then
        bucket = 'h' .. math.floor(whole / 3600)
    else
        bucket = 'd' .. math.floor(whole / 86400)
    end
    redis.call('hincrby', key, bucket, 1)
    redis.call('hset', key, 'total', total, 'mean', mean, 'vk', vk)
end

-- Ends job `jid` of `queue` as failed in `group` (listed in `failures`, key `ql:failures`).
local function fail_job(now, jid, queue, worker, group, message, failures, tracked)
    local key = job_key(jid)
    local q = QL .. 'q:' .. queue
    redis.call('zrem', q .. '-work', jid)
    redis.call('zrem', q .. '-locks', jid)
    redis.call('zrem', q .. '-scheduled', jid)
    if worker ~= '' then
        redis.call('zrem', QL .. 'w:' .. worker .. ':jobs', jid)
    end
    history(now, jid, 'failed', {worker = worker, group = group})
    local stats = QL .. 's:stats:' .. day_of(now) .. ':' .. queue
    redis.call('hincrby', stats, 'failures', 1)
    redis.call('hincrby', stats, 'failed', 1)
    redis.call('hset', key, 'state', 'failed', 'worker', '', 'expires', '',
        'failure', cjson.encode({group = group, message = message,
            when = math.floor(now), worker = worker}))
    redis.call('sadd', failures, group)
    redis.call('lpush', QL .. 'f:' .. group, jid)
    publish('log', cjson.encode({jid = jid, event = 'failed', worker = worker,
        group = group, message = message}))
    if is_tracked(tracked, jid) then
        publish('failed', jid)
    end
end

-- Whether `worker` holds job `jid` of `queue` under pop `lease` (running there under its
-- lock, and not popped again since: the field `wasmgear-lease` names the worker's pop).
local function holds(key, worker, queue, lease)
    local state, holder, in_queue, popped =
        unpack(redis.call('hmget', key, 'state', 'worker', 'queue', 'wasmgear-lease'))
    if not state then
        return 'gone'
    end
    if state == 'running' and holder == worker and in_queue == queue and popped == lease then
        return 'held'
    end
    return 'lost'
end
