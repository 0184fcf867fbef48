// Write wasmgear job handlers in JavaScript.
//
// A wasmgear worker runs every job in a fresh instance of a WebAssembly component. This ES
// module turns one plain function into such a component (built with componentize-js against
// the `dependent` world of `wit/job.wit`, which includes `parent` and `job`):
//
//     import { job, log, Fail } from './wasmgear.js';
//
//     function reverse(job, input) {
//       log.info(`reversing ${input.length} bytes for job ${job.id}`);
//       return input.slice().reverse();
//     }
//
//     export const handler = job(reverse);
//
// The function gets the job being run and the job's input (a Uint8Array), and returns the
// output: a Uint8Array (or other ArrayBuffer view) as it is, a string as UTF-8, null or
// undefined as empty. Throw `new Retry(msg)` for a transient failure (the queue runs the job
// again, with backoff, while attempts remain) and `new Fail(msg)` for a permanent one; any
// other exception fails the job for good with its text, and its stack goes to the job's log.
// The handler must be synchronous (the world's `run` is a plain function).
//
// The job: `{ id, function, attempt, maxAttempts, enqueuedAtMs, timeoutMs, isLastAttempt }`;
// `enqueuedAtMs` and `timeoutMs` are WIT `u64`, so they are BigInts (`Number(job.timeoutMs)`).
//
// While it runs, the handler can report `progress`, write to the worker's `log`, ask whether
// it has been `cancelled`, read the settings its manifest grants (`config`), and enqueue child
// jobs and wait for them (`enqueue`, `wait`; the manifest must grant them). `jsonInput`
// and `jsonOutput` read and write JSON.
//
// The entry module must itself say `export const handler = job(fn);`: componentize-js takes
// the world's `handler` export from the entry module's exports.

import { report } from 'wasmgear:job/progress@0.1.0';
import { write } from 'wasmgear:job/log@0.1.0';
import { cancelled as hostCancelled } from 'wasmgear:job/cancel@0.1.0';
import { get as hostConfigGet } from 'wasmgear:job/config@0.1.0';
import { enqueue as hostEnqueue, wait as hostWait } from 'wasmgear:job/jobs@0.1.0';
import {
  count as hostDependencyCount,
  page as hostDependencyPage,
  output as hostDependencyOutput,
} from 'wasmgear:job/dependencies@0.1.0';

/** Why a job did not produce an output: throw `Retry` or `Fail`, not this. */
export class JobError extends Error {
  constructor(message, retry) {
    super(String(message));
    this.name = 'JobError';
    /** Whether the queue should run the job again (while attempts remain). */
    this.retry = Boolean(retry);
  }
}

/** A transient failure: the queue runs the job again later, while attempts remain. */
export class Retry extends JobError {
  constructor(message) {
    super(message, true);
    this.name = 'Retry';
  }
}

/** A permanent failure (bad input, a bug): the job fails for good at once. */
export class Fail extends JobError {
  constructor(message) {
    super(message, false);
    this.name = 'Fail';
  }
}

// --- calls into the worker ---------------------------------------------------------------

function toU64(value, what) {
  if (typeof value === 'bigint') return BigInt.asUintN(64, value);
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) {
    throw new TypeError(`progress: ${what} must be a non-negative number, got ${value}`);
  }
  return BigInt(Math.trunc(n));
}

/**
 * Reports that `done` units of `total` are finished (`total` 0: unknown), with an optional
 * short message. Numbers or BigInts. Reports may be coalesced; the last one always arrives.
 */
export function progress(done, total, message) {
  report(
    toU64(done, 'done'),
    toU64(total, 'total'),
    message === undefined || message === null ? undefined : String(message),
  );
}

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error'];

function writeLog(level, message) {
  if (!LEVELS.includes(level)) throw new TypeError(`unknown log level ${level}`);
  write(level, String(message));
}

/** The job's log: `log.info(msg)`, `log.debug`, `log.warn`, `log.error`, `log.trace`. */
export const log = Object.freeze({
  write: writeLog,
  trace: (message) => writeLog('trace', message),
  debug: (message) => writeLog('debug', message),
  info: (message) => writeLog('info', message),
  warn: (message) => writeLog('warn', message),
  error: (message) => writeLog('error', message),
});

/**
 * Whether the job has been asked to stop. Long handlers check it between steps and, once it
 * is true, stop soon by throwing (usually a `Fail`).
 */
export function cancelled() {
  return Boolean(hostCancelled());
}

/**
 * The value of configuration key `key` granted by the plugin's manifest (`[config]` in
 * `NAME.toml`), or undefined when the manifest does not set it.
 */
export function config(key) {
  const value = hostConfigGet(String(key));
  return value === null ? undefined : value;
}

// --- child jobs ------------------------------------------------------------------------

/** The text of an error a host call threw (jco carries a WIT error in `payload`). */
function hostError(e) {
  if (e && e.payload !== undefined) return String(e.payload);
  return String(e && e.message ? e.message : e);
}

/**
 * Enqueues a job of `fn` with `input` (a Uint8Array or a string) as a child of the running
 * job and returns its id (`FUNCTION:N`). The plugin's manifest must grant it (`[jobs] enqueue
 * = ["FUNCTION"]`, up to `max_children` per job). `options.key` names the child within its
 * parent (by default its function and input, counted among its children alike in both): a
 * retried parent gets the same child
 * back. Throws `Fail` with the reason when refused.
 */
export function enqueue(fn, input, options = {}) {
  const bytes = typeof input === 'string' ? new TextEncoder().encode(input) : input;
  try {
    return hostEnqueue(String(fn), bytes, {
      key: options.key,
      priority: options.priority,
      maxAttempts: options.maxAttempts,
      timeoutMs: options.timeoutMs === undefined ? undefined : BigInt(options.timeoutMs),
    });
  } catch (e) {
    throw new Fail(hostError(e));
  }
}

/**
 * Waits up to `timeoutMs` for job `id` to end. Returns `{ state: 'succeeded', output }`,
 * `{ state: 'failed', message }` or `{ state: 'cancelled' }`; throws `Retry` when waiting
 * failed (the time ran out: the job goes on).
 */
export function wait(id, timeoutMs = 60000) {
  let outcome;
  try {
    outcome = hostWait(String(id), BigInt(timeoutMs));
  } catch (e) {
    throw new Retry(hostError(e));
  }
  switch (outcome.tag) {
    case 'succeeded': return { state: 'succeeded', output: outcome.val };
    case 'failed': return { state: 'failed', message: outcome.val };
    default: return { state: 'cancelled' };
  }
}

// --- dependencies --------------------------------------------------------------------------

// How many dependencies one page holds, and how many bytes of an output one read takes.
const PAGE = 100;
const PIECE = 1024 * 1024;

/**
 * One job the running job waited for (its `after` list), as `dependencies()` yields it:
 * `position` (from 0), `id`, `function`, `state` ('succeeded', 'failed', 'cancelled',
 * 'unfinished' or 'missing': not kept), `outputSize` and `error` (or undefined).
 */
export class Dependency {
  constructor(position, found) {
    this.position = position;
    this.id = found.id;
    this.function = found.function;
    this.state = found.state;
    this.outputSize = Number(found.outputSize);
    this.error = found.error;
  }

  /** Its whole output (a Uint8Array), read a piece at a time; throws `Retry` when it cannot
   * be read (it has not succeeded, or it was forgotten). */
  output() {
    const pieces = [];
    let read = 0;
    for (;;) {
      let piece;
      try {
        piece = hostDependencyOutput(this.position, BigInt(read), PIECE);
      } catch (e) {
        throw new Retry(hostError(e));
      }
      if (piece.length === 0) break;
      pieces.push(piece);
      read += piece.length;
    }
    const whole = new Uint8Array(read);
    let at = 0;
    for (const piece of pieces) {
      whole.set(piece, at);
      at += piece.length;
    }
    return whole;
  }
}

/** How many dependencies the running job has; throws `Retry` when they cannot be read. */
export function dependencyCount() {
  try {
    return hostDependencyCount();
  } catch (e) {
    throw new Retry(hostError(e));
  }
}

/**
 * Yields the running job's dependencies (`Dependency`) in the order of its `after` list, a
 * page at a time, so a job with thousands of them holds only what it asks for; throws
 * `Retry` when a page cannot be read.
 */
export function* dependencies() {
  let start = 0;
  for (;;) {
    let page;
    try {
      page = hostDependencyPage(start, PAGE);
    } catch (e) {
      throw new Retry(hostError(e));
    }
    for (let i = 0; i < page.length; i++) yield new Dependency(start + i, page[i]);
    if (page.length < PAGE) return;
    start += page.length;
  }
}

// --- input and output --------------------------------------------------------------------

/** The input bytes as text; throws `Fail` when they are not UTF-8. */
export function textInput(bytes) {
  try {
    return new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch (e) {
    throw new Fail(`input is not valid UTF-8: ${e && e.message ? e.message : e}`);
  }
}

/** The input bytes parsed as JSON; throws `Fail` saying what is wrong when they are not. */
export function jsonInput(bytes) {
  const text = textInput(bytes);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Fail(`input is not valid JSON: ${e && e.message ? e.message : e}`);
  }
}

/** `value` as compact JSON bytes (`JSON.stringify`, UTF-8). */
export function jsonOutput(value) {
  return new TextEncoder().encode(JSON.stringify(value));
}

function outputBytes(value) {
  if (value === undefined || value === null) return new Uint8Array(0);
  if (value instanceof Uint8Array) return value;
  if (ArrayBuffer.isView(value)) {
    return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  }
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (typeof value === 'string') return new TextEncoder().encode(value);
  throw new Fail(
    `handler returned ${typeof value}, expected a Uint8Array, a string or nothing ` +
      '(use jsonOutput for JSON)',
  );
}

function describe(e) {
  if (e instanceof Error) return e.message ? `${e.name}: ${e.message}` : e.name;
  return String(e);
}

// --- the handler -------------------------------------------------------------------------

/**
 * Runs `fn(job, input)` the way the worker does and returns its output bytes. Throws `Retry`
 * or `Fail`; any other exception becomes a `Fail` with its text (its stack is logged).
 */
export function call(fn, jobInfo, input) {
  let output;
  try {
    output = fn(jobInfo, input);
  } catch (e) {
    if (e instanceof JobError) throw e;
    try {
      writeLog('error', `uncaught exception: ${e && e.stack ? `${describe(e)}\n${e.stack}` : describe(e)}`);
    } catch (_) {
      // Logging never stops the job from ending.
    }
    throw new Fail(describe(e));
  }
  if (output && typeof output.then === 'function') {
    throw new Fail('the handler returned a Promise: job handlers must be synchronous');
  }
  return outputBytes(output);
}

function toJob(info) {
  return Object.freeze({
    id: info.id,
    function: info.function,
    attempt: info.attempt,
    maxAttempts: info.maxAttempts,
    enqueuedAtMs: info.enqueuedAtMs,
    timeoutMs: info.timeoutMs,
    isLastAttempt: info.attempt >= info.maxAttempts,
  });
}

/**
 * Makes `fn(job, input: Uint8Array) -> Uint8Array | string | undefined` a job handler:
 * returns the object to export as `handler` (`export const handler = job(fn);`).
 */
export function job(fn) {
  if (typeof fn !== 'function') throw new TypeError('job(fn) needs a function');
  return {
    run(info, input) {
      try {
        return call(fn, toJob(info), input);
      } catch (e) {
        // A `result<_, job-error>` export returns `err` for what it throws: the variant.
        const retry = e instanceof JobError ? e.retry : false;
        const message = e instanceof JobError ? e.message : describe(e);
        throw { tag: retry ? 'retry' : 'fail', val: message };
      }
    },
  };
}
