// The parts of the wasmgear JavaScript SDK that one-job and batch plugins share: errors, the
// log, cancellation, configuration, input and output. Import `wasmgear.js` (a one-job plugin)
// or `wasmgear-batch.js` (a batch plugin), which re-export what is public here; this module
// imports only the interfaces every world has (log, cancel, config), so that both build.

import { write } from 'wasmgear:job/log@0.1.0';
import { cancelled as hostCancelled } from 'wasmgear:job/cancel@0.1.0';
import { get as hostConfigGet } from 'wasmgear:job/config@0.1.0';

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

// --- errors of host calls -----------------------------------------------------------------

/** The text of an error a host call threw (jco carries a WIT error in `payload`). */
export function hostError(e) {
  if (e && e.payload !== undefined) return String(e.payload);
  return String(e && e.message ? e.message : e);
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

/** A handler's output as bytes, or a `Fail` saying what it was instead. */
export function outputBytes(value) {
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

/** A `Fail` for an exception a handler let through, whose stack goes to the job's log. */
export function uncaught(e) {
  try {
    writeLog('error', `uncaught exception: ${e && e.stack ? `${describe(e)}\n${e.stack}` : describe(e)}`);
  } catch (_) {
    // Logging never stops the job from ending.
  }
  return new Fail(describe(e));
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
    throw uncaught(e);
  }
  if (output && typeof output.then === 'function') {
    throw new Fail('the handler returned a Promise: job handlers must be synchronous');
  }
  return outputBytes(output);
}

/** The job as a handler gets it, from the WIT `job-info`. */
export function toJob(info) {
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

/** A thrown value as the WIT `job-error` variant. */
export function witError(e) {
  const retry = e instanceof JobError ? e.retry : false;
  const message = e instanceof JobError ? e.message : describe(e);
  return { tag: retry ? 'retry' : 'fail', val: message };
}

// --- quoting --------------------------------------------------------------------------------

const ESCAPES = { '\0': '\\0', '\t': '\\t', '\r': '\\r', '\n': '\\n', '\\': '\\\\', '"': '\\"' };

/**
 * `text` in double quotes, with backslashes, quotes and control characters escaped as the
 * Rust SDK's messages quote text (Rust's `{:?}`: `"a\"b"`, `"\u{1}"`), so that an error
 * message reads the same from a plugin in any language. (Other Unicode is left as it is.)
 */
export function quote(text) {
  let out = '"';
  for (const ch of String(text)) {
    const code = ch.codePointAt(0);
    if (Object.hasOwn(ESCAPES, ch)) out += ESCAPES[ch];
    else if (code < 0x20 || (code >= 0x7f && code <= 0x9f)) out += `\\u{${code.toString(16)}}`;
    else out += ch;
  }
  return `${out}"`;
}
