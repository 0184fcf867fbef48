-- deploy_activate: make a stored version of a function its current version.
--
-- KEYS[1]  wg:{deploy}:versions  hash     `FUNCTION VERSION` -> the record (JSON)
-- KEYS[2]  wg:{deploy}:current   hash     function -> current version
-- KEYS[3]  wg:{deploy}:history   hash     function -> its versions, current last (JSON array)
-- KEYS[4]  wg:{deploy}:events    channel  `FUNCTION VERSION` after each change
--
-- ARGV[1]  the function
-- ARGV[2]  the version, or a prefix of it that only one stored version of it has
--
-- Returns: {'ok', VERSION}, {'missing', why} (no such version) or {'refused', why}.

local fn, wanted = ARGV[1], ARGV[2]
if not fits_name(fn) or type(wanted) ~= 'string' or wanted == '' then
  return { 'refused', 'give a function name and a version (or a prefix of it)' }
end
local version, matches, elsewhere = nil, 0, {}
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local f, v = string.match(field, '^(%S+) (%S+)$')
  if v and string.sub(v, 1, #wanted) == wanted then
    if f == fn then
      if v == wanted then
        version, matches = v, 1
        break
      end
      version, matches = v, matches + 1
    else
      elsewhere[#elsewhere + 1] = f
    end
  end
end
if matches > 1 then
  return { 'refused', 'more than one deployed version of ' .. fn .. ' starts with ' .. wanted .. ': give more of it' }
end
if matches == 0 and #elsewhere > 0 then
  table.sort(elsewhere)
  return { 'refused', 'version ' .. wanted .. ' serves ' .. table.concat(elsewhere, ', ') .. ', not ' .. fn }
end
if matches == 0 then
  return { 'missing', 'no deployed version ' .. wanted .. ' of ' .. fn .. ' (`wasmgear deploy --list` shows the versions kept)' }
end
deploy_make_current(KEYS, fn, version)
return { 'ok', version }
