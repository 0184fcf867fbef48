-- workers: what every live worker advertises.
--
-- KEYS[1]  wg:{workers}:expiry  zset  worker id scored by when its entry expires (ms)
-- KEYS[2]  wg:{workers}:info    hash  worker id -> its advertisement (JSON)
--
-- Returns: array of {id, advertisement, expires_ms} for the live workers, soonest expiry first.

local expiry_key, info_key = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local live = {}
local entries = redis.call('ZRANGEBYSCORE', expiry_key, now, '+inf', 'WITHSCORES')
for i = 1, #entries, 2 do
  local ad = redis.call('HGET', info_key, entries[i])
  if ad then live[#live + 1] = { entries[i], ad, tonumber(entries[i + 1]) } end
end
return live
