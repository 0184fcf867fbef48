'use strict';

/**
 * Redis Sentinel, as the Rust client has it (crates/client/src/sentinel.rs): a
 * `redis+sentinel://` URL (`rediss+sentinel://` for TLS to the sentinels and the nodes)
 * names the sentinels watching a replicated set and the set's name (its service); the
 * primary is asked of them, and asked again when it moves.
 *
 *     redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/SERVICE[?db=N&sentinel_user=U&sentinel_password=P]
 *
 * USER:PASSWORD are the data nodes'; the sentinels' own come from `sentinel_user` and
 * `sentinel_password` (percent-decoded). A sentinel's port is 26379 unless given; an IPv6
 * address is written in brackets (`[::1]:5000`).
 *
 * What needs no server lives here: the URL read and checked (before anything connects),
 * shown with its passwords hidden, the ioredis options of a connection that follows the
 * primary (ioredis' own sentinel support, with its failover detector), and the first
 * lookup, which says what each sentinel answered when none names a primary that answers
 * as one. lib/client.js connects.
 */

const Redis = require('ioredis');

const { BadInputError } = require('./errors');

/** The port of a sentinel whose address names none. */
const DEFAULT_SENTINEL_PORT = 26379;

/** How long one sentinel (or the node it names) may take to answer before the next is asked. */
const ASK_TIMEOUT_MS = 2000;

/** The query parameters a sentinel URL takes. */
const PARAMETERS = ['db', 'sentinel_user', 'sentinel_password'];

const EXPECTED =
  'expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE' +
  '[?db=N&sentinel_user=U&sentinel_password=P], or rediss+sentinel:// for TLS';

/** The scheme of a sentinel URL (`redis+sentinel://`, `rediss+sentinel://`) and what follows it, or null. */
function splitScheme(url) {
  if (typeof url !== 'string') return null;
  for (const [scheme, tls] of [['redis+sentinel://', false], ['rediss+sentinel://', true]]) {
    if (url.startsWith(scheme)) return { scheme, tls, rest: url.slice(scheme.length) };
  }
  return null;
}

/** Whether `url` is a sentinel URL (one that parses or not). */
function isSentinelUrl(url) {
  return splitScheme(url) !== null;
}

/**
 * `text` with its `%XX` escapes decoded (as UTF-8), `+` as a space too when `plusIsSpace`
 * (a query's form encoding); a `%` not followed by two hex digits is kept as it is.
 */
function percentDecode(text, plusIsSpace = false) {
  const source = Buffer.from(plusIsSpace ? text.replace(/\+/g, ' ') : text, 'utf8');
  const bytes = [];
  const hex = (byte) => (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x46) || (byte >= 0x61 && byte <= 0x66);
  for (let i = 0; i < source.length; i += 1) {
    if (source[i] === 0x25 && i + 2 < source.length && hex(source[i + 1]) && hex(source[i + 2])) {
      bytes.push(parseInt(source.toString('latin1', i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(source[i]);
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

/** `HOST[:PORT]` or `[IPV6][:PORT]` as `{host, port}`; throws the reason. */
function parseAddress(address) {
  const bad = () => new Error(`${JSON.stringify(address)} is not a sentinel address (HOST:PORT)`);
  let host;
  let port;
  if (address.startsWith('[')) {
    const close = address.indexOf(']');
    if (close < 0) throw bad();
    host = address.slice(1, close);
    const after = address.slice(close + 1);
    if (after !== '' && !after.startsWith(':')) throw bad();
    port = after === '' ? undefined : after.slice(1);
  } else {
    const colon = address.lastIndexOf(':');
    host = colon < 0 ? address : address.slice(0, colon);
    port = colon < 0 ? undefined : address.slice(colon + 1);
  }
  if (host === '') throw bad();
  if (port === undefined) return { host, port: DEFAULT_SENTINEL_PORT };
  if (!/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) throw bad();
  return { host, port: Number(port) };
}

/**
 * What a sentinel URL says: `{sentinels: [{host, port}], service, db, tls, username,
 * password, sentinelUsername, sentinelPassword}` (the nodes' user and password, the
 * sentinels' own; undefined when not given). Null when `url` is no sentinel URL; throws
 * BadInputError, saying what is wrong (the URL shown with its passwords hidden), when it is
 * one that does not parse.
 */
function parseSentinelUrl(url) {
  const split = splitScheme(url);
  if (!split) return null;
  try {
    return parseRest(split.tls, split.rest);
  } catch (error) {
    throw new BadInputError(
      `invalid Redis Sentinel URL ${JSON.stringify(redactSentinel(url))}: ${error.message} (${EXPECTED})`,
    );
  }
}

function parseRest(tls, rest) {
  const question = rest.indexOf('?');
  const beforeQuery = question < 0 ? rest : rest.slice(0, question);
  const query = question < 0 ? '' : rest.slice(question + 1);
  const slash = beforeQuery.indexOf('/');
  const authority = slash < 0 ? beforeQuery : beforeQuery.slice(0, slash);
  const path = slash < 0 ? '' : beforeQuery.slice(slash + 1);
  const at = authority.lastIndexOf('@');
  const userinfo = at < 0 ? null : authority.slice(0, at);
  const hosts = at < 0 ? authority : authority.slice(at + 1);
  const sentinels = hosts.split(',').map(parseAddress);
  const service = path.replace(/\/+$/, '');
  if (service === '' || service.includes('/')) {
    throw new Error(
      'the path must be the name the sentinels know the set by (/SERVICE, as in ' +
        '`sentinel monitor SERVICE HOST PORT QUORUM`)',
    );
  }
  const parsed = {
    sentinels,
    service,
    db: 0,
    tls,
    username: undefined,
    password: undefined,
    sentinelUsername: undefined,
    sentinelPassword: undefined,
  };
  if (userinfo !== null) {
    const colon = userinfo.indexOf(':');
    if (colon < 0) {
      // A user name alone: Redis takes it for a password (and it is hidden as one).
      parsed.password = percentDecode(userinfo) || undefined;
    } else {
      parsed.username = percentDecode(userinfo.slice(0, colon)) || undefined;
      parsed.password = percentDecode(userinfo.slice(colon + 1)) || undefined;
    }
  }
  for (const pair of query.split('&')) {
    if (pair === '') continue;
    const equals = pair.indexOf('=');
    const name = percentDecode(equals < 0 ? pair : pair.slice(0, equals), true);
    const value = percentDecode(equals < 0 ? '' : pair.slice(equals + 1), true);
    if (name === 'db') {
      if (!/^\+?[0-9]+$/.test(value) || !Number.isSafeInteger(Number(value))) {
        throw new Error(`db must be a whole number >= 0, not ${JSON.stringify(value)}`);
      }
      parsed.db = Number(value);
    } else if (name === 'sentinel_user') {
      parsed.sentinelUsername = value;
    } else if (name === 'sentinel_password') {
      parsed.sentinelPassword = value;
    } else {
      throw new Error(`unknown parameter ${JSON.stringify(name)} (known: ${PARAMETERS.join(', ')})`);
    }
  }
  return parsed;
}

/**
 * A sentinel URL with the nodes' password and the sentinels' (`sentinel_password`)
 * replaced by `***` (a user name alone too: Redis takes it for a password). The user part
 * runs to the last `@` before the query, so that a password holding a `/` is hidden too.
 */
function redactSentinel(raw) {
  const cut = raw.indexOf('://');
  const scheme = cut < 0 ? '' : raw.slice(0, cut);
  const rest = cut < 0 ? raw : raw.slice(cut + 3);
  const question = rest.indexOf('?');
  let beforeQuery = question < 0 ? rest : rest.slice(0, question);
  const query = question < 0 ? null : rest.slice(question + 1);
  const at = beforeQuery.lastIndexOf('@');
  if (at >= 0) {
    const userinfo = beforeQuery.slice(0, at);
    const colon = userinfo.indexOf(':');
    beforeQuery = `${colon < 0 ? '***' : `${userinfo.slice(0, colon)}:***`}@${beforeQuery.slice(at + 1)}`;
  }
  let shown = `${scheme}://${beforeQuery}`;
  if (query !== null) {
    const pairs = query
      .split('&')
      .map((pair) => (pair.includes('=') && pair.split('=')[0] === 'sentinel_password' ? 'sentinel_password=***' : pair));
    shown += `?${pairs.join('&')}`;
  }
  return shown;
}

/** A host as a URL writes it (an IPv6 address in brackets). */
function bracketed(host) {
  return host.includes(':') ? `[${host}]` : host;
}

/** Whether an error (a reply) says the node is no primary now: `READONLY`. */
function saysReadOnly(error) {
  return /^READONLY\b/.test(String(error && error.message));
}

/**
 * The ioredis options of a connection to the primary the sentinels of `parsed` name,
 * following it when it moves: ioredis asks the sentinels (each in turn) and takes the node
 * only once it says it is the primary (`role:master`); its failover detector listens to the
 * sentinels for `+switch-master` and reconnects; a `READONLY` reply (a primary demoted to a
 * replica) makes it reconnect too (the command fails, and is sent again by the caller).
 * `base` holds the connection's other options (timeouts, retries); `tls`, Node's TLS
 * options for `rediss+sentinel://`, are used for the sentinels and the nodes alike.
 */
function sentinelOptions(parsed, base, tls) {
  const options = {
    ...base,
    sentinels: parsed.sentinels.map(({ host, port }) => ({ host, port })),
    name: parsed.service,
    role: 'master',
    db: parsed.db,
    username: parsed.username,
    password: parsed.password,
    sentinelUsername: parsed.sentinelUsername,
    sentinelPassword: parsed.sentinelPassword,
    sentinelCommandTimeout: ASK_TIMEOUT_MS,
    failoverDetector: true,
    reconnectOnError: (error) => (saysReadOnly(error) ? 1 : false),
  };
  if (parsed.tls) {
    options.enableTLSForSentinelMode = true;
    options.tls = { ...(tls || {}) };
    options.sentinelTLS = { ...(tls || {}) };
  }
  return options;
}

/** What went wrong talking to a sentinel or a node, in words that say what to do. */
function describe(error) {
  const text = String((error && error.message) || error);
  if ((error && error.code === 'ECONNREFUSED') || /ECONNREFUSED/.test(text)) return `connection refused (${text})`;
  if (/NOAUTH/.test(text)) {
    return (
      "it wants a password: give the nodes' in the URL (USER:PASSWORD@), the sentinels' as " +
      '?sentinel_password=... (and ?sentinel_user=...)'
    );
  }
  if (/WRONGPASS/.test(text)) return 'the user or password was refused';
  return text;
}

/**
 * Runs `body(redis)` on a connection of its own with `options` (no retries), within
 * ASK_TIMEOUT_MS; rejects with the reason the connection failed (ioredis says it in an
 * `error` event; `connect()` only rejects with "Connection is closed").
 */
async function ask(options, body, timeoutMs = ASK_TIMEOUT_MS) {
  const redis = new Redis({
    ...options,
    lazyConnect: true,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableReadyCheck: false,
    enableOfflineQueue: false,
  });
  let why = null;
  redis.on('error', (error) => {
    why = why || error;
  });
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs + 500);
  });
  try {
    return await Promise.race([
      (async () => {
        try {
          await redis.connect();
          return await body(redis);
        } catch (error) {
          // The connection's own trouble (a refused password closes it) says more than
          // the command that met it closed.
          throw why || error;
        }
      })(),
      late,
    ]);
  } finally {
    clearTimeout(timer);
    redis.disconnect();
  }
}

/**
 * Asks each sentinel of `parsed` in turn for the primary of the service, and the node it
 * names whether it is the primary (`ROLE`): resolves the first that says so, `{host,
 * port}`. Rejects with what each sentinel answered, as the Rust client words it, when none
 * names a primary that answers as one.
 */
async function findPrimary(parsed, tls) {
  const problems = [];
  const tlsOptions = parsed.tls ? { tls: { ...(tls || {}) } } : {};
  for (const { host, port } of parsed.sentinels) {
    const at = `sentinel ${bracketed(host)}:${port}`;
    let named;
    try {
      named = await ask(
        { host, port, username: parsed.sentinelUsername, password: parsed.sentinelPassword, ...tlsOptions },
        (redis) => redis.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', parsed.service),
      );
    } catch (error) {
      problems.push(`${at}: ${describe(error)}`);
      continue;
    }
    if (!Array.isArray(named) || named.length < 2) {
      problems.push(
        `${at} does not know the service ${JSON.stringify(parsed.service)} (is it the name in \`sentinel monitor\`?)`,
      );
      continue;
    }
    const primary = { host: String(named[0]), port: Number(named[1]) };
    const shown = `${bracketed(primary.host)}:${named[1]}`;
    if (!Number.isInteger(primary.port)) {
      problems.push(`${at}: a sentinel named a primary whose port is not a number (${shown})`);
      continue;
    }
    try {
      const role = await ask(
        { ...primary, username: parsed.username, password: parsed.password, db: parsed.db, ...tlsOptions },
        (redis) => redis.call('ROLE'),
      );
      if (Array.isArray(role) && String(role[0]) === 'master') return primary;
      problems.push(`${at} names ${shown}, but it says it is not the primary (a failover may be under way)`);
    } catch (error) {
      problems.push(`${at} names ${shown}, but ${describe(error)}`);
    }
  }
  throw new Error(problems.join('; '));
}

module.exports = {
  DEFAULT_SENTINEL_PORT,
  ASK_TIMEOUT_MS,
  isSentinelUrl,
  parseSentinelUrl,
  redactSentinel,
  sentinelOptions,
  saysReadOnly,
  findPrimary,
  percentDecode,
};
