'use strict';

/**
 * Batches (PROTOCOL.md, "Batches"): jobs of any functions, added while the batch is open,
 * with callbacks: a job of `on_success.function` enqueued once every job has succeeded, and
 * one of `on_complete.function` once all have ended, however. What needs no server lives
 * here: the keys, the checks of a batch's options and jobs (before anything is written), the
 * definition `batch_open` keeps (as the Rust client writes it, crates/client/src/batch.rs),
 * a batch's status from `batch_get`, and a callback's input. lib/client.js does the calls.
 */

const { BadInputError, WasmgearError } = require('./errors');
const { checkFunction } = require('./names');
const { LIMITS, jobOptions, inputBytes } = require('./options');
const { compactJson } = require('./flow');

/** The sorted set of the batches the workers' upkeep re-checks (`batches_due`). */
const BATCHES_DUE_KEY = 'wg:{batches}:due';

/** The largest definition `batch_open` takes, bytes of JSON. */
const MAX_DEFINITION_BYTES = 65536;

/** A callback's kind (`batch_close`, `batch_done`) → its field in the definition. */
const CALLBACK_FIELDS = Object.freeze({ success: 'on_success', complete: 'on_complete' });

/** The states a batch counts a job's end as (`batch_done`; `expired` is counted failed). */
const ENDED = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

const OPTION_FIELDS = ['name', 'onSuccess', 'onComplete'];
const CALLBACK_KEYS = ['function', 'data'];
const JOB_FIELDS = ['function', 'input', 'options'];

const isObject = (value) =>
  value !== null && typeof value === 'object' && !Array.isArray(value) && !ArrayBuffer.isView(value);
const given = (value) => value !== undefined && value !== null;

/** The keys of batch `id` (`wg:{batch:ID}:state`, `:members`, `:ended`), in the order its functions take them. */
function batchKeys(id) {
  return [`wg:{batch:${id}}:state`, `wg:{batch:${id}}:members`, `wg:{batch:${id}}:ended`];
}

/** Whether `id` can be a batch id: 1 to 32 hex digits. */
function isBatchId(id) {
  return typeof id === 'string' && /^[0-9A-Fa-f]{1,32}$/.test(id);
}

/** Checks a batch id (1 to 32 hex digits) and returns it; throws BadInputError. */
function batchId(id) {
  if (!isBatchId(id)) {
    throw new BadInputError(`invalid batch id ${JSON.stringify(id) ?? String(id)}: a batch id is 1 to 32 hex digits`);
  }
  return id;
}

function badOption(text) {
  return new BadInputError(`invalid batch option: ${text}`);
}

/** One callback `{function, data?}` as the definition writes it (`null`: none). */
function callbackOf(field, callback) {
  if (!given(callback)) return null;
  if (!isObject(callback)) throw badOption(`${field} must be an object {function, data?}`);
  for (const key of Object.keys(callback)) {
    if (!CALLBACK_KEYS.includes(key) && callback[key] !== undefined) {
      throw badOption(`${field}: unknown field ${JSON.stringify(key)} (known: ${CALLBACK_KEYS.join(', ')})`);
    }
  }
  let fn;
  try {
    fn = checkFunction(callback.function);
  } catch (error) {
    throw badOption(`${field}: ${error.message}`);
  }
  // As serde writes the Rust client's `Callback`: its function, then its data (left out
  // when there is none), object keys in byte order.
  let text = `{"function":${JSON.stringify(fn)}`;
  if (given(callback.data)) {
    let data;
    try {
      data = compactJson(callback.data);
    } catch (error) {
      throw badOption(`${field}: data does not write as JSON: ${error.message}`);
    }
    text += `,"data":${data}`;
  }
  return `${text}}`;
}

/**
 * Checks a batch's options (`{name?, onSuccess?, onComplete?}`, each callback `{function,
 * data?}`) and returns the definition `batch_open` keeps: JSON `{name, on_success,
 * on_complete}` as the Rust client writes its `BatchSpec`, at most 64 KiB. Throws BadInputError.
 */
function batchDefinition(options) {
  if (!given(options)) options = {};
  if (!isObject(options)) {
    throw badOption(`the options must be an object {name, onSuccess, onComplete}, not ${JSON.stringify(options)}`);
  }
  for (const field of Object.keys(options)) {
    if (!OPTION_FIELDS.includes(field) && options[field] !== undefined) {
      throw badOption(`unknown option ${JSON.stringify(field)} (known: ${OPTION_FIELDS.join(', ')})`);
    }
  }
  const name = given(options.name) ? options.name : '';
  if (typeof name !== 'string') throw badOption(`name must be a string, not ${JSON.stringify(name)}`);
  const onSuccess = callbackOf('onSuccess', options.onSuccess);
  const onComplete = callbackOf('onComplete', options.onComplete);
  let text = `{"name":${JSON.stringify(name)}`;
  if (onSuccess) text += `,"on_success":${onSuccess}`;
  if (onComplete) text += `,"on_complete":${onComplete}`;
  text += '}';
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > MAX_DEFINITION_BYTES) {
    throw badOption(
      `the batch's definition (its name and callbacks) is ${bytes} bytes of JSON, more than the ${MAX_DEFINITION_BYTES} it may have`,
    );
  }
  return text;
}

/**
 * Checks the jobs to add to a batch (`[{function, input?, options?}]`, `options` as
 * `enqueue` takes them), every one before anything is written, and returns them as `{fn,
 * input (bytes), named (enqueue's named options), after (parsed dependencies)}`. A batch's
 * jobs are always new: `uniq` is refused (a job joined to another by its key would leave
 * the batch waiting on one never written), and with it the options that work on it
 * (`uniqForMs`, `debounceMs`, `throttle`). Throws BadInputError naming the job (1-based).
 */
function batchJobs(jobs, maxInputBytes = LIMITS.MAX_INPUT_BYTES, nowMs = Date.now()) {
  if (!Array.isArray(jobs)) {
    throw new BadInputError('invalid batch jobs: give an array of {function, input, options} objects');
  }
  if (jobs.length > LIMITS.MAX_BATCH_JOBS) {
    throw new BadInputError(
      `invalid batch jobs: ${jobs.length} jobs are more than the ${LIMITS.MAX_BATCH_JOBS} a batch may have`,
    );
  }
  return jobs.map((job, i) => {
    const label = `job ${i + 1}`;
    if (!isObject(job)) {
      throw new BadInputError(`invalid batch jobs: ${label} is not an object {function, input, options}`);
    }
    for (const field of Object.keys(job)) {
      if (!JOB_FIELDS.includes(field) && job[field] !== undefined) {
        throw new BadInputError(
          `invalid batch jobs: ${label}: unknown field ${JSON.stringify(field)} (known: ${JOB_FIELDS.join(', ')}; ` +
            'options such as priority go in options)',
        );
      }
    }
    try {
      const fn = checkFunction(job.function);
      const input = inputBytes(job.input, maxInputBytes);
      if (isObject(job.options) && given(job.options.uniq)) {
        throw new BadInputError("invalid job option: a batch's jobs are always new, so they take no uniq");
      }
      const { named, after } = jobOptions(job.options, nowMs);
      return { fn, input, named, after };
    } catch (error) {
      if (error instanceof BadInputError) error.message = `${label} of the batch: ${error.message}`;
      throw error;
    }
  });
}

/** A number of the state hash (0 when it is not one). */
function count(value) {
  const n = Number(value);
  return Number.isSafeInteger(n) && n >= 0 ? n : 0;
}

/**
 * A batch as `batch_get` answers it (`{state, unsuccessful, unended}`): `null` for none, else
 * `{status, definition}`: its status (`{id, name, open, total, pending, succeeded, failed,
 * cancelled, failedIds, cancelledIds, onSuccess, onComplete, createdAt, endedAt}`) and its
 * definition as `batch_open` keeps it (`{}` when it does not read).
 */
function parseBatch(id, reply) {
  if (!Array.isArray(reply)) throw new WasmgearError(`batch_get answered ${JSON.stringify(reply)} for batch ${id}`);
  const [fields, unsuccessful] = reply;
  if (!Array.isArray(fields) || fields.length === 0) return null;
  const state = {};
  for (let i = 0; i + 1 < fields.length; i += 2) state[String(fields[i])] = String(fields[i + 1]);
  let definition = {};
  try {
    const parsed = JSON.parse(state.def ?? '');
    if (isObject(parsed)) definition = parsed;
  } catch {
    // A definition that does not read has no name and no callbacks.
  }
  const failedIds = [];
  const cancelledIds = [];
  const listed = Array.isArray(unsuccessful) ? unsuccessful : [];
  for (let i = 0; i + 1 < listed.length; i += 2) {
    (String(listed[i + 1]) === 'failed' ? failedIds : cancelledIds).push(String(listed[i]));
  }
  const total = count(state.total);
  const succeeded = count(state.succeeded);
  const failed = count(state.failed);
  const cancelled = count(state.cancelled);
  const status = {
    id,
    name: typeof definition.name === 'string' ? definition.name : '',
    open: state.open === '1',
    total,
    pending: Math.max(0, total - succeeded - failed - cancelled),
    succeeded,
    failed,
    cancelled,
    failedIds,
    cancelledIds,
    onSuccess: state.success ?? null,
    onComplete: state.complete ?? null,
    createdAt: new Date(count(state.created_ms)),
    endedAt: state.ended_ms === undefined ? null : new Date(count(state.ended_ms)),
  };
  return { status, definition };
}

/**
 * The input of batch callback `kind` (`success` or `complete`): JSON with the batch's id
 * and name, the callback, the counts, the ids of the jobs that failed or were cancelled, and
 * the callback's `data` (null when none), keys in byte order as the Rust client writes it.
 */
function callbackInput(status, kind, callback) {
  return Buffer.from(
    compactJson({
      batch: status.id,
      name: status.name,
      callback: kind,
      total: status.total,
      succeeded: status.succeeded,
      failed: status.failed,
      cancelled: status.cancelled,
      failed_ids: status.failedIds,
      cancelled_ids: status.cancelledIds,
      data: callback.data ?? null,
    }),
    'utf8',
  );
}

module.exports = {
  BATCHES_DUE_KEY,
  CALLBACK_FIELDS,
  ENDED,
  batchKeys,
  isBatchId,
  batchId,
  batchDefinition,
  batchJobs,
  parseBatch,
  callbackInput,
};
