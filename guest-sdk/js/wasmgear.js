// Write wasmgear job handlers in JavaScript.
//
// A wasmgear worker runs every job in a fresh instance of a WebAssembly component. This ES
// module turns one plain function into such a component (built with componentize-js against
// the `resumable` world of `wit/job.wit`, which includes every one-job world before it):
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
// A batch plugin (many jobs in one call, built with `--world-name batch`) imports
// `wasmgear-batch.js` instead: this module imports the one-job interfaces (progress, child
// jobs, dependencies, checkpoints), which the batch world has not. Both import
// `wasmgear-core.js`, the parts they share.
//
// While it runs, the handler can report `progress`, write to the worker's `log`, ask whether
// it has been `cancelled`, read the settings its manifest grants (`config`), enqueue child
// jobs and wait for them (`enqueue`, `wait`; the manifest must grant them), read the jobs it
// waited for (`dependencies`), and save a checkpoint its next attempt resumes from
// (`checkpointSave`, `checkpointLoad`, `resumeEach`). `jsonInput` and `jsonOutput` read and
// write JSON.
//
// The entry module must itself say `export const handler = job(fn);`: componentize-js takes
// the world's `handler` export from the entry module's exports.

import { report } from 'wasmgear:job/progress@0.1.0';
import { enqueue as hostEnqueue, wait as hostWait } from 'wasmgear:job/jobs@0.1.0';
import {
  count as hostDependencyCount,
  page as hostDependencyPage,
  output as hostDependencyOutput,
} from 'wasmgear:job/dependencies@0.1.0';
import { load as hostCheckpointLoad, save as hostCheckpointSave } from 'wasmgear:job/checkpoint@0.1.0';
import {
  Fail,
  Retry,
  call,
  cancelled,
  hostError,
  outputBytes,
  quote,
  toJob,
  witError,
} from './wasmgear-core.js';

export {
  JobError,
  Retry,
  Fail,
  log,
  cancelled,
  config,
  textInput,
  jsonInput,
  jsonOutput,
  quote,
  call,
} from './wasmgear-core.js';

// --- progress ------------------------------------------------------------------------------

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

// --- child jobs ------------------------------------------------------------------------

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

// --- the handler -------------------------------------------------------------------------

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
        throw witError(e);
      }
    },
  };
}

// --- checkpoints -------------------------------------------------------------------------

/**
 * The checkpoint to resume from (a Uint8Array): the last one this attempt saved, else the
 * last one an earlier attempt of the job saved that reached the queue; undefined on a fresh
 * start. Throws `Retry` when it cannot be read (the queue unreachable).
 */
export function checkpointLoad() {
  let saved;
  try {
    saved = hostCheckpointLoad();
  } catch (e) {
    throw new Retry(hostError(e));
  }
  return saved === null ? undefined : saved;
}

/**
 * Saves `data` (a Uint8Array, or a string as UTF-8) as the job's checkpoint, in place of the
 * one before. Cheap and never blocks: the worker writes the latest one out at most every
 * 50 ms and always the last one before the attempt's result. Throws `Fail` when refused
 * (larger than the manifest's `[limits] checkpoint`, 1 MiB by default, or a job from another
 * protocol's queue, which keeps no checkpoints).
 */
export function checkpointSave(data) {
  const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : outputBytes(data);
  try {
    hostCheckpointSave(bytes);
  } catch (e) {
    throw new Fail(hostError(e));
  }
}

/** The position a checkpoint of `resumeEach` holds; another checkpoint fails the job. */
function positionOf(saved) {
  const text = new TextDecoder().decode(saved);
  if (/^\+?[0-9]+$/.test(text) && Number.isSafeInteger(Number(text))) return Number(text);
  const head = new TextDecoder().decode(saved.subarray(0, 64));
  throw new Fail(`the job's checkpoint is not a position resumeEach saved: ${quote(head)}`);
}

/**
 * Runs `step(position, item)` for each of `items` (any iterable), from where the job's last
 * attempt got to, and saves the position reached (the number of items done, as decimal
 * text) after every `every` items and after the last. Before each item it checks whether the
 * job was asked to stop (`cancelled()`): then it saves the position and throws `Retry`, so
 * that the next attempt goes on from there.
 *
 * Returns the position it resumed from: 0 on a fresh start. The items from the last saved
 * position on run again after a failure, so `step` should not mind doing one twice.
 */
export function resumeEach(items, every, step) {
  const saved = checkpointLoad();
  const from = saved === undefined ? 0 : positionOf(saved);
  const interval = Math.max(Math.trunc(Number(every)) || 0, 1);
  let skipped = 0;
  let done = from;
  for (const item of items) {
    if (skipped < from) {
      skipped += 1;
      continue;
    }
    if (cancelled()) {
      checkpointSave(String(done));
      throw new Retry(`asked to stop after ${done} items; the next attempt resumes there`);
    }
    step(done, item);
    done += 1;
    if ((done - from) % interval === 0) checkpointSave(String(done));
  }
  if ((done - from) % interval !== 0) checkpointSave(String(done));
  return from;
}
