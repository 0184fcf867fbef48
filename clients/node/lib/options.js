'use strict';

const { BadInputError, ConflictError } = require('./errors');
const { parseJobId } = require('./names');
const protocol = require('./protocol');
const { traceOptions } = require('./tracing');

/**
 * The limits options are checked against, read from the shipped manifest (the same the
 * Rust client, the library and the HTTP API hold a job to): MIN_PRIORITY, MAX_TAGS...
 */
const LIMITS = protocol.limits();

const PRIORITY_WORDS = Object.freeze({ low: LIMITS.PRIORITY_LOW, normal: 0, high: LIMITS.PRIORITY_HIGH });

const KNOWN = [
  'priority',
  'delayMs',
  'at',
  'attempts',
  'timeoutMs',
  'retentionMs',
  'failedRetentionMs',
  'uniq',
  'tags',
  'after',
  'onFailure',
  'group',
  'uniqForMs',
  'debounceMs',
  'throttle',
  'expiresInMs',
  'expiresAt',
  'traceparent',
  'tracestate',
];

/** The largest count the queue takes (the library's MAX_WHOLE, 2^53 - 1). */
const MAX_WHOLE = Number.MAX_SAFE_INTEGER;

/** The failure policies of a dependency edge (PROTOCOL.md, "Dependencies", "Failure policies"). */
const POLICIES = Object.freeze(['cancel', 'ignore', 'continue']);

/** The option a policy other than `cancel` is sent as, beside `after`. */
const POLICY_OPTION = Object.freeze({ ignore: 'after_ignore', continue: 'after_continue' });

/**
 * How the messages name each option: as `enqueue` takes them. A flow document names them as
 * the HTTP API does (`delay_ms`, `at_ms`...), and gives its own names (lib/flow.js).
 */
const SHOWN = Object.freeze({
  delayMs: 'delayMs',
  at: 'at',
  timeoutMs: 'timeoutMs',
  retentionMs: 'retentionMs',
  failedRetentionMs: 'failedRetentionMs',
  onFailure: 'onFailure',
});

// Unicode's control characters (category Cc), as Rust's `char::is_control`.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

function bad(text) {
  return new BadInputError(`invalid job option: ${text}`);
}

/** Checks a uniq key or tag: 1 to 200 bytes of UTF-8, no control characters. */
function checkKey(what, key) {
  if (typeof key !== 'string') {
    throw bad(`${what} ${JSON.stringify(key)} must be a string`);
  }
  const bytes = Buffer.byteLength(key, 'utf8');
  if (bytes === 0 || bytes > LIMITS.MAX_KEY_BYTES) {
    throw bad(`${what} ${JSON.stringify(key)} must be 1 to ${LIMITS.MAX_KEY_BYTES} bytes long`);
  }
  if (CONTROL.test(key)) {
    throw bad(`${what} ${JSON.stringify(key)} contains a control character`);
  }
  return key;
}

/**
 * Checks a group key (a tenant, customer or document key) as the Rust client's
 * `check_group`: 1 to MAX_KEY_BYTES bytes of printable ASCII but space, `"`, `\` and `|`
 * (the queue keeps it as is in its records and indexes). Returns it, or throws
 * BadInputError, its message after `prefix` (`invalid job option: ` by default).
 */
function checkGroup(group, prefix = 'invalid job option: ') {
  const refuse = (text) => new BadInputError(`${prefix}${text}`);
  if (typeof group !== 'string') throw refuse(`group ${JSON.stringify(group) ?? String(group)} must be a string`);
  const bytes = Buffer.byteLength(group, 'utf8');
  if (bytes === 0 || bytes > LIMITS.MAX_KEY_BYTES) {
    throw refuse(`group ${JSON.stringify(group)} must be 1 to ${LIMITS.MAX_KEY_BYTES} bytes long`);
  }
  const bad = /[^!-~]|["\\|]/u.exec(group);
  if (bad) {
    throw refuse(
      `group ${JSON.stringify(group)} holds ${JSON.stringify(bad[0])}: a group key is printable ASCII ` +
        `without spaces, '"', '\\' or '|'`,
    );
  }
  return group;
}

/** A whole number of ms in [min, max], or throws naming the option. */
function wholeMs(name, value, min, max, range) {
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw bad(`${name} ${JSON.stringify(value)} must be a whole number of milliseconds`);
  }
  if (value < min || value > max) {
    throw bad(`${name} ${value} is out of range ${range}`);
  }
  return value;
}

/**
 * The named options of `uniqForMs`, `debounceMs` and `throttle` ({limit, intervalMs}),
 * checked as the Rust client's `check_dedup`: each with `uniq` (the key it works on), one at
 * most, within bounds; `debounceMs` without `delayMs` or `at` (it is the job's delay).
 */
function dedupOptions(o, uniq, delayed, shown) {
  const given = ['uniqForMs', 'debounceMs', 'throttle'].filter((name) => o[name] !== undefined && o[name] !== null);
  if (given.length === 0) return [];
  if (uniq === undefined) throw bad(`${given[0]} works on a uniq key: give uniq too`);
  if (given.length > 1) {
    throw bad(`give one of uniqForMs, debounceMs and throttle, not ${given.join(' and ')}`);
  }
  if (given[0] === 'uniqForMs') {
    return ['uniq_for', String(wholeMs('uniqForMs', o.uniqForMs, 1, LIMITS.MAX_DURATION_MS, '1ms..=10 years'))];
  }
  if (given[0] === 'debounceMs') {
    const ms = wholeMs('debounceMs', o.debounceMs, 1, LIMITS.MAX_DURATION_MS, '1ms..=10 years');
    if (delayed) {
      throw bad(`debounceMs is the job's delay: give no ${shown.delayMs} or ${shown.at} with it`);
    }
    return ['debounce', String(ms)];
  }
  const t = o.throttle;
  if (typeof t !== 'object' || Array.isArray(t) || Object.keys(t).some((k) => !['limit', 'intervalMs'].includes(k))) {
    throw bad(`throttle ${JSON.stringify(t) ?? String(t)} must be {limit, intervalMs}: at most limit jobs per intervalMs`);
  }
  if (typeof t.limit !== 'number' || !Number.isSafeInteger(t.limit) || t.limit < 1 || t.limit > MAX_WHOLE) {
    throw bad(`throttle.limit ${JSON.stringify(t.limit) ?? String(t.limit)} is out of range 1..=${MAX_WHOLE}`);
  }
  const ms = wholeMs('throttle.intervalMs', t.intervalMs, 1, LIMITS.MAX_DURATION_MS, '1ms..=10 years');
  return ['throttle', String(t.limit), 'throttle_ms', String(ms)];
}

/** The numeric priority of `priority` (a number or low, normal, high). */
function priorityValue(priority) {
  if (typeof priority === 'string') {
    if (Object.prototype.hasOwnProperty.call(PRIORITY_WORDS, priority)) {
      return PRIORITY_WORDS[priority];
    }
    if (!/^[+-]?[0-9]+$/.test(priority)) {
      throw bad(`priority ${JSON.stringify(priority)} is neither low, normal, high nor a number`);
    }
    priority = Number(priority);
  }
  if (typeof priority !== 'number' || !Number.isInteger(priority)) {
    throw bad(`priority ${JSON.stringify(priority)} is neither low, normal, high nor a whole number`);
  }
  if (priority < LIMITS.MIN_PRIORITY || priority > LIMITS.MAX_PRIORITY) {
    throw bad(
      `priority ${priority} is out of range ${LIMITS.MIN_PRIORITY}..=${LIMITS.MAX_PRIORITY}`,
    );
  }
  return priority;
}

/**
 * Checks a job's options as the Rust client's `EnqueueOptions::validate` does (same limits;
 * `at` in the past is refused by the enqueue script, on Redis' clock) and returns them as
 * the named options of `wg2_enqueue`: NAME VALUE pairs, only what differs from the
 * defaults, in the order the Rust client sends them. Also returns the dependencies, parsed,
 * each with its failure policy (`onFailure`: `cancel` unless the option says otherwise).
 *
 * @param {object|undefined} options
 * @param {number} [nowMs] the local clock, for the far-future check of `at`
 * @param {object} [shown] how the messages name the options (SHOWN)
 * @returns {{named: string[], after: {id: string, fn: string, number: string, onFailure: string}[]}}
 */
function jobOptions(options, nowMs = Date.now(), shown = SHOWN) {
  if (options === undefined || options === null) return { named: [], after: [] };
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw bad(`the options must be an object, not ${JSON.stringify(options)}`);
  }
  for (const name of Object.keys(options)) {
    if (!KNOWN.includes(name) && options[name] !== undefined) {
      throw bad(`unknown option ${JSON.stringify(name)} (known: ${KNOWN.join(', ')})`);
    }
  }
  const o = options;
  const named = [];
  const priority = o.priority === undefined ? 0 : priorityValue(o.priority);

  let attempts;
  if (o.attempts !== undefined && o.attempts !== null) {
    if (
      typeof o.attempts !== 'number' ||
      !Number.isInteger(o.attempts) ||
      o.attempts < 1 ||
      o.attempts > LIMITS.MAX_ATTEMPTS
    ) {
      throw bad(`attempts ${JSON.stringify(o.attempts)} is out of range 1..=${LIMITS.MAX_ATTEMPTS}`);
    }
    attempts = o.attempts;
  }
  let timeout;
  if (o.timeoutMs !== undefined && o.timeoutMs !== null) {
    timeout = wholeMs(shown.timeoutMs, o.timeoutMs, 1, LIMITS.MAX_DURATION_MS, '1ms..=10 years');
  }
  let retention = LIMITS.DEFAULT_RETENTION_MS;
  if (o.retentionMs !== undefined && o.retentionMs !== null) {
    retention = wholeMs(
      shown.retentionMs,
      o.retentionMs,
      LIMITS.MIN_RETENTION_MS,
      LIMITS.MAX_DURATION_MS,
      `${LIMITS.MIN_RETENTION_MS / 1000}s..=10 years`,
    );
  }
  let failedRetention = LIMITS.DEFAULT_FAILED_RETENTION_MS;
  if (o.failedRetentionMs !== undefined && o.failedRetentionMs !== null) {
    failedRetention = wholeMs(
      shown.failedRetentionMs,
      o.failedRetentionMs,
      0,
      LIMITS.MAX_DURATION_MS,
      '0..=10 years',
    );
  }
  let uniq;
  if (o.uniq !== undefined && o.uniq !== null) uniq = checkKey('uniq', o.uniq);
  let group;
  if (o.group !== undefined && o.group !== null) group = checkGroup(o.group);
  let tags = [];
  if (o.tags !== undefined && o.tags !== null) {
    if (!Array.isArray(o.tags)) throw bad('tags must be an array of strings');
    if (o.tags.length > LIMITS.MAX_TAGS) {
      throw bad(`tags: ${o.tags.length} tags are more than the limit of ${LIMITS.MAX_TAGS}`);
    }
    tags = o.tags.map((tag) => checkKey('tag', tag));
  }
  let after = [];
  if (o.after !== undefined && o.after !== null) {
    if (!Array.isArray(o.after)) throw bad('after must be an array of job ids');
    if (o.after.length > LIMITS.MAX_DEPENDENCIES) {
      throw bad(
        `after: ${o.after.length} dependencies are more than the limit of ${LIMITS.MAX_DEPENDENCIES}`,
      );
    }
    after = o.after.map((id) => {
      try {
        return parseJobId(id, 'dependency (option after)');
      } catch (e) {
        throw bad(e.message);
      }
    });
  }
  let delay = 0;
  if (o.delayMs !== undefined && o.delayMs !== null) {
    delay = wholeMs(shown.delayMs, o.delayMs, 0, LIMITS.MAX_DURATION_MS, '0..=10 years');
  }
  let at;
  if (o.at !== undefined && o.at !== null) {
    if (delay !== 0) throw bad(`give ${shown.delayMs} or ${shown.at} (a time to run at), not both`);
    if (!(o.at instanceof Date) || Number.isNaN(o.at.getTime())) {
      throw bad(`${shown.at} must be a valid Date, not ${JSON.stringify(o.at)}`);
    }
    at = o.at.getTime();
    if (at <= 0) throw bad(`${shown.at} (the time to run at) is not after 1970`);
    // Too far ahead by this clock: a conflict with the time, as a time already passed by
    // the queue's clock is.
    if (at > nowMs + LIMITS.MAX_DURATION_MS) {
      throw new ConflictError(
        `invalid job option: ${shown.at} (the time to run at) is more than 10 years ahead; give a nearer one`,
      );
    }
  }
  // The policies of dependencies whose failure does not cancel the job: each names one of
  // `after` (the Rust client's `on_failure`).
  for (const dependency of after) dependency.onFailure = 'cancel';
  if (o.onFailure !== undefined && o.onFailure !== null) {
    if (typeof o.onFailure !== 'object' || Array.isArray(o.onFailure)) {
      throw bad(
        `${shown.onFailure} must be an object mapping a dependency's id to ${POLICIES.join(', ')}`,
      );
    }
    for (const [key, policy] of Object.entries(o.onFailure)) {
      if (policy === undefined) continue;
      let id;
      try {
        id = parseJobId(key, `dependency (option ${shown.onFailure})`).id;
      } catch (e) {
        throw bad(e.message);
      }
      if (!POLICIES.includes(policy)) {
        throw bad(
          `${shown.onFailure} ${JSON.stringify(policy)} of ${id} is none of ${POLICIES.join(', ')}`,
        );
      }
      const named = after.filter((dependency) => dependency.id === id);
      if (named.length === 0) {
        throw bad(`${shown.onFailure} names ${id}, which is not a dependency (add it to after)`);
      }
      for (const dependency of named) dependency.onFailure = policy;
    }
  }

  if (priority !== 0) named.push('priority', String(priority));
  if (attempts !== undefined) named.push('attempts', String(attempts));
  if (timeout !== undefined) named.push('timeout', String(timeout));
  if (retention !== LIMITS.DEFAULT_RETENTION_MS) named.push('retention', String(retention));
  if (failedRetention !== LIMITS.DEFAULT_FAILED_RETENTION_MS) {
    named.push('failed_retention', String(failedRetention));
  }
  if (delay !== 0) named.push('delay', String(delay));
  if (at !== undefined) named.push('at', String(at));
  if (uniq !== undefined) named.push('uniq', uniq);
  for (const tag of tags) named.push('tag', tag);
  for (const dependency of after) named.push('after', dependency.id);
  const policed = new Set();
  for (const dependency of after) {
    const option = POLICY_OPTION[dependency.onFailure];
    if (option && !policed.has(dependency.id)) {
      named.push(option, dependency.id);
      policed.add(dependency.id);
    }
  }
  if (group !== undefined) named.push('group', group);
  named.push(...dedupOptions(o, uniq, delay !== 0 || at !== undefined, shown));
  named.push(...expiryOptions(o, shown));
  // The trace context the job carries (`traceparent`, `tracestate`): after the deadline,
  // as the Rust client sends it; without one, the client's own (lib/tracing.js).
  named.push(...traceOptions(o));
  return { named, after };
}

/**
 * The named option of `expiresInMs` (1ms..=10 years from now, by Redis' clock) or
 * `expiresAt` (a Date or ms since the epoch, after 1970; one Redis' clock has passed is
 * refused by the enqueue script, CONFLICT), one at most: a job not started by then ends
 * `expired` and never runs. Sent after every other option, as the Rust client sends them.
 */
function expiryOptions(o, shown = SHOWN) {
  const inName = shown.expiresInMs ?? 'expiresInMs';
  const atName = shown.expiresAt ?? 'expiresAt';
  const given = (v) => v !== undefined && v !== null;
  if (given(o.expiresInMs) && given(o.expiresAt)) throw bad(`give ${inName} or ${atName}, not both`);
  if (given(o.expiresInMs)) {
    return ['expires_in', String(wholeMs(inName, o.expiresInMs, 1, LIMITS.MAX_DURATION_MS, '1ms..=10 years'))];
  }
  if (given(o.expiresAt)) {
    let ms;
    if (o.expiresAt instanceof Date) ms = o.expiresAt.getTime();
    else if (typeof o.expiresAt === 'number') ms = o.expiresAt;
    if (ms === undefined || !Number.isSafeInteger(ms)) {
      throw bad(`${atName} must be a valid Date or whole ms since the epoch, not ${JSON.stringify(o.expiresAt)}`);
    }
    if (ms <= 0) throw bad(`${atName} (the time to start by) is not after 1970`);
    return ['expires_at', String(ms)];
  }
  return [];
}

/**
 * The input as bytes: a Buffer (or any Uint8Array) as is, a string as UTF-8.
 * @returns {Buffer}
 */
function inputBytes(input, maxBytes) {
  let bytes;
  if (Buffer.isBuffer(input)) bytes = input;
  else if (input instanceof Uint8Array) bytes = Buffer.from(input.buffer, input.byteOffset, input.byteLength);
  else if (typeof input === 'string') bytes = Buffer.from(input, 'utf8');
  else if (input === undefined || input === null) bytes = Buffer.alloc(0);
  else {
    throw new BadInputError(
      `invalid input: give a Buffer or a string, not ${typeof input} (JSON.stringify an object first)`,
    );
  }
  if (bytes.length > maxBytes) {
    throw new BadInputError(
      `invalid input: ${bytes.length} bytes are larger than the limit of ${maxBytes} bytes`,
    );
  }
  return bytes;
}

/** The options `retry` takes. */
const RETRY_OPTIONS = ['fresh'];

/**
 * The arguments `retry` takes after the job for the options `{fresh}` (as the Rust client's
 * `RetryOptions`): `fresh` (the job's checkpoint is dropped, so that it starts over rather
 * than resuming), or none. Options that are not an object, an unknown one or a `fresh` that
 * is not true or false are refused (BadInputError) before any call.
 */
function retryArgs(options) {
  const refuse = (text) => new BadInputError(`invalid retry option: ${text}`);
  if (options === undefined || options === null) return [];
  if (typeof options !== 'object' || Array.isArray(options) || ArrayBuffer.isView(options)) {
    throw refuse(`the options must be an object, not ${JSON.stringify(options) ?? String(options)}`);
  }
  for (const name of Object.keys(options)) {
    if (!RETRY_OPTIONS.includes(name) && options[name] !== undefined) {
      throw refuse(`unknown option ${JSON.stringify(name)} (known: ${RETRY_OPTIONS.join(', ')})`);
    }
  }
  const { fresh = false } = options;
  if (typeof fresh !== 'boolean') {
    throw refuse(`fresh ${JSON.stringify(fresh) ?? String(fresh)} must be true or false`);
  }
  return fresh ? ['fresh'] : [];
}

module.exports = {
  LIMITS,
  POLICIES,
  POLICY_OPTION,
  CONTROL,
  jobOptions,
  inputBytes,
  checkKey,
  checkGroup,
  priorityValue,
  retryArgs,
};
