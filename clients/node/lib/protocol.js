'use strict';

/**
 * The protocol files this package ships (generated from the Rust build, never edited by
 * hand): `protocol/wasmgear_v2.lua`, the Redis Functions library the workers run, and
 * `protocol/manifest.json`, which names its functions and the keys each takes and carries
 * the limits a client checks before it calls (crates/proto/src/limits.rs is their one home).
 */

const fs = require('node:fs');
const path = require('node:path');

const DIR = path.join(__dirname, '..', 'protocol');

let cached;

/** The manifest and library text, read once. */
function load() {
  if (cached) return cached;
  const manifest = JSON.parse(fs.readFileSync(path.join(DIR, 'manifest.json'), 'utf8'));
  const library = fs.readFileSync(path.join(DIR, `${manifest.library}.lua`), 'utf8');
  for (const field of ['library', 'prefix', 'version', 'key_prefix', 'functions_key', 'functions', 'limits']) {
    if (manifest[field] === undefined) {
      throw new Error(`protocol/manifest.json has no ${field}: the package is damaged`);
    }
  }
  cached = { manifest, library };
  return cached;
}

/**
 * The manifest's limits, frozen, by their names in upper case (`max_tags` as `MAX_TAGS`):
 * the bounds options are checked against, the timeouts, the size of one `enqueue` call.
 */
function limits() {
  const loaded = load();
  if (!loaded.limits) {
    const out = {};
    for (const [name, value] of Object.entries(loaded.manifest.limits)) {
      if (!Number.isSafeInteger(value)) {
        throw new Error(`protocol/manifest.json has a limit ${name} that is not a whole number: the package is damaged`);
      }
      out[name.toUpperCase()] = value;
    }
    loaded.limits = Object.freeze(out);
  }
  return loaded.limits;
}

/** The key of suffix `suffix` of function `fn`: `wg:{F}:suffix`. */
function queueKey(fn, suffix) {
  return load().manifest.key_prefix.replace('FUNCTION', fn) + suffix;
}

/**
 * How to call library function `name` on function `fn`'s queue: the command (`FCALL` or
 * `FCALL_RO`), the Redis function's name, and its keys in order.
 */
function callOn(name, fn) {
  const { manifest } = load();
  const spec = manifest.functions[name];
  if (!spec || !Array.isArray(spec.keys)) {
    throw new Error(`the protocol has no queue function ${JSON.stringify(name)}`);
  }
  return {
    command: spec.read_only ? 'FCALL_RO' : 'FCALL',
    name: manifest.prefix + name,
    keys: spec.keys.map((suffix) => queueKey(fn, suffix)),
  };
}

/** The channel of function `fn`'s events. */
function eventsChannel(fn) {
  return queueKey(fn, 'events');
}

/** The pattern of every function's events channel. */
function allEventsPattern() {
  return queueKey('*', 'events');
}

/** The function whose events channel `channel` is, or undefined. */
function functionOfChannel(channel) {
  const prefix = load().manifest.key_prefix;
  const [before, after] = prefix.split('FUNCTION');
  const tail = `${after}events`;
  if (!channel.startsWith(before) || !channel.endsWith(tail)) return undefined;
  const fn = channel.slice(before.length, channel.length - tail.length);
  return fn.length > 0 ? fn : undefined;
}

module.exports = { load, limits, queueKey, callOn, eventsChannel, allEventsPattern, functionOfChannel, DIR };
