// Write wasmgear batch plugins in JavaScript: many jobs of one function in one call.
//
// A batch plugin is built with componentize-js against the `batch` world of `wit/job.wit`
// (`--world-name batch`): it exports `batchHandler` instead of `handler`, and the worker gives
// it up to its manifest's `batch.max` jobs of its function in one fresh instance and one call
// (`batch = { max = 100, wait = "20ms" }` in `NAME.toml`):
//
//     import { batch, each, textInput } from './wasmgear-batch.js';
//
//     function shout(job, input) {
//       return textInput(input).toUpperCase();
//     }
//
//     export const batchHandler = batch((jobs) => each(jobs, shout));
//
// Each job succeeds, fails or asks for a retry on its own, with its own output, attempts and
// history. The limits (timeout, memory) hold for the whole call. The batch world has the log,
// cancellation (of the whole batch) and configuration; progress, child jobs, dependencies and
// checkpoints belong to one job and are not here (`wasmgear.js` has them, for one-job
// plugins). The errors, the log and the input and output helpers are the same as there.

import { cancelled as hostJobCancelled } from 'wasmgear:job/batch-jobs@0.1.0';
import { Fail, JobError, call, outputBytes, toJob, uncaught, witError } from './wasmgear-core.js';

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

// --- batch plugins -----------------------------------------------------------------------

/**
 * One job of a batch, as a `batch(fn)` handler gets it: `job` (as a one-job handler gets
 * it), `input` (a Uint8Array, as the client enqueued it) and `index`, its place in the
 * batch from 0.
 */
export class BatchJob {
  constructor(jobInfo, input, index) {
    this.job = jobInfo;
    this.input = input;
    this.index = index;
  }

  /**
   * Whether this job has been asked to stop (a client cancelled it, or its lease was lost)
   * while the batch runs: give it an error and go on with the others (the worker records it
   * as cancelled).
   */
  cancelled() {
    return Boolean(hostJobCancelled(this.index));
  }
}

/**
 * Runs the one-job `fn(job, input)` over each of `jobs` (`BatchJob`s) in turn, as `call` runs
 * it, and returns one result per job, in order: its output bytes, or the `Retry`/`Fail` it
 * ended with. A job whose cancellation was asked for before its turn is not run: its result
 * is a `Fail` saying so.
 */
export function each(jobs, fn) {
  return jobs.map((batchJob) => {
    if (batchJob.cancelled()) return new Fail('cancelled before its turn in the batch');
    try {
      return call(fn, batchJob.job, batchJob.input);
    } catch (e) {
      return e;
    }
  });
}

/**
 * Runs the batch handler `fn(jobs)` the way the worker does and returns one result per job:
 * output bytes, or a `JobError` (`Retry` or `Fail`). Each output may be what a one-job
 * handler returns; a `JobError` the handler throws is every job's result, and any other
 * exception fails every job (its stack is logged).
 */
export function callBatch(fn, jobs) {
  let results;
  try {
    results = fn(jobs);
  } catch (e) {
    const error = e instanceof JobError ? e : uncaught(e);
    return jobs.map(() => error);
  }
  if (results && typeof results.then === 'function') {
    const error = new Fail('the batch handler returned a Promise: batch handlers must be synchronous');
    return jobs.map(() => error);
  }
  return Array.from(results, settle);
}

/** One result of a batch handler as `callBatch` gives it: a JobError, or output bytes. */
function settle(result) {
  if (result instanceof JobError) return result;
  try {
    return outputBytes(result);
  } catch (e) {
    return e;
  }
}

/**
 * Makes `fn(jobs: BatchJob[]) -> Array` a batch handler (a batch plugin, built with
 * `--world-name batch`): it returns one result per job, in order, each the job's output (as a
 * one-job handler returns it) or a `Retry`/`Fail` for a job that did not succeed. `each(jobs,
 * fn)` runs a one-job function over the batch. A list of another length fails every job of
 * the batch. Returns the object to export as `batchHandler` (`export const batchHandler =
 * batch(fn);`).
 */
export function batch(fn) {
  if (typeof fn !== 'function') throw new TypeError('batch(fn) needs a function');
  return {
    runBatch(witJobs) {
      const jobs = witJobs.map((wit, index) => new BatchJob(toJob(wit.job), wit.input, index));
      return callBatch(fn, jobs).map((result) =>
        result instanceof JobError
          ? { tag: 'err', val: witError(result) }
          : { tag: 'ok', val: result },
      );
    },
  };
}
