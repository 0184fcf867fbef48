'use strict';

const crypto = require('node:crypto');
const Redis = require('ioredis');

const protocol = require('./protocol');
const { checkFunction, isFunction, parseJobId } = require('./names');
const { LIMITS, jobOptions, inputBytes, retryArgs } = require('./options');
// ioredis' own error classes (its index exports only ReplyError).
const { MaxRetriesPerRequestError } = require('ioredis/built/errors');
// The class of ioredis' errors for a command aborted by a closed connection (the parent of
// MaxRetriesPerRequestError, from redis-errors, which ioredis does not export).
const AbortError = Object.getPrototypeOf(MaxRetriesPerRequestError);
const { default: ClusterAllFailedError } = require('ioredis/built/errors/ClusterAllFailedError');
const { jobFrom, jobOfFinish, progressOf } = require('./job');
const { producing, withTrace } = require('./tracing');
const {
  FLOW_KEYS,
  MAX_OUTCOMES,
  prepareFlow,
  writePlan,
  pairKey,
  placedOptions,
  flowRecord,
  flowId,
  parseFlowRecord,
  flowStatus,
  jobEnded,
  byBytes,
} = require('./flow');
const {
  BATCHES_DUE_KEY,
  CALLBACK_FIELDS,
  ENDED,
  batchKeys,
  isBatchId,
  batchId: checkBatchId,
  batchDefinition,
  batchJobs,
  parseBatch,
  callbackInput,
} = require('./batch');
const { settingsArgs, groupArgs, groupsArgs, readConfig, groupConfig, groupsOverview } = require('./settings');
const { Subscriber } = require('./subscriber');
const { isSentinelUrl, parseSentinelUrl, redactSentinel, sentinelOptions, findPrimary } = require('./sentinel');
const { minReplicasOf, enqueueSetting, enqueueWhat, invokeConfirmed } = require('./replication');
const { MAX_HEADER, encryptionOf, sealJobs, openJob, openBytes, openLog, overhead, saidSealed } = require('./encryption');
const {
  WasmgearError,
  BadInputError,
  ConflictError,
  NotFoundError,
  UnreachableError,
  JobFailedError,
  JobCancelledError,
  WaitTimeoutError,
} = require('./errors');

/** How often `enqueue` is sent again (same call id) after a failure that may pass. */
const RETRIES = 6;
/**
 * What a user who may not load the library (one made by `wasmgear acl`: it may not run
 * `FUNCTION LOAD`) is told when this version's library is not there: the Rust client's words.
 */
const MAY_NOT_LOAD =
  "the queue's library (this build's version) is not loaded on this Redis, and this Redis " +
  'user may not load it (FUNCTION LOAD): run any wasmgear command once as a user who may ' +
  '(the default user, or the admin who made the users with `wasmgear acl`), or start a ' +
  'worker as one';
/**
 * The Redis error codes (the first word of an error reply) of a server that cannot answer
 * now but may soon: loading its data, a cluster resharding or without a primary, a script
 * running too long.
 */
const TRANSIENT_REPLIES = new Set(['LOADING', 'TRYAGAIN', 'CLUSTERDOWN', 'MASTERDOWN', 'BUSY']);
/** The codes of Node's socket errors that say the network, not the server, failed. */
const NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'ENETUNREACH',
  'ECONNABORTED',
  'EAI_AGAIN',
]);
/** How many links of a batch's jobs are in flight at once. */
const IN_FLIGHT = 32;
/** The most pairs one `link` call takes (the library's MAX_TELLS_PER_CALL). */
const MAX_LINKS = 1000;
/** Lets only `Client.connect` construct a Client. */
const CONNECT = Symbol('Client.connect');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The URL with its password (or a lone user name, which Redis takes for one) hidden; a
 * sentinel URL's nodes' password and `sentinel_password` too.
 */
function redact(raw) {
  if (isSentinelUrl(raw)) return redactSentinel(raw);
  try {
    const url = new URL(raw);
    if (url.password) url.password = '***';
    else if (url.username) url.username = '***';
    else return raw;
    return url.toString();
  } catch {
    return '(a Redis URL)';
  }
}

/** The Redis error code of an error reply (`BADJOB`, `LOADING`...), or null for another error. */
function replyCode(error) {
  if (!(error instanceof Redis.ReplyError)) return null;
  const code = /^[A-Z]+\b/.exec(String(error.message));
  return code ? code[0] : null;
}

/**
 * Whether a failed command may succeed when sent again (connection trouble, not an answer),
 * decided by the error's class and code: an error reply only when its code says the server
 * is busy for now; ioredis' errors for the retries it gave up, a command aborted by a
 * closed connection and the cluster slots it could not read; Node's socket errors by their code; and the plain `Error`s ioredis rejects a
 * command with when its connection closed, its reply timed out or no node was ready (never
 * a `TypeError` or another subclass, which are mistakes, not trouble on the way).
 */
function isTransient(error) {
  if (!(error instanceof Error) || error instanceof WasmgearError) return false;
  if (error instanceof Redis.ReplyError) return TRANSIENT_REPLIES.has(replyCode(error));
  if (error instanceof AbortError || error instanceof ClusterAllFailedError) return true;
  if (typeof error.code === 'string') return NETWORK_CODES.has(error.code);
  return Object.getPrototypeOf(error) === Error.prototype;
}

function isMissingFunction(error) {
  return /Function not found/i.test(String(error && error.message));
}

/** Why connecting failed, in words that say what to do. */
function describe(error) {
  const text = String((error && error.message) || error);
  if (/ECONNREFUSED/.test(text) || (error && error.code === 'ECONNREFUSED')) {
    return `connection refused: is redis-server running there? (${text})`;
  }
  if (/NOAUTH/.test(text)) {
    return (
      'the server wants a password: give it in the URL (redis://:PASSWORD@HOST:PORT or ' +
      'redis://USER:PASSWORD@HOST:PORT)'
    );
  }
  if (/certificate|self[- ]signed|CERT_/i.test(text)) {
    return (
      `${text}: the server's TLS certificate cannot be checked; give the certificate ` +
      'authority that signed it with the connect option tls ({tls: {ca}})'
    );
  }
  if (/WRONGPASS|password|authentication/i.test(text)) {
    return 'the user or password in the URL was refused';
  }
  return `${text} (is the host right, and is it Redis, with TLS if the URL says rediss://?)`;
}

/**
 * An error of a call, as this library's errors: script refusals (`BADJOB`, `BADARGS`) are
 * bad input, `NOJOB` is not found, connection trouble is unreachable.
 */
function translate(error, url) {
  if (error instanceof WasmgearError) return error;
  const text = String((error && error.message) || error);
  const code = replyCode(error);
  if (code === 'BADJOB' || code === 'BADARGS') {
    return new BadInputError(text.slice(code.length).trim() || text, { cause: error });
  }
  if (code === 'CONFLICT') {
    return new ConflictError(text.slice(code.length).trim() || text, { cause: error });
  }
  if (code === 'NOJOB') return new NotFoundError(text, { cause: error });
  if (isTransient(error)) {
    return new UnreachableError(`cannot reach Redis at ${url}: ${describe(error)}`, { cause: error });
  }
  return new WasmgearError(`redis error: ${text}`, { cause: error });
}

/**
 * Runs `each(item)` for every item, at most `limit` at once; rejects with the first error
 * (no item is started after it).
 */
async function inParallel(items, limit, each) {
  let next = 0;
  let failed = false;
  const lane = async () => {
    while (!failed && next < items.length) {
      const item = items[next];
      next += 1;
      try {
        await each(item);
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
}

/** Runs `promise`, rejecting with `error()` if it takes longer than `ms`. */
function within(promise, ms, error) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(error()), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * A connection to a wasmgear queue for producers and operators: enqueue jobs, follow them,
 * read their results, cancel and retry them, list the queues.
 */
class Client {
  #redis;
  #isCluster;
  /** Whether the connections follow the primary that Redis Sentinel names. */
  #sentinel;
  #url;
  #maxInputBytes;
  /** `{count, timeoutMs}`: the replicas that must confirm each write of jobs (lib/replication.js). */
  #minReplicas;
  /** The KeyRing that seals the inputs this client writes and opens what it reads, or null. */
  #keys;
  /** Seal every input, not only those of the functions that store only encrypted input. */
  #encryptAll;
  /** The functions found to store only encrypted input (their `ENCRYPT` refusal). */
  #sealedFunctions = new Set();
  /** Functions this client has listed in the directory. */
  #registered = new Set();
  /** function -> call ids answered since the previous call on it (sent as `acked`). */
  #answered = new Map();
  #subscriber;
  #closed = false;

  /** Use `Client.connect`. */
  constructor(token, state) {
    if (token !== CONNECT) throw new TypeError('use Client.connect(url) to make a Client');
    this.#redis = state.redis;
    this.#isCluster = state.isCluster;
    this.#sentinel = state.sentinel;
    this.#url = state.url;
    this.#maxInputBytes = state.maxInputBytes;
    this.#minReplicas = state.minReplicas;
    this.#keys = state.keys;
    this.#encryptAll = state.encryptAll;
    this.#subscriber = new Subscriber(state.subscriberConnection);
  }

  /** Whether the server is a Redis Cluster. */
  get isCluster() {
    return this.#isCluster;
  }

  /**
   * Connects to the Redis at `url` (`redis://[USER:PASSWORD@]HOST:PORT[/DB]`, `rediss://`
   * for TLS), asks it whether it is part of a Redis Cluster (`INFO cluster`; or say so with
   * `{cluster: true}`), and loads the wasmgear Functions library if it is not loaded. A
   * `redis+sentinel://` URL (`rediss+sentinel://` for TLS) names the sentinels of a
   * replicated set and its service (lib/sentinel.js): the commands and the pub/sub
   * connection go to the primary they name, and follow it when it moves. With a key file
   * (`encryptionKeyFile`, else WASMGEAR_ENCRYPTION_KEY_FILE; read before connecting) it
   * seals the inputs of the functions that store only encrypted input (of all with
   * `encryptAll`, else WASMGEAR_ENCRYPT_ALL=1) and opens what it reads (lib/encryption.js).
   */
  static async connect(url, opts = {}) {
    if (typeof url !== 'string') {
      throw new BadInputError(
        'invalid Redis URL: give a string redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss:// for TLS',
      );
    }
    // Refused before anything connects when it does not parse.
    const sentinel = parseSentinelUrl(url);
    let parsed = null;
    if (!sentinel) {
      try {
        parsed = new URL(url);
      } catch {
        parsed = null;
      }
      if (!parsed || !['redis:', 'rediss:'].includes(parsed.protocol) || !parsed.hostname) {
        throw new BadInputError(
          `invalid Redis URL ${JSON.stringify(redact(url))}: expected ` +
            'redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss:// for TLS ' +
            '(or redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE for Redis Sentinel)',
        );
      }
    }
    if (opts === null || typeof opts !== 'object') {
      throw new BadInputError('invalid connect options: give an object');
    }
    const known = [
      'cluster',
      'connectTimeoutMs',
      'commandTimeoutMs',
      'maxInputBytes',
      'tls',
      'minReplicas',
      'minReplicasTimeoutMs',
      'encryptionKeyFile',
      'encryptAll',
    ];
    for (const name of Object.keys(opts)) {
      if (!known.includes(name)) {
        throw new BadInputError(
          `unknown connect option ${JSON.stringify(name)} (known: ${known.join(', ')})`,
        );
      }
    }
    const tlsUrl = sentinel ? sentinel.tls : parsed.protocol === 'rediss:';
    if (opts.tls !== undefined && (typeof opts.tls !== 'object' || opts.tls === null)) {
      throw new BadInputError('invalid connect option tls: give an object of TLS options (e.g. {ca})');
    }
    if (opts.tls !== undefined && !tlsUrl) {
      throw new BadInputError('invalid connect option tls: it needs a rediss:// (or rediss+sentinel://) URL');
    }
    if (sentinel && opts.cluster) {
      throw new BadInputError(
        'invalid connect option cluster: a redis+sentinel:// URL names a replicated set, not a Redis Cluster',
      );
    }
    for (const name of ['connectTimeoutMs', 'commandTimeoutMs', 'maxInputBytes']) {
      const value = opts[name];
      if (value !== undefined && !(Number.isSafeInteger(value) && value > 0)) {
        throw new BadInputError(`invalid connect option ${name}: ${JSON.stringify(value)} is not a whole number > 0`);
      }
    }
    const shown = redact(url);
    const connectTimeout = opts.connectTimeoutMs ?? LIMITS.CONNECT_TIMEOUT_MS;
    const commandTimeout = opts.commandTimeoutMs ?? LIMITS.RESPONSE_TIMEOUT_MS;
    const maxInputBytes = opts.maxInputBytes ?? LIMITS.MAX_INPUT_BYTES;
    const minReplicas = minReplicasOf(opts.minReplicas, opts.minReplicasTimeoutMs, commandTimeout);
    // The key file is read before anything connects (lib/encryption.js).
    const { keys, encryptAll } = encryptionOf(opts);
    protocol.load();
    const options = {
      lazyConnect: true,
      connectTimeout,
      commandTimeout,
      maxRetriesPerRequest: 2,
      retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2000),
      // No `CLIENT SETINFO` naming ioredis on connecting: a least-privilege user (`wasmgear
      // acl`) may not run it, and each refusal would fill Redis' ACL log.
      disableClientInfo: true,
    };
    const unreachable = (reason) => new UnreachableError(`cannot reach Redis at ${shown}: ${reason}`);
    let seed;
    if (sentinel) {
      // The sentinels asked first, each in turn, so that a failure says what each answered.
      try {
        await findPrimary(sentinel, opts.tls);
      } catch (error) {
        throw unreachable(`no sentinel named a primary that answers as one: ${error.message}`);
      }
      seed = new Redis(sentinelOptions(sentinel, options, opts.tls));
    } else {
      if (opts.tls) options.tls = opts.tls;
      seed = new Redis(url, options);
    }
    // ioredis says why a connection failed in an 'error' event; `connect()` only rejects
    // with "Connection is closed".
    let why = null;
    const noteWhy = (error) => {
      why = why || error;
    };
    seed.on('error', noteWhy);
    let info;
    try {
      await within(seed.connect(), connectTimeout + 1000, () =>
        unreachable(`no answer within ${connectTimeout} ms`),
      );
      info = await seed.info('cluster');
    } catch (error) {
      seed.disconnect();
      if (error instanceof WasmgearError) throw error;
      throw unreachable(describe(why || error));
    }
    // Later errors show as failed calls (and are sent again where that is safe).
    seed.off('error', noteWhy);
    seed.on('error', () => {});
    if (!String(info).includes('cluster_enabled:')) {
      seed.disconnect();
      throw unreachable('it answered, but not like Redis (no cluster section in INFO)');
    }
    const isCluster = !sentinel && (opts.cluster ?? /^cluster_enabled:1\s*$/m.test(String(info)));
    let redis = seed;
    if (isCluster) {
      seed.disconnect();
      const redisOptions = {
        username: decodeURIComponent(parsed.username) || undefined,
        password: decodeURIComponent(parsed.password) || undefined,
        connectTimeout,
        commandTimeout,
        disableClientInfo: true,
      };
      if (parsed.protocol === 'rediss:') {
        redisOptions.tls = { servername: parsed.hostname, ...(opts.tls || {}) };
      }
      redis = new Redis.Cluster([{ host: parsed.hostname, port: Number(parsed.port || 6379) }], {
        lazyConnect: true,
        redisOptions,
        maxRedirections: 16,
        clusterRetryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2000),
      });
      redis.on('error', () => {});
      try {
        await within(redis.connect(), connectTimeout + 1000, () =>
          unreachable(`the cluster did not answer within ${connectTimeout} ms`),
        );
      } catch (error) {
        redis.disconnect();
        if (error instanceof WasmgearError) throw error;
        throw unreachable(describe(error));
      }
    }
    // Pub/sub goes over a plain connection to the node given (in a cluster, PUBLISH reaches
    // the subscribers of every node), or to the primary the sentinels name (followed when
    // it moves: the subscriber subscribes again once the connection is back).
    const subscriberConnection = sentinel
      ? () => new Redis(sentinelOptions(sentinel, { ...options, lazyConnect: false, autoResubscribe: false }, opts.tls))
      : () => new Redis(url, { ...options, lazyConnect: false, autoResubscribe: false });
    const client = new Client(CONNECT, {
      redis,
      isCluster,
      sentinel: sentinel !== null,
      url: shown,
      maxInputBytes,
      minReplicas,
      keys,
      encryptAll,
      subscriberConnection,
    });
    try {
      await client.#ensureLibrary();
    } catch (error) {
      await client.close();
      if (error instanceof WasmgearError) throw error;
      const text = String(error.message || error);
      const hint = /unknown command/i.test(text)
        ? ' (Redis 7.0 or newer is needed: it has Functions)'
        : '';
      if (isTransient(error)) throw unreachable(describe(error));
      throw new WasmgearError(
        `the Redis at ${shown} cannot run wasmgear's function library: ${text}${hint}`,
        { cause: error },
      );
    }
    return client;
  }

  /** Loads the library unless some version of `wasmgear_v2` answers already. */
  async #ensureLibrary() {
    const { manifest } = protocol.load();
    try {
      // Within v2, the library loaded last serves everyone: another SHA is left alone.
      await this.#redis.call('FCALL', `${manifest.prefix}version`, '0');
      return;
    } catch (error) {
      if (!isMissingFunction(error)) throw error;
    }
    await this.#loadLibrary();
  }

  /**
   * `FUNCTION LOAD` of the shipped library, on every primary of a cluster. A user who may
   * not (NOPERM: one made by `wasmgear acl`) is told who may, in the Rust client's words.
   */
  async #loadLibrary() {
    const { library } = protocol.load();
    const nodes = this.isCluster ? this.#redis.nodes('master') : [this.#redis];
    await Promise.all(
      nodes.map(async (node) => {
        try {
          await node.call('FUNCTION', 'LOAD', library);
        } catch (error) {
          if (/^NOPERM/i.test(String(error.message))) {
            throw new WasmgearError(MAY_NOT_LOAD, { cause: error });
          }
          // Another client loaded it meanwhile.
          if (!/already exists/i.test(String(error.message))) throw error;
        }
      }),
    );
  }

  /**
   * `FCALL wg2_NAME` on function `fn`'s keys; loads the library and sends it once more if
   * the server answers that the function is not loaded (flushed or restarted).
   */
  async #fcall(name, fn, args, { buffers = false } = {}) {
    const call = protocol.callOn(name, fn);
    return this.#invoke(call.command, [call.name, call.keys.length, ...call.keys, fn, ...args], buffers);
  }

  /** Sends `command argv...`; once more after loading the library if it was not there. */
  async #invoke(command, argv, buffers = false) {
    return this.#sending(() =>
      buffers ? this.#redis.callBuffer(command, ...argv) : this.#redis.call(command, ...argv),
    );
  }

  /**
   * `FCALL wg2_NAME` on function `fn`'s keys and, on the same connection right after it,
   * `WAIT wanted timeoutMs` (one pipeline; on a cluster, to the node of the keys): resolves
   * `[reply, replicas]`, the call's reply and how many replicas confirmed the connection's
   * writes. Rejects with the call's error, else the WAIT's (a command aborted by a closed
   * connection: the pair is sent again by `#retrying`, the call with its call id).
   */
  async #fcallWaiting(name, fn, args, wanted, timeoutMs) {
    const call = protocol.callOn(name, fn);
    const argv = [call.name, call.keys.length, ...call.keys, fn, ...args];
    return this.#sending(async () => {
      const replies = await this.#redis
        .pipeline()
        .call(call.command, ...argv)
        .call('WAIT', String(wanted), String(timeoutMs))
        .exec();
      if (!Array.isArray(replies) || replies.length !== 2) {
        throw new WasmgearError(`a call with its WAIT answered ${JSON.stringify(replies)}, not 2 replies`);
      }
      const [[callError, reply], [waitError, replicas]] = replies;
      if (callError) throw callError;
      if (waitError) throw waitError;
      return [reply, Number(replicas)];
    });
  }

  /**
   * Runs `send()` (one command, or a pipeline); once more after loading the library if the
   * server answers that a function is not loaded (flushed, restarted, or a new primary
   * without it). Behind Redis Sentinel, sends it again (backing off, RETRIES times at most)
   * while a node that is no primary now answers `READONLY`: a command so refused did
   * nothing, and the connection is on its way to the new primary (lib/sentinel.js).
   */
  async #sending(send) {
    let loaded = false;
    let pause = 50;
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await send();
      } catch (error) {
        if (isMissingFunction(error) && !loaded) {
          loaded = true;
          await this.#loadLibrary();
          continue;
        }
        if (!this.#sentinel || replyCode(error) !== 'READONLY' || attempt >= RETRIES || this.#closed) throw error;
        await sleep(pause + Math.random() * pause);
        pause = Math.min(pause * 2, 2000);
      }
    }
  }

  /** Runs `body`, giving its errors as this library's. */
  async #guard(body) {
    if (this.#closed) throw new WasmgearError('the client is closed');
    try {
      return await body();
    } catch (error) {
      throw translate(error, this.#url);
    }
  }

  /** Sends a call that is safe to send twice again while it fails in a way that may pass. */
  async #retrying(call) {
    let pause = 50;
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await call();
      } catch (error) {
        if (attempt >= RETRIES || !isTransient(error) || this.#closed) throw error;
        await sleep(pause + Math.random() * pause);
        pause = Math.min(pause * 2, 2000);
      }
    }
  }

  /**
   * Enqueues one job of function `fn`. Returns its id and whether it is new (`created`
   * false: an unfinished job held the same uniq key, and that job is returned).
   */
  async enqueue(fn, input, options) {
    const [job] = await this.#submit(fn, [[input, options]]);
    return job;
  }

  /**
   * Enqueues many jobs of function `fn`: each item is an input (Buffer or string) or an
   * object `{input, ...options}`. Every job is checked before anything is written; the jobs
   * go in calls of ENQUEUE_BATCH (1000), each all or nothing. Returns `{id, created}` per job, in order.
   */
  async enqueueMany(fn, items) {
    if (!Array.isArray(items)) {
      throw new BadInputError('enqueueMany takes an array of inputs or {input, ...options} objects');
    }
    return this.#submit(
      fn,
      items.map((item) => {
        const object =
          item !== null && typeof item === 'object' && !Buffer.isBuffer(item) && !(item instanceof Uint8Array);
        if (!object) return [item, undefined];
        const { input, ...options } = item;
        return [input, options];
      }),
    );
  }

  /** Enqueues `[input, options]` pairs of function `fn`. */
  async #submit(fn, pairs) {
    return this.#guard(async () => {
      checkFunction(fn);
      const now = Date.now();
      const jobs = pairs.map(([input, options], i) => {
        try {
          return { input: inputBytes(input, this.#maxInputBytes), ...jobOptions(options, now) };
        } catch (error) {
          if (error instanceof BadInputError && pairs.length > 1) {
            error.message = `job ${i + 1} of the batch: ${error.message}`;
          }
          throw error;
        }
      });
      if (jobs.length === 0) return [];
      // One producer span for the write (lib/tracing.js): the jobs carry its context.
      return producing(fn, jobs.length, async (trace) => {
        // Dependencies in `fn` are checked by the script; those in other functions here (but
        // those whose failure the job tolerates: `ignore` or `continue`).
        const checked = new Set();
        for (const job of jobs) {
          for (const dependency of job.after) {
            if (dependency.fn === fn || dependency.onFailure !== 'cancel' || checked.has(dependency.id)) continue;
            await this.#checkDependency(dependency);
            checked.add(dependency.id);
          }
        }
        const enqueued = [];
        const batch = LIMITS.ENQUEUE_BATCH;
        for (let from = 0; from < jobs.length; from += batch) {
          enqueued.push(...(await this.#enqueueChunk(fn, jobs.slice(from, from + batch), from, trace)));
        }
        return enqueued;
      });
    });
  }

  /**
   * One `wg2_enqueue` call, then the links of its jobs to dependencies in other functions;
   * `offset` is the position of its first job in the batch; `trace` the context its jobs carry.
   */
  async #enqueueChunk(fn, jobs, offset, trace) {
    const { enqueued, links } = await this.#enqueueCall(fn, jobs, (i) => `job ${offset + i}`, trace);
    await this.#linkMany(links);
    return enqueued;
  }

  /**
   * One `wg2_enqueue` call of `jobs` (`{named, input}` each), confirmed by the replicas the
   * client or the function asks for (lib/replication.js: with its WAIT, sent again with its
   * call id while they fall short; NotReplicatedError after 3 sends). Every write of jobs
   * goes through here: `enqueue`, `enqueueMany`, flows, batches and their callbacks.
   * Resolves the jobs (`{id, created}`) and the links to make: `[dependent id, parsed
   * dependency]` pairs. A refusal names the job as `label(position)` does (1-based). The
   * jobs that name no trace context of their own carry `trace` (lib/tracing.js), if any.
   * With keys, the inputs are sealed (lib/encryption.js) when all are to be, or when `fn`
   * stores only encrypted input: known from an earlier refusal, or learnt from this call's
   * (`ENCRYPT`, nothing written), after which they are sent again sealed.
   */
  async #enqueueCall(fn, jobs, label, trace = null) {
    const seal = this.#keys !== null && (this.#encryptAll || this.#sealedFunctions.has(fn));
    const sealed = () => sealJobs(this.#keys, fn, jobs, async (n) => this.#fcall('reserve', fn, [String(n)]));
    try {
      return await this.#sendJobs(fn, seal ? await sealed() : jobs, label, trace);
    } catch (error) {
      if (seal || this.#keys === null || replyCode(error.cause) !== 'ENCRYPT') throw error;
      this.#sealedFunctions.add(fn);
      return this.#sendJobs(fn, await sealed(), label, trace);
    }
  }

  /** One `wg2_enqueue` call of `jobs` as they are (see `#enqueueCall`). */
  async #sendJobs(fn, jobs, label, trace) {
    const callId = crypto.randomBytes(12).toString('hex');
    const acked = this.#answered.get(fn) || [];
    this.#answered.delete(fn);
    const args = [String(1 + acked.length), 'call', callId];
    for (const id of acked) args.push('acked', id);
    args.push(String(jobs.length));
    for (const job of jobs) {
      const named = withTrace(job.named, trace);
      args.push(String(named.length / 2), ...named, job.input);
    }
    let reply;
    try {
      // The same call id: a call whose reply was lost (or whose replicas fell short) is
      // answered, not applied twice.
      reply = await invokeConfirmed(
        () => enqueueWhat(fn, jobs.length),
        this.#minReplicas,
        () => this.#retrying(() => this.#fcall('enqueue', fn, args)),
        (wanted, timeoutMs) => this.#retrying(() => this.#fcallWaiting('enqueue', fn, args, wanted, timeoutMs)),
        enqueueSetting,
      );
    } catch (error) {
      this.#answered.set(fn, [...acked, ...(this.#answered.get(fn) || [])]);
      if (replyCode(error) === 'ENCRYPT') {
        // The function stores only encrypted input; the script wrote nothing. Rust's words.
        const detail = String(error.message).slice('ENCRYPT'.length).trim();
        throw new BadInputError(`${detail} (WASMGEAR_ENCRYPTION_KEY_FILE)`, { cause: error });
      }
      const refused = /^(BADJOB|CONFLICT) job (\d+): (.*)$/s.exec(String(error.message));
      if (refused) {
        // The script names the job by its place in this call: give its place in the batch,
        // and the option concerned.
        const detail = refused[3];
        const hint = /^scheduled time/.test(detail)
          ? ' (option at: give a time ahead of the queue clock)'
          : /^dependency/.test(detail)
            ? ' (option after)'
            : '';
        const Refusal = refused[1] === 'CONFLICT' ? ConflictError : BadInputError;
        throw new Refusal(
          `invalid job option: ${label(Number(refused[2]))}: ${detail}${hint}`,
          { cause: error },
        );
      }
      throw error;
    }
    const answered = this.#answered.get(fn) || [];
    answered.push(callId);
    this.#answered.set(fn, answered);
    // Listed for operators once something was written (a refused call leaves no trace).
    await this.#register(fn);
    // The function's own min_replicas (the 4th element) was used above.
    const [numbers, created, links] = reply;
    const enqueued = numbers.map((number, i) => ({
      id: `${fn}:${number}`,
      created: String(created)[i] === '1',
    }));
    const toLink = [];
    for (let i = 0; i + 1 < links.length; i += 2) {
      const job = enqueued[Number(links[i]) - 1];
      if (!job) throw new WasmgearError(`enqueue answered a link for job ${links[i]} it was not given`);
      toLink.push([job.id, parseJobId(String(links[i + 1]))]);
    }
    return { enqueued, links: toLink };
  }

  /** Adds `fn` to the directory of functions (once per client). */
  async #register(fn) {
    if (this.#registered.has(fn)) return;
    await this.#redis.sadd(protocol.load().manifest.functions_key, fn);
    this.#registered.add(fn);
  }

  /** Refuses a dependency that does not exist or has already failed, been cancelled or expired. */
  async #checkDependency(dependency) {
    const found = await this.#get(dependency);
    if (!found) {
      throw new ConflictError(
        `invalid job option: dependency ${dependency.id} does not exist (never enqueued, or its retention is over)`,
      );
    }
    if (['failed', 'cancelled', 'expired'].includes(found.record.state)) {
      throw new ConflictError(
        `invalid job option: dependency ${dependency.id} has already ${found.record.state}, so the job could never run`,
      );
    }
  }

  /** Links `dependentId` to `dependency` (a job of another function): the first step. */
  async #link(dependentId, dependency) {
    await this.#linkMany([[dependentId, dependency]]);
  }

  /**
   * Links each `[dependent id, parsed dependency]` pair (the dependency in another function
   * than its dependent), as the Rust client's `link_many`: one `link` call per dependencies'
   * function and per MAX_LINKS pairs (a fan-in's dependencies in one function are linked in
   * one call), then tells the dependents of those that have already ended, together.
   */
  async #linkMany(pairs) {
    const byFunction = new Map();
    for (const pair of pairs) {
      const fn = pair[1].fn;
      if (!byFunction.has(fn)) byFunction.set(fn, []);
      byFunction.get(fn).push(pair);
    }
    const ended = [];
    for (const [fn, all] of byFunction) {
      for (let from = 0; from < all.length; from += MAX_LINKS) {
        const chunk = all.slice(from, from + MAX_LINKS);
        const reply = await this.#fcall(
          'link',
          fn,
          chunk.flatMap(([dependentId, dependency]) => [dependency.number, dependentId]),
        );
        // One pair is answered with its state, more with the list of them in order.
        const states = chunk.length === 1 ? [reply] : reply;
        if (!Array.isArray(states) || states.length !== chunk.length) {
          throw new WasmgearError(`link answered ${JSON.stringify(reply)} for ${chunk.length} pairs`);
        }
        chunk.forEach(([dependentId, dependency], k) => {
          const state = String(states[k]);
          if (state !== 'pending') ended.push(dependentId, dependency.id, state);
        });
      }
    }
    await this.#deliver(ended);
  }

  /**
   * Runs `resolve` for each (dependent, dependency, state) triple of `notify`, and for those
   * its replies name in turn. A dependent `batch ID` is the job's batch (`batch_done`, then
   * `told` lets the job go); a dependent `release ID` is a dependency the (ended) job no
   * longer holds (`told` on its function), as the Rust client's `deliver`.
   */
  async #deliver(notify) {
    const todo = [...notify].map(String);
    while (todo.length >= 3) {
      const state = todo.pop();
      const dependencyId = todo.pop();
      const dependentId = todo.pop();
      let more = [];
      let told = null;
      if (dependentId.startsWith('batch ')) {
        await this.#batchDone(dependentId.slice('batch '.length), dependencyId, state);
        told = [dependencyId, dependentId];
      } else if (dependentId.startsWith('release ')) {
        told = [dependentId.slice('release '.length), dependencyId];
      } else {
        let dependent;
        try {
          dependent = parseJobId(dependentId);
        } catch {
          continue;
        }
        // (The dependency holds for the dependent until it has ended.)
        more = await this.#fcall('resolve', dependent.fn, [dependent.number, dependencyId, state]);
      }
      if (told) {
        try {
          const held = parseJobId(told[0]);
          await this.#fcall('told', held.fn, [held.number, told[1]]);
        } catch (error) {
          if (!(error instanceof BadInputError)) throw error;
        }
      }
      todo.push(...(more || []).map(String));
    }
  }

  /** `wg2_get`: the record and output of a parsed job id, or null. */
  async #get(job) {
    return this.#read('get', job);
  }

  /**
   * The record and output of a parsed job id, or null, by library function `name`: `get`,
   * or `watch` (what `get` answers, and the job marked as waited on: its `finish` event
   * then carries its record, and its output when small).
   */
  async #read(name, job) {
    const reply = await this.#fcall(name, job.fn, [job.number], { buffers: true });
    if (!reply) return null;
    const [raw, output] = reply;
    let record;
    try {
      record = JSON.parse(raw.toString('utf8'));
    } catch (error) {
      throw new WasmgearError(`job ${job.id} has a corrupt record: ${error.message}`);
    }
    return { record, output: output || null };
  }

  /**
   * Everything known about job `id`; NotFoundError when there is no such job. With keys, a
   * sealed output and error messages are opened (BadInputError naming the job and the part
   * when one does not open); without, a sealed message reads `<encrypted (key "K"); no key
   * here ...>` and a sealed output is as stored.
   */
  async status(id) {
    return this.#guard(() => this.#statusBy('get', parseJobId(id)));
  }

  /**
   * The Job of parsed job id `job`, read by library function `name` (`get`, or `watch` for
   * a wait); NotFoundError when there is no such job.
   */
  async #statusBy(name, job) {
    const found = await this.#read(name, job);
    if (!found) {
      throw new NotFoundError(`no job ${job.id}: it never existed or its result has expired`, {
        id: job.id,
      });
    }
    return this.#opened(jobFrom(job.id, found.record, found.output));
  }

  /**
   * Job `job` with its sealed output and error messages opened; without keys, its sealed
   * messages say they are sealed (a sealed output as stored).
   */
  #opened(job) {
    return openJob(this.#keys, job);
  }

  /**
   * Job `id`'s log: what each attempt logged and printed (the newest 256 KiB); empty when
   * it logged nothing or has not finished an attempt.
   */
  async logs(id) {
    return this.#guard(async () => {
      const job = parseJobId(id);
      const [[e1, exists], [e2, log]] = await this.#redis
        .pipeline()
        .hexists(protocol.queueKey(job.fn, 'jobs'), job.number)
        .hget(protocol.queueKey(job.fn, 'logs'), job.number)
        .exec();
      if (e1 || e2) throw e1 || e2;
      if (!exists) {
        throw new NotFoundError(`no job ${job.id}: it never existed or its result has expired`, {
          id: job.id,
        });
      }
      return openLog(this.#keys, job.id, log ?? '');
    });
  }

  /**
   * Job `id`'s input (opened, when it was sealed and the client has keys), while it is kept;
   * null once the job is forgotten.
   */
  async input(id) {
    return this.#guard(async () => {
      const job = parseJobId(id);
      const input = await this.#redis.hgetBuffer(protocol.queueKey(job.fn, 'input'), job.number);
      return input === null || this.#keys === null ? input : openBytes(this.#keys, job.id, 'input', input);
    });
  }

  /**
   * Waits until job `id` (or every job of an array of ids) has ended. Resolves with the Job
   * (an array of Jobs for an array) when it succeeded (all did); rejects with
   * JobFailedError when one failed or expired, else WaitTimeoutError when a wait ran out of time, else
   * JobCancelledError when one was cancelled (each error carries `results`: per id, its
   * final Job or its wait's error). `onProgress(progress, id)` hears each job's progress
   * reports in order, never one older than the last. Each job is read first with `wg2_watch`,
   * which marks it as waited on: its `finish` event then carries its final record (and its
   * output when small printable text), and the wait ends with them without another read.
   */
  async wait(ids, options = {}) {
    const many = Array.isArray(ids);
    const { timeoutMs, onProgress } = options;
    if (timeoutMs !== undefined && timeoutMs !== null) {
      if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0)) {
        throw new BadInputError(`invalid wait option: timeoutMs ${JSON.stringify(timeoutMs)} must be a number of ms >= 0`);
      }
    }
    if (onProgress !== undefined && typeof onProgress !== 'function') {
      throw new BadInputError('invalid wait option: onProgress must be a function');
    }
    const jobs = (many ? ids : [ids]).map((id) => parseJobId(id));
    if (this.#closed) throw new WasmgearError('the client is closed');
    const deadline = typeof timeoutMs === 'number' ? Date.now() + timeoutMs : null;
    const settled = await Promise.allSettled(jobs.map((job) => this.#waitOne(job, deadline, onProgress)));
    const results = settled.map((s) => (s.status === 'fulfilled' ? s.value : s.reason));
    const other = settled.find(
      (s) => s.status === 'rejected' && !(s.reason instanceof WaitTimeoutError),
    );
    if (other) throw other.reason;
    const finished = settled.filter((s) => s.status === 'fulfilled').map((s) => s.value);
    const failed = finished.find((job) => job.state === 'failed' || job.state === 'expired');
    if (failed) {
      const why = failed.error ? `: ${failed.error.class}: ${failed.error.message}` : '';
      const how = failed.state === 'expired' ? 'expired before it started' : 'failed';
      throw new JobFailedError(`job ${failed.id} ${how}${why}`, { job: failed, results });
    }
    const timedOut = settled.find((s) => s.status === 'rejected');
    if (timedOut) {
      timedOut.reason.results = results;
      throw timedOut.reason;
    }
    const cancelled = finished.find((job) => job.state === 'cancelled');
    if (cancelled) {
      const why = cancelled.error ? `: ${cancelled.error.message}` : '';
      throw new JobCancelledError(`job ${cancelled.id} was cancelled${why}`, {
        job: cancelled,
        results,
      });
    }
    return many ? finished : finished[0];
  }

  /**
   * Waits for one job to end (any final state); subscribes first, then reads with `watch`
   * (as `get`, and the job is marked as waited on). A watched job's `finish` event carries
   * its record (and its output when small printable text): the wait ends with the Job built
   * from it, with no read of its own. A plain finish event, one whose output is omitted, a
   * subscription back after a loss, or a quiet while: the record is read again.
   */
  async #waitOne(job, deadline, onProgress) {
    const watch = this.#subscriber.watch(protocol.eventsChannel(job.fn), job.id);
    const timedOut = () =>
      new WaitTimeoutError(`gave up waiting for job ${job.id} after the timeout; it goes on`, {
        id: job.id,
      });
    const left = () => (deadline === null ? Infinity : deadline - Date.now());
    let lastSeq = 0;
    const report = (progress) => {
      if (!onProgress || !progress || progress.seq <= lastSeq) return;
      lastSeq = progress.seq;
      try {
        onProgress(progress, job.id);
      } catch {
        // A callback's own error does not end the wait.
      }
    };
    try {
      // Subscribed first, then read: nothing that happens after the read is missed.
      let hearing = await within(watch.subscribed, Math.max(0, Math.min(left(), LIMITS.RESPONSE_TIMEOUT_MS)), () =>
        false,
      ).catch(() => false);
      // The job's final status, when its finish event carried it.
      let heard = null;
      for (;;) {
        let status = heard;
        heard = null;
        try {
          status = status ?? (await this.#guard(() => this.#statusBy('watch', job)));
        } catch (error) {
          // Redis restarting or out of reach for a moment: a wait outlasts it (up to its
          // timeout) rather than fail.
          if (!(error instanceof UnreachableError) || this.#closed) throw error;
          const pause = Math.min(LIMITS.WAIT_POLL_MS, left());
          if (pause <= 0) throw timedOut();
          await sleep(pause);
          continue;
        }
        if (status.progress && status.progressSeq > lastSeq) {
          report({ ...status.progress, seq: status.progressSeq });
        }
        if (status.final) return status;
        // Events until one says the job finished, the subscription is back after a loss,
        // or nothing came for a while: then read the record again.
        for (;;) {
          const remaining = left();
          if (remaining <= 0) throw timedOut();
          const item = await watch.box.next(Math.min(hearing ? LIMITS.WAIT_RECHECK_MS : LIMITS.WAIT_POLL_MS, remaining));
          if (item === null) {
            if (this.#closed) throw new WasmgearError(`the client was closed while waiting for job ${job.id}`);
            break;
          }
          if (item.type === 'lost') {
            hearing = false;
          } else if (item.type === 'resubscribed') {
            hearing = true;
            break;
          } else if (item.event.event === 'progress') {
            report(progressOf(item.event, item.event.seq));
          } else if (item.event.event === 'finish') {
            // A watched job's end comes with its record (and a small output): no read needed.
            heard = jobOfFinish(job.id, item.event);
            if (heard) heard = this.#opened(heard);
            break;
          }
        }
      }
    } finally {
      watch.close();
    }
  }

  /**
   * The events of function `fn` (of every function when none is given) as they are
   * published: an async iterator of event objects (`{function, event, id, ...}`). Its
   * `ready` promise resolves once the subscription is confirmed; `close()` (or leaving a
   * `for await` loop) ends it. Events published while the connection is down are missed.
   */
  events(fn) {
    if (this.#closed) throw new WasmgearError('the client is closed');
    const topic =
      fn === undefined || fn === null
        ? this.#subscriber.stream('pattern', protocol.allEventsPattern())
        : this.#subscriber.stream('channel', protocol.eventsChannel(checkFunction(fn)));
    const iterator = {
      ready: topic.subscribed,
      async next() {
        for (;;) {
          const item = await topic.box.next();
          if (item === null) return { value: undefined, done: true };
          if (item.type === 'event') return { value: item.event, done: false };
        }
      },
      async return() {
        topic.close();
        return { value: undefined, done: true };
      },
      close() {
        topic.close();
      },
      [Symbol.asyncIterator]() {
        return this;
      },
    };
    return iterator;
  }

  /**
   * Cancels job `id`: a queued, scheduled or waiting job at once (`cancelled`), a running
   * one by asking its worker to stop it (`stopping`: it ends `cancelled`). Its unfinished
   * children (the jobs it enqueued), theirs, and so on down are cancelled too, one `cancel`
   * each, whatever became of `id` itself (as the Rust client's `Client::cancel`). Resolves
   * `id`'s own `{outcome: 'cancelled' | 'stopping' | 'already-ended', state}`, the outcomes
   * of `wasmgear cancel`. Safe to repeat: if Redis fails half-way, cancel again.
   */
  async cancel(id) {
    return this.#guard(async () => {
      const job = parseJobId(id);
      const outcome = await this.#cancelOne(job);
      await this.#cancelChildren(job);
      return outcome;
    });
  }

  /** Cancels the parsed job `job` alone (`wg2_cancel`), telling the dependents it names. */
  async #cancelOne(job) {
    const [done, word, notify] = await this.#fcall('cancel', job.fn, [job.number]);
    await this.#deliver(notify || []);
    if (Number(done) === 1) {
      return word === 'cancelled'
        ? { outcome: 'cancelled', state: 'cancelled' }
        : { outcome: 'stopping', state: 'running' };
    }
    if (word === 'missing') {
      throw new NotFoundError(`no job ${job.id}: it never existed or its result has expired`, {
        id: job.id,
      });
    }
    return { outcome: 'already-ended', state: String(word) };
  }

  /**
   * Cancels the children of the parsed job `job` (the ids its record lists in `children`),
   * their children, and so on down: each with one `cancel` (a child that no longer exists is
   * skipped; one that has ended is left as it is, its own children still cancelled), then its
   * record read for its children. Each job is visited once however often it is listed, so a
   * cycle in hand-made records ends; at most LIMITS.MAX_CHILDREN children of one job are read.
   */
  async #cancelChildren(job) {
    const seen = new Set([job.id]);
    const todo = [job];
    while (todo.length > 0) {
      const parent = todo.pop();
      const found = await this.#get(parent);
      if (!found) continue;
      const listed = Array.isArray(found.record.children) ? found.record.children : [];
      for (const id of listed.slice(0, LIMITS.MAX_CHILDREN)) {
        let child;
        try {
          child = parseJobId(String(id));
        } catch {
          continue;
        }
        if (seen.has(child.id)) continue;
        seen.add(child.id);
        try {
          await this.#cancelOne(child);
        } catch (error) {
          if (error instanceof NotFoundError) continue;
          throw error;
        }
        todo.push(child);
      }
    }
  }

  /**
   * Runs job `id` again if it failed, was cancelled or expired (without its deadline), with
   * as many attempts as it first had. It resumes from the checkpoint it keeps, if any; with
   * `{fresh: true}` the checkpoint is dropped and it starts over. Resolves whether it was
   * queued again (false: it had not ended so).
   */
  async retry(id, options) {
    return this.#guard(async () => {
      const fresh = retryArgs(options);
      const job = parseJobId(id);
      let reply;
      try {
        reply = await this.#fcall('retry', job.fn, ['job', job.number, ...fresh]);
      } catch (error) {
        if (replyCode(error) === 'NOJOB') {
          throw new NotFoundError(`no job ${job.id}: it never existed or its result has expired`, {
            id: job.id,
            cause: error,
          });
        }
        throw error;
      }
      const [moved, links] = reply;
      for (let i = 0; i + 1 < links.length; i += 2) {
        await this.#link(String(links[i]), parseJobId(String(links[i + 1])));
      }
      return moved.length > 0;
    });
  }

  /**
   * The checkpoint job `id` keeps: the bytes its attempts saved last to resume from
   * (`checkpoint_get`, read-only), or null when it keeps none (it never saved one, it
   * succeeded, a `retry` with `fresh` dropped it, or the job is gone). Its size and when it
   * was saved are in `status(id).checkpoint`.
   */
  async checkpoint(id) {
    return this.#guard(async () => {
      const job = parseJobId(id);
      const data = await this.#fcall('checkpoint_get', job.fn, [job.number], { buffers: true });
      if (data === null || data === undefined) return null;
      return this.#keys === null ? data : openBytes(this.#keys, job.id, 'checkpoint', data);
    });
  }

  /**
   * Submits a flow: named jobs of any functions and the jobs each waits on, from a flow
   * document (`{name, jobs: {NAME: {function, input?, after?, ...}}}`, the JSON of the HTTP
   * API's `POST /v1/flows`; an object or its text). The whole graph is checked first, as the
   * Rust client checks it (nothing is written when it is refused: BadInputError); then each
   * function gets its jobs' numbers reserved (`reserve`), the flow is recorded
   * (`flow_create`), each function's jobs are written in one `enqueue` call with their
   * `number`, the `flow` id and their edges, a function after those whose jobs wait on its
   * jobs when it can (its jobs then name those dependents), and the edges across functions
   * that this order does not serve are linked last.
   * A failure after the first write cancels what was written, as far as it can. Resolves
   * `{id, jobs}`: the flow's id and each job's id by name.
   */
  async submitFlow(document) {
    return this.#guard(async () => {
      const { flow, order, named } = prepareFlow(document, this.#maxInputBytes);
      // Each function's jobs, every one after those of the function it waits on.
      const groups = new Map();
      for (const i of order) {
        const fn = flow.jobs[i].function;
        if (!groups.has(fn)) groups.set(fn, []);
        groups.get(fn).push(i);
      }
      const functions = [...groups.keys()].sort(byBytes);
      const firsts = await Promise.all(
        functions.map(async (fn) => BigInt(await this.#fcall('reserve', fn, [String(groups.get(fn).length)]))),
      );
      const ids = new Array(flow.jobs.length);
      functions.forEach((fn, k) => {
        groups.get(fn).forEach((i, n) => {
          ids[i] = `${fn}:${firsts[k] + BigInt(n)}`;
        });
      });
      let reply;
      try {
        reply = await this.#flowCall('flow_create', [FLOW_KEYS.seq, FLOW_KEYS.records, FLOW_KEYS.due], [
          flowRecord(flow, order, ids),
        ]);
      } catch (error) {
        if (replyCode(error) === 'BADFLOW') {
          const detail = String(error.message).replace(/^BADFLOW\s*/, '');
          throw new BadInputError(`invalid job option: ${detail}`, { cause: error });
        }
        throw error;
      }
      const id = Number(reply[0]);
      try {
        await this.#writeFlow(flow, id, groups, named, ids);
      } catch (error) {
        // Cancel what was written; a job left waiting on one never written is cancelled by
        // the links' re-check once the reservation of its number lapses (10 minutes).
        await this.cancelFlow(id).catch(() => {});
        throw error;
      }
      return { id, jobs: Object.fromEntries(flow.jobs.map((job, i) => [job.name, ids[i]])) };
    });
  }

  /**
   * Writes a checked flow's jobs (`groups`: each function's positions, dependencies first),
   * one `enqueue` call per function, in the layers of `writePlan` (the functions of a layer
   * at once): a function after those whose jobs wait on its jobs, so that each of its jobs
   * names those dependents (`dependent`), already written, and the edge needs no `link`.
   * The edges this order cannot serve (functions waiting on each other) and those to jobs
   * outside the flow are linked last, one `link` call per dependencies' function.
   */
  async #writeFlow(flow, id, groups, named, ids) {
    const position = new Map(flow.jobs.map((job, i) => [job.name, i]));
    const { layers, dependents, preset } = writePlan(flow, ids, position);
    const links = [];
    for (const layer of layers) {
      const calls = await Promise.allSettled(
        layer.map((fn) => {
          const members = groups.get(fn);
          // One producer span per function written (lib/tracing.js): its jobs carry its context.
          return producing(fn, members.length, (trace) =>
            this.#enqueueCall(
              fn,
              members.map((i) => ({
                input: flow.jobs[i].input,
                named: placedOptions(flow, i, named[i], ids, position, id, dependents[i]),
              })),
              (p) => `job ${JSON.stringify(flow.jobs[members[p - 1]]?.name ?? p)}`,
              trace,
            ),
          );
        }),
      );
      const refused = calls.find((call) => call.status === 'rejected');
      if (refused) throw refused.reason;
      for (const call of calls) {
        for (const [dependent, dependency] of call.value.links) {
          // A pair named with `dependent` is recorded already.
          if (!preset.has(pairKey(dependent, dependency.id))) links.push([dependent, dependency]);
        }
      }
    }
    await this.#linkMany(links);
  }

  /** `FCALL` (`FCALL_RO` for a read-only one) of library function `name` on `keys`. */
  async #flowCall(name, keys, args) {
    const { manifest } = protocol.load();
    const spec = manifest.functions[name];
    const command = spec && spec.read_only ? 'FCALL_RO' : 'FCALL';
    return this.#invoke(command, [`${manifest.prefix}${name}`, String(keys.length), ...keys, ...args]);
  }

  /** Flow `id`'s status: its record (NotFoundError when there is none) and its jobs' outcomes. */
  async #flowStatus(id) {
    const flow = flowId(id);
    const raw = await this.#flowCall('flow_get', [FLOW_KEYS.records], [flow]);
    if (raw === null || raw === undefined) {
      throw new NotFoundError(`no flow ${flow}: it was never submitted, or its jobs' retention is over`, {
        flow: Number(flow),
      });
    }
    const record = parseFlowRecord(flow, raw);
    const status = flowStatus(flow, record, await this.#outcomes(record.jobs.map((job) => parseJobId(job.id))));
    // Opened here, once, as read (a size opened twice would lose the envelope's bytes twice).
    for (const job of status.jobs) await this.#openedOutcome(job);
    return status;
  }

  /**
   * A flow job's outcome (`{id, outputBytes, error}`, changed in place) as a reader should
   * see it: a sealed error message opened (without keys, said to be sealed), and with keys a
   * sealed output's size as it opens: its head (MAX_HEADER bytes, read with `output`) tells
   * the envelope's own bytes, taken off.
   */
  async #openedOutcome(job) {
    if (job.error !== null) {
      job.error = this.#keys === null ? saidSealed(job.error) : this.#keys.openText(job.id, 'error', job.error);
    }
    if (this.#keys !== null && job.outputBytes > 0) {
      const { fn, number } = parseJobId(job.id);
      const head = await this.#fcall('output', fn, [number, '0', String(MAX_HEADER)], { buffers: true });
      const own = Buffer.isBuffer(head) ? overhead(head) : null;
      if (own !== null) job.outputBytes = Math.max(job.outputBytes - own, 0);
    }
  }

  /**
   * How each of the parsed job ids stands, in their order (`outcomes`, per function, at
   * most MAX_OUTCOMES a call): `[state, output_bytes, error]` each, `missing` for a job not kept.
   */
  async #outcomes(jobs) {
    const byFunction = new Map();
    jobs.forEach((job, i) => {
      if (!byFunction.has(job.fn)) byFunction.set(job.fn, []);
      byFunction.get(job.fn).push(i);
    });
    const out = new Array(jobs.length);
    for (const [fn, positions] of byFunction) {
      for (let from = 0; from < positions.length; from += MAX_OUTCOMES) {
        const chunk = positions.slice(from, from + MAX_OUTCOMES);
        const replies = await this.#fcall('outcomes', fn, [String(chunk.length), ...chunk.map((i) => jobs[i].number)]);
        if (!Array.isArray(replies) || replies.length !== chunk.length) {
          throw new WasmgearError(`outcomes answered ${replies && replies.length} jobs of ${fn} for ${chunk.length} asked`);
        }
        chunk.forEach((i, k) => {
          out[i] = replies[k];
        });
      }
    }
    return out;
  }

  /**
   * Flow `id` and how each of its jobs stands: `{id, name, createdAt, jobs: [{name, id,
   * after: [{job, onFailure}], state ('missing' for a job not kept), outputBytes, error}],
   * ended, counts, sinks}`, the jobs every one after those it waits on. NotFoundError when
   * there is no such flow.
   */
  async flow(id) {
    return this.#guard(() => this.#flowStatus(id));
  }

  /**
   * Cancels every unfinished job of flow `id`, each as `cancel` does (a running one is asked
   * to stop; its children are cancelled too). Resolves how many were unfinished.
   */
  async cancelFlow(id) {
    return this.#guard(async () => {
      const status = await this.#flowStatus(id);
      const unfinished = status.jobs.filter((job) => !jobEnded(job)).map((job) => job.id);
      // Dependents first: a job whose dependency is cancelled before it may be let run by
      // an `ignore` or `continue` edge.
      for (const job of unfinished.reverse()) {
        try {
          await this.cancel(job);
        } catch (error) {
          if (!(error instanceof NotFoundError)) throw error;
        }
      }
      return unfinished.length;
    });
  }

  /**
   * Runs flow `id`'s failed, cancelled and expired jobs again, in the record's order (dependencies
   * first: a job cancelled because its dependency failed waits for it again); succeeded jobs
   * keep their outputs. Resolves the ids of the jobs run again.
   */
  async retryFlow(id) {
    return this.#guard(async () => {
      const status = await this.#flowStatus(id);
      const retried = [];
      for (const job of status.jobs) {
        if (['failed', 'cancelled', 'expired'].includes(job.state) && (await this.retry(job.id))) {
          retried.push(job.id);
        }
      }
      return retried;
    });
  }

  /**
   * Waits until every job of flow `id` has ended (or is gone), however each ended, and
   * resolves the flow's status then. Rejects WaitTimeoutError (with `flow`) when
   * `timeoutMs` runs out first; the jobs go on.
   */
  async waitFlow(id, options = {}) {
    const { timeoutMs } = options ?? {};
    if (timeoutMs !== undefined && timeoutMs !== null) {
      if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0)) {
        throw new BadInputError(`invalid wait option: timeoutMs ${JSON.stringify(timeoutMs)} must be a number of ms >= 0`);
      }
    }
    const deadline = typeof timeoutMs === 'number' ? Date.now() + timeoutMs : null;
    const status = await this.flow(id);
    // In the record's order: dependents end after their dependencies, so the last jobs are
    // waited on last, when most have ended already.
    for (const job of status.jobs) {
      if (jobEnded(job)) continue;
      try {
        await this.#waitOne(parseJobId(job.id), deadline);
      } catch (error) {
        if (error instanceof NotFoundError) continue;
        if (error instanceof WaitTimeoutError) {
          throw new WaitTimeoutError(`gave up waiting for flow ${status.id} after the timeout; its jobs go on`, {
            id: job.id,
            flow: status.id,
          });
        }
        throw error;
      }
    }
    return this.flow(id);
  }

  /**
   * Opens a batch: jobs of any functions are added with `addToBatch` until `closeBatch`;
   * once it is closed and every job has ended, its callbacks are enqueued, each exactly
   * once (PROTOCOL.md, "Batches"). `options`: `name`, `onSuccess` (a job enqueued when
   * every job succeeded) and `onComplete` (one when all have ended, however), each
   * `{function, data?}`: the callback job's input is JSON with the batch's id, name, counts,
   * `failed_ids`, `cancelled_ids` and `data`. Resolves the batch's id (16 hex digits).
   */
  async openBatch(options) {
    return this.#guard(() => this.#openBatch(batchDefinition(options)));
  }

  /** `batch_open` with the checked definition `definition`, then `batches_due watch`. */
  async #openBatch(definition) {
    const id = crypto.randomBytes(8).toString('hex');
    await this.#batchCall('batch_open', id, [definition]);
    await this.#flowCall('batches_due', [BATCHES_DUE_KEY], ['watch', id]);
    return id;
  }

  /**
   * Adds jobs of any functions (`[{function, input?, options?}]`, `options` as `enqueue`
   * takes them but `uniq`) to open batch `batchId`. Every job is checked first (and its
   * dependencies: BadInputError or ConflictError, nothing written); then each function's
   * numbers are reserved, the batch counts the jobs' ids (`batch_add`, so that none ends
   * uncounted), and each function's jobs are written with their `number` and the `batch`.
   * Resolves the jobs' ids, in order. NotFoundError for no such batch, ConflictError for
   * a closed one.
   */
  async addToBatch(batchId, jobs) {
    return this.#guard(async () => {
      const id = checkBatchId(batchId);
      const checked = batchJobs(jobs, this.#maxInputBytes);
      await this.#checkBatchOpen(id);
      return this.#addToBatch(id, checked);
    });
  }

  /**
   * Closes batch `batchId`: no job can be added any more; once all have ended its callbacks
   * are enqueued (at once, if they have). Closing it again changes nothing. NotFoundError
   * for no such batch.
   */
  async closeBatch(batchId) {
    return this.#guard(async () => {
      await this.#closeBatch(checkBatchId(batchId));
    });
  }

  /** `batch_close`, then the callbacks it answers due. */
  async #closeBatch(id) {
    await this.#fireCallbacks(id, await this.#batchCall('batch_close', id, []));
  }

  /**
   * Opens a batch with `options` (as `openBatch`), adds `jobs` (as `addToBatch`) and closes
   * it: the usual way. Everything is checked before the batch is opened. Resolves `{id,
   * jobs}`: the batch's id and its jobs' ids, in order. Should adding fail, the batch is
   * left open (its callbacks never come), as the Rust client leaves it.
   */
  async batch(jobs, options) {
    return this.#guard(async () => {
      const definition = batchDefinition(options);
      const checked = batchJobs(jobs, this.#maxInputBytes);
      const id = await this.#openBatch(definition);
      const ids = await this.#addToBatch(id, checked);
      await this.#closeBatch(id);
      return { id, jobs: ids };
    });
  }

  /**
   * How batch `batchId` stands: `{id, name, open, total, pending, succeeded, failed,
   * cancelled, failedIds, cancelledIds, onSuccess, onComplete, createdAt, endedAt}`
   * (`onSuccess`, `onComplete`: null, `due`, or the callback job's id). NotFoundError when
   * there is none.
   */
  async batchStatus(batchId) {
    return this.#guard(async () => {
      const id = checkBatchId(batchId);
      const read = await this.#readBatch(id);
      if (!read) throw this.#noBatch(id);
      return read.status;
    });
  }

  #noBatch(id, cause) {
    return new NotFoundError(`no batch ${id}: it was never opened, or it was forgotten`, { batch: id, cause });
  }

  /** Library function `name` on batch `id`'s keys, its refusals as this library's errors. */
  async #batchCall(name, id, args) {
    try {
      return await this.#flowCall(name, batchKeys(id), args);
    } catch (error) {
      const code = replyCode(error);
      const detail = String(error.message).slice((code || '').length).trim();
      if (code === 'NOBATCH') throw this.#noBatch(id, error);
      if (code === 'CONFLICT') throw new ConflictError(`batch ${id}: ${detail}`, { cause: error });
      if (code === 'BADBATCH') throw new BadInputError(`batch ${id}: ${detail}`, { cause: error });
      throw error;
    }
  }

  /** Batch `id` as `batch_get` answers it: `{status, definition}`, or null. */
  async #readBatch(id) {
    return parseBatch(id, await this.#flowCall('batch_get', batchKeys(id), ['0']));
  }

  /**
   * Refuses, before anything is written, a batch that does not exist (NotFoundError) or is
   * closed (ConflictError); `batch_add` checks again.
   */
  async #checkBatchOpen(id) {
    const open = await this.#redis.hget(batchKeys(id)[0], 'open');
    if (open === null) throw this.#noBatch(id);
    if (open !== '1') {
      throw new ConflictError(`batch ${id}: the batch is closed: no job can be added to it`);
    }
  }

  /**
   * Adds checked jobs to batch `id`: their dependencies checked, each function's numbers
   * reserved, `batch_add`, each function's jobs written (in calls of ENQUEUE_BATCH, the
   * functions at once), then the links to dependencies in other functions.
   */
  async #addToBatch(id, jobs) {
    if (jobs.length === 0) return [];
    // Every dependency whose failure cancels the job, whatever its function: a refusal
    // after `batch_add` would leave the batch counting a job never written.
    const checked = new Set();
    for (const job of jobs) {
      for (const dependency of job.after) {
        if (dependency.onFailure !== 'cancel' || checked.has(dependency.id)) continue;
        await this.#checkDependency(dependency);
        checked.add(dependency.id);
      }
    }
    const groups = new Map();
    jobs.forEach((job, i) => {
      if (!groups.has(job.fn)) groups.set(job.fn, []);
      groups.get(job.fn).push(i);
    });
    const functions = [...groups.keys()].sort(byBytes);
    const firsts = await Promise.all(
      functions.map(async (fn) => BigInt(await this.#fcall('reserve', fn, [String(groups.get(fn).length)]))),
    );
    const ids = new Array(jobs.length);
    functions.forEach((fn, k) => {
      groups.get(fn).forEach((i, n) => {
        ids[i] = `${fn}:${firsts[k] + BigInt(n)}`;
      });
    });
    await this.#batchCall('batch_add', id, ids);
    const calls = await Promise.allSettled(
      functions.map((fn) => this.#writeBatchJobs(id, fn, groups.get(fn), jobs, ids)),
    );
    const links = calls.filter((call) => call.status === 'fulfilled').flatMap((call) => call.value);
    await inParallel(links, IN_FLIGHT, ([dependent, dependency]) => this.#link(dependent, dependency));
    const refused = calls.find((call) => call.status === 'rejected');
    if (refused) throw refused.reason;
    return ids;
  }

  /**
   * Writes the jobs of function `fn` at `positions` of a batch's `jobs`, with their reserved
   * numbers and the batch; resolves the links to make. When the queue refuses a call (it
   * wrote nothing), the jobs of that call and of those after it are never written: the batch
   * counts them cancelled at once, rather than when their reservations lapse.
   */
  async #writeBatchJobs(id, fn, positions, jobs, ids) {
    // One producer span for the function's jobs (lib/tracing.js): they carry its context.
    return producing(fn, positions.length, async (trace) => {
      const links = [];
      const size = LIMITS.ENQUEUE_BATCH;
      for (let from = 0; from < positions.length; from += size) {
        const chunk = positions.slice(from, from + size);
        try {
          const written = await this.#enqueueCall(
            fn,
            chunk.map((i) => ({
              input: jobs[i].input,
              named: [...jobs[i].named, 'number', ids[i].slice(fn.length + 1), 'batch', id],
            })),
            (p) => `job ${chunk[p - 1] + 1} of the batch`,
            trace,
          );
          links.push(...written.links);
        } catch (error) {
          if (error instanceof BadInputError || ['BADJOB', 'CONFLICT'].includes(replyCode(error))) {
            for (const i of positions.slice(from)) {
              await this.#batchDone(id, ids[i], 'cancelled').catch(() => {});
            }
          }
          throw error;
        }
      }
      return links;
    });
  }

  /** Counts the end of job `job` (in `state`) in batch `id`, and enqueues the callbacks that made due. */
  async #batchDone(id, job, state) {
    if (!isBatchId(id) || !ENDED.has(state)) return;
    await this.#fireCallbacks(id, await this.#flowCall('batch_done', batchKeys(id), [job, state]));
  }

  /**
   * Enqueues batch `id`'s due callbacks `kinds` (`success`, `complete`), each with the `once`
   * key `batch:ID:KIND` (enqueued again, it is the same job), and notes each (`batch_fired`).
   */
  async #fireCallbacks(id, kinds) {
    const due = (Array.isArray(kinds) ? kinds : []).map(String);
    if (due.length === 0) return;
    const read = await this.#readBatch(id);
    if (!read) return;
    for (const kind of due) {
      const callback = read.definition[CALLBACK_FIELDS[kind]];
      if (!callback || typeof callback !== 'object' || !isFunction(callback.function)) continue;
      const { enqueued } = await producing(callback.function, 1, (trace) =>
        this.#enqueueCall(
          callback.function,
          [{ named: ['once', `batch:${id}:${kind}`], input: callbackInput(read.status, kind, callback) }],
          () => `the ${kind} callback of batch ${id}`,
          trace,
        ),
      );
      await this.#flowCall('batch_fired', batchKeys(id), [kind, enqueued[0].id]);
    }
  }

  /**
   * Every known function (sorted) with its jobs per state, live workers and whether it is
   * paused, as `wasmgear queues` shows them.
   */
  async queues() {
    return this.#guard(async () => {
      const { manifest } = protocol.load();
      const names = (await this.#redis.smembers(manifest.functions_key))
        .filter(isFunction)
        .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      const overviews = [];
      for (const fn of names) {
        const key = (suffix) => protocol.queueKey(fn, suffix);
        const replies = await this.#redis
          .pipeline()
          .zcard(key('ready'))
          .zcard(key('group-ready'))
          .zcard(key('scheduled'))
          .zcard(key('leased'))
          .zcard(key('waiting'))
          .hgetall(key('counts'))
          .hget(key('config'), 'paused')
          .exec();
        const failure = replies.find(([error]) => error);
        if (failure) throw failure[0];
        const [ungrouped, grouped, scheduled, running, waiting, counts, paused] = replies.map(([, value]) => value);
        const count = (state) => Math.max(0, Number((counts || {})[state] || 0));
        // The roll call takes the key its header names, and counts with worker id ''.
        const workers = await this.#invoke('FCALL', [`${manifest.prefix}rollcall`, '1', key('workers'), '', '0']);
        overviews.push({
          function: fn,
          // The ready jobs without a group, and those with one.
          queued: Number(ungrouped) + Number(grouped),
          scheduled: Number(scheduled),
          running: Number(running),
          waiting: Number(waiting),
          succeeded: count('succeeded'),
          failed: count('failed'),
          cancelled: count('cancelled'),
          workers: Number(workers),
          paused: paused === '1',
        });
      }
      return overviews;
    });
  }

  /** Function `fn`'s settings, shared by all workers (null where it has none). */
  async config(fn) {
    return this.#guard(async () => {
      checkFunction(fn);
      return readConfig(await this.#redis.hgetall(protocol.queueKey(fn, 'config')));
    });
  }

  /**
   * Changes function `fn`'s settings, shared by all workers (idle workers see the change at
   * once), and resolves them afterwards. A setting left out is not changed; `null` clears
   * it. `paused`: workers lease none of its jobs (enqueueing goes on); `concurrency`: the
   * most of its jobs running at once; `rateLimit`: `{limit, intervalMs}`, the most leases
   * per interval; `keepFinished`: the most finished jobs kept; `groupConcurrency` and
   * `groupRateLimit`: the limits of each of its groups, unless a group has its own
   * (`configureGroup`; a group concurrency of 1 makes each group a sequence);
   * `minReplicas` (1 to 16): how many replicas must confirm each enqueue of its jobs (and
   * each completion, by the workers), whatever a client asks for; `encrypt`: it stores only
   * encrypted input (a plain one is refused: see `connect`'s key file). A bad value (0 among them:
   * pause instead; for `minReplicas`, null asks for none) is refused with BadInputError,
   * nothing written.
   */
  async configure(fn, settings = {}) {
    return this.#guard(async () => {
      checkFunction(fn);
      const args = settingsArgs(settings);
      await this.#register(fn);
      return readConfig(await this.#fcall('configure', fn, args));
    });
  }

  /**
   * Changes the own settings of group `group` of function `fn` (idle workers see the change
   * at once) and resolves them afterwards: `{concurrency, rateLimit, paused}`, null where the
   * function's default applies. A setting left out is not changed; `null` clears it.
   * `concurrency` 1 makes the group a sequence (its jobs run one at a time, in order);
   * `paused`: workers lease none of its jobs (the other groups go on).
   */
  async configureGroup(fn, group, settings = {}) {
    return this.#guard(async () => {
      checkFunction(fn);
      const args = groupArgs(group, settings);
      await this.#register(fn);
      const own = await this.#fcall('configure_group', fn, args);
      if (!Array.isArray(own) || own.length !== 4) {
        throw new WasmgearError(`configure_group answered ${JSON.stringify(own)}, not 4 settings`);
      }
      return groupConfig(own.map(String).join('|'));
    });
  }

  /**
   * The groups of function `fn`, the deepest (most ready jobs) first: at most `limit` (1 to
   * 1000, default 20), or `group` alone. Resolves `{groups, truncated, ungroupedReady,
   * listed}`: how many groups have ready jobs, running jobs or their own settings (`truncated`
   * when there were more than the queue looks at in one call), the ready jobs without a
   * group, and each listed group's `{group, ready, running, config, rateLimitedUntil}`.
   */
  async groups(fn, options = {}) {
    return this.#guard(async () => {
      checkFunction(fn);
      return groupsOverview(await this.#fcall('groups', fn, groupsArgs(options)));
    });
  }

  /** Ends every wait and event stream and closes the connections. */
  async close() {
    if (this.#closed) return;
    this.#closed = true;
    await this.#subscriber.close();
    try {
      await this.#redis.quit();
    } catch {
      // Closed anyway below.
    }
    // Ends what QUIT leaves: a reconnection under way, and the sentinel connections of
    // ioredis' failover detector.
    this.#redis.disconnect();
  }
}

module.exports = { Client, isTransient, translate, redact };
