'use strict';

/**
 * A function's settings and its groups, as the Rust client has them
 * (crates/client/src/admin.rs, `Client::configure` and `config`; groups.rs,
 * `configure_group` and `groups`). What needs no server lives here: the settings checked
 * and written as `configure` and `configure_group` take them, and the replies read.
 * lib/client.js does the calls.
 *
 * A function's settings are shared by all workers: `paused`, `concurrency`, `rateLimit`,
 * `keepFinished`, the default limits of each of its groups, `groupConcurrency` and
 * `groupRateLimit`, and `minReplicas` (how many replicas must confirm each enqueue of its
 * jobs and each completion; a client's or a worker's own setting may ask for more), and
 * `encrypt` (it stores only encrypted input: lib/encryption.js). A job enqueued with a `group` (a tenant, customer or document key) is
 * leased round robin with the other groups' jobs, each group within its own limits (set with
 * `configureGroup`, over the function's defaults), and may be paused on its own. A setting
 * left out (undefined) is not changed; `null` clears it (the default applies again).
 */

const { BadInputError } = require('./errors');
const { LIMITS, checkGroup } = require('./options');

/** The largest count a setting may hold (the library's MAX_WHOLE, 2^53 - 1). */
const MAX_WHOLE = Number.MAX_SAFE_INTEGER;
/** The most groups one `groups` call lists (crates/proto/src/limits.rs; not in the manifest). */
const MAX_GROUPS_LISTED = 1000;

const SETTINGS = [
  'paused',
  'concurrency',
  'rateLimit',
  'keepFinished',
  'groupConcurrency',
  'groupRateLimit',
  'minReplicas',
  'encrypt',
];
const GROUP_SETTINGS = ['concurrency', 'rateLimit', 'paused'];
const GROUPS_OPTIONS = ['limit', 'group'];

const isObject = (value) =>
  value !== null && typeof value === 'object' && !Array.isArray(value) && !ArrayBuffer.isView(value);
const shown = (value) => JSON.stringify(value) ?? String(value);

/** Refuses what `settings` has beside `known` (and a `settings` that is no object). */
function knownSettings(settings, known, refuse) {
  if (settings === undefined || settings === null) return {};
  if (!isObject(settings)) throw refuse(`the settings must be an object, not ${shown(settings)}`);
  for (const name of Object.keys(settings)) {
    if (!known.includes(name) && settings[name] !== undefined) {
      throw refuse(`unknown setting ${JSON.stringify(name)} (known: ${known.join(', ')})`);
    }
  }
  return settings;
}

/** A count as sent ('' clears it); `zero` says why 0 is refused. */
function count(name, value, zero, refuse) {
  if (value === null) return '';
  if (value === 0) throw refuse(zero);
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    throw refuse(`${name} ${shown(value)} must be a whole number in 1..=${MAX_WHOLE}, or null to clear it`);
  }
  return String(value);
}

/** A rate limit's two settings and their values ('' clears them). */
function rate(limitName, intervalName, name, value, refuse) {
  if (value === null) return [limitName, '', intervalName, ''];
  if (!isObject(value) || Object.keys(value).some((k) => !['limit', 'intervalMs'].includes(k))) {
    throw refuse(`${name} ${shown(value)} must be {limit, intervalMs}, or null to clear it`);
  }
  const { limit, intervalMs } = value;
  if (limit === 0 || intervalMs === 0) {
    throw refuse('a rate limit needs at least 1 job per interval of at least 1ms');
  }
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1) {
    throw refuse(`${name}.limit ${shown(limit)} must be a whole number in 1..=${MAX_WHOLE}`);
  }
  if (
    typeof intervalMs !== 'number' ||
    !Number.isSafeInteger(intervalMs) ||
    intervalMs < 1 ||
    intervalMs > LIMITS.MAX_DURATION_MS
  ) {
    throw refuse(`${name}.intervalMs ${shown(intervalMs)} is out of range 1ms..=10 years`);
  }
  return [limitName, String(limit), intervalName, String(intervalMs)];
}

function paused(value, refuse) {
  if (typeof value !== 'boolean') throw refuse(`paused ${shown(value)} must be true or false`);
  return value ? '1' : '';
}

/**
 * The SETTING VALUE pairs of `configure` for `settings` (those given), checked as the Rust
 * client checks them.
 */
function settingsArgs(settings) {
  const refuse = (text) => new BadInputError(`invalid setting: ${text}`);
  const s = knownSettings(settings, SETTINGS, refuse);
  const args = [];
  if (s.paused !== undefined) args.push('paused', paused(s.paused, refuse));
  if (s.concurrency !== undefined) {
    args.push('concurrency', count('concurrency', s.concurrency,
      'a concurrency cap of 0 would stop the queue; pause it instead ({paused: true})', refuse));
  }
  if (s.rateLimit !== undefined) {
    args.push(...rate('rate_limit', 'rate_interval_ms', 'rateLimit', s.rateLimit, refuse));
  }
  if (s.keepFinished !== undefined) {
    args.push('keep_finished', count('keepFinished', s.keepFinished,
      'keep at least 1 finished job (results would vanish at once)', refuse));
  }
  if (s.groupConcurrency !== undefined) {
    args.push('group_concurrency', count('groupConcurrency', s.groupConcurrency,
      'a group concurrency of 0 would stop every group; pause the function or a group instead', refuse));
  }
  if (s.groupRateLimit !== undefined) {
    args.push(...rate('group_rate_limit', 'group_rate_interval_ms', 'groupRateLimit', s.groupRateLimit, refuse));
  }
  if (s.minReplicas !== undefined) args.push('min_replicas', replicas(s.minReplicas, refuse));
  if (s.encrypt !== undefined) {
    if (typeof s.encrypt !== 'boolean') throw refuse(`encrypt ${shown(s.encrypt)} must be true or false`);
    args.push('encrypt', s.encrypt ? '1' : '');
  }
  return args;
}

/** The `min_replicas` setting as sent: 1 to LIMITS.MAX_MIN_REPLICAS ('' clears it: none asked). */
function replicas(value, refuse) {
  if (value === null) return '';
  if (
    typeof value !== 'number' ||
    !Number.isSafeInteger(value) ||
    value < 1 ||
    value > LIMITS.MAX_MIN_REPLICAS
  ) {
    throw refuse(
      `minReplicas ${shown(value)} must be 1 to ${LIMITS.MAX_MIN_REPLICAS} (or null to ask for none)`,
    );
  }
  return String(value);
}

/** The group key and the SETTING VALUE pairs of `configure_group`, checked. */
function groupArgs(group, settings) {
  const refuse = (text) => new BadInputError(`invalid group setting: ${text}`);
  checkGroup(group, 'invalid group setting: ');
  const s = knownSettings(settings, GROUP_SETTINGS, refuse);
  const args = [group];
  if (s.paused !== undefined) args.push('paused', paused(s.paused, refuse));
  if (s.concurrency !== undefined) {
    args.push('concurrency', count('concurrency', s.concurrency,
      `a concurrency of 0 would stop group ${JSON.stringify(group)}; pause it instead`, refuse));
  }
  if (s.rateLimit !== undefined) {
    args.push(...rate('rate_limit', 'rate_interval_ms', 'rateLimit', s.rateLimit, refuse));
  }
  return args;
}

/** The ARGV of `groups` for `{limit, group}`, checked: the most groups, and one group or ''. */
function groupsArgs(options) {
  const refuse = (text) => new BadInputError(`invalid groups option: ${text}`);
  if (options !== undefined && options !== null && !isObject(options)) {
    throw refuse(`the options must be an object, not ${shown(options)}`);
  }
  const o = options ?? {};
  for (const name of Object.keys(o)) {
    if (!GROUPS_OPTIONS.includes(name) && o[name] !== undefined) {
      throw refuse(`unknown option ${JSON.stringify(name)} (known: ${GROUPS_OPTIONS.join(', ')})`);
    }
  }
  const limit = o.limit ?? 20;
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1 || limit > MAX_GROUPS_LISTED) {
    throw refuse(`list 1 to ${MAX_GROUPS_LISTED} groups, not ${shown(limit)}`);
  }
  const group = o.group ?? null;
  if (group !== null) checkGroup(group, 'invalid groups option: ');
  return [String(limit), group ?? ''];
}

/** A setting's text as a whole number, or null. */
function number(text) {
  if (text === undefined || text === null || !/^[0-9]+$/.test(String(text))) return null;
  const n = Number(text);
  return Number.isSafeInteger(n) ? n : null;
}

/** A rate limit from its two settings' texts (null unless both are numbers). */
function rateOf(limit, intervalMs) {
  const l = number(limit);
  const ms = number(intervalMs);
  return l === null || ms === null ? null : { limit: l, intervalMs: ms };
}

/** A function's settings from its `config` hash (an object, or `configure`'s flat list). */
function readConfig(reply) {
  let all = reply || {};
  if (Array.isArray(reply)) {
    all = {};
    for (let i = 0; i + 1 < reply.length; i += 2) all[String(reply[i])] = String(reply[i + 1]);
  }
  return {
    paused: all.paused === '1',
    concurrency: number(all.concurrency),
    rateLimit: rateOf(all.rate_limit, all.rate_interval_ms),
    keepFinished: number(all.keep_finished),
    groupConcurrency: number(all.group_concurrency),
    groupRateLimit: rateOf(all.group_rate_limit, all.group_rate_interval_ms),
    minReplicas: number(all.min_replicas),
    encrypt: all.encrypt === '1',
  };
}

/**
 * A group's own settings from the queue's text `CONCURRENCY|RATE_LIMIT|RATE_INTERVAL_MS|PAUSED`
 * ('' where it has none; a rate without its interval is none).
 */
function groupConfig(text) {
  const parts = String(text ?? '').split('|');
  return {
    concurrency: number(parts[0] || null),
    rateLimit: rateOf(parts[1] || null, parts[2] || null),
    paused: parts[3] === '1',
  };
}

/** The reply of `groups` as {groups, truncated, ungroupedReady, listed}. */
function groupsOverview(reply) {
  const [groups, truncated, ungrouped, rows] = reply;
  return {
    groups: Number(groups),
    truncated: Number(truncated) === 1,
    ungroupedReady: Number(ungrouped),
    listed: (rows || []).map(([group, ready, running, own, waits]) => ({
      group: String(group),
      ready: Number(ready),
      running: Number(running),
      config: groupConfig(own),
      rateLimitedUntil: Number(waits) > 0 ? new Date(Number(waits)) : null,
    })),
  };
}

module.exports = {
  MAX_WHOLE,
  MAX_GROUPS_LISTED,
  settingsArgs,
  groupArgs,
  groupsArgs,
  readConfig,
  groupConfig,
  groupsOverview,
};
