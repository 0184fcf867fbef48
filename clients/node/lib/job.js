'use strict';

/** Reading job records (what `wg2_get` answers) into `Job` objects. */

const FINAL_STATES = new Set(['succeeded', 'failed', 'cancelled', 'expired']);

/** A time in ms since the epoch as a Date, or null. */
function date(ms) {
  return typeof ms === 'number' && ms > 0 ? new Date(ms) : null;
}

/** `done` or `total` of a progress report: a decimal string or (older records) a number. */
function count(value) {
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && /^[0-9]+$/.test(value)) return Number(value);
  return 0;
}

/** A progress report from a record's `progress` or a `progress` event. */
function progressOf(raw, seq) {
  if (!raw || typeof raw !== 'object') return null;
  const progress = {
    seq: typeof raw.seq === 'number' ? raw.seq : (seq ?? 0),
    done: count(raw.done),
    total: count(raw.total),
  };
  if (typeof raw.message === 'string') progress.message = raw.message;
  return progress;
}

/**
 * A record's `checkpoint` (`{bytes, ms}`: the size of the checkpoint the job keeps and when
 * it was saved) as `{bytes, savedAt}`, or null when the job keeps none. The bytes themselves
 * are read apart (`Client.checkpoint`).
 */
function checkpointOf(raw) {
  const savedAt = raw && typeof raw === 'object' ? date(raw.ms) : null;
  if (savedAt === null || typeof raw.bytes !== 'number') return null;
  return { bytes: raw.bytes, savedAt };
}

function list(value) {
  return Array.isArray(value) ? value : [];
}

/**
 * A job as `status` and `wait` return it.
 * @param {string} id
 * @param {object} record the record as `wg2_get` answered it (JSON-decoded)
 * @param {Buffer|null} output
 */
function jobFrom(id, record, output) {
  const colon = id.lastIndexOf(':');
  const error =
    record.error && typeof record.error === 'object'
      ? { class: String(record.error.class ?? ''), message: String(record.error.message ?? '') }
      : null;
  return {
    id,
    function: id.slice(0, colon),
    number: Number(id.slice(colon + 1)),
    state: record.state,
    final: FINAL_STATES.has(record.state),
    priority: record.priority ?? 0,
    attempt: record.attempt ?? 0,
    maxAttempts: record.max_attempts ?? 0,
    progress: progressOf(record.progress, record.progress_seq),
    progressSeq: record.progress_seq ?? 0,
    checkpoint: checkpointOf(record.checkpoint),
    error,
    output: output ?? null,
    timeoutMs: record.timeout_ms ?? 0,
    retentionMs: record.retention_ms ?? null,
    failedRetentionMs: record.failed_retention_ms ?? null,
    uniq: record.uniq ?? null,
    tags: list(record.tags),
    after: list(record.after),
    waitingOn: list(record.waiting_on),
    dependents: list(record.dependents),
    createdAt: date(record.created_ms),
    runAt: date(record.run_at_ms),
    notBefore: date(record.not_before_ms),
    startedAt: date(record.started_ms),
    finishedAt: date(record.finished_ms),
    cancelRequestedAt: date(record.cancel_requested_ms),
    expiresAt: date(record.expires_ms),
    history: list(record.history).map((entry) => ({
      attempt: entry.attempt,
      worker: entry.worker ?? null,
      startedAt: date(entry.started_ms),
      endedAt: date(entry.ended_ms),
      outcome: entry.outcome,
      message: entry.message ?? null,
      version: entry.version ?? null,
    })),
    record,
  };
}

/**
 * The Job that a watched job's `finish` event carries (PROTOCOL.md, "Events"): its `record`
 * as `wg2_get` answers it, read as `jobFrom` reads that, and its `output`, a JSON string of
 * printable ASCII (its bytes are the output), when the job has a small text output. Null when
 * the event does not carry it all: a plain event (no client watched the job, or its record
 * was gone), or one with `output_omitted` (the job has an output the event does not carry:
 * read it with `get`).
 * @param {string} id
 * @param {object} event the event, JSON-decoded
 */
function jobOfFinish(id, event) {
  const { record } = event;
  if (record === null || typeof record !== 'object' || Array.isArray(record) || event.output_omitted) return null;
  const output = typeof event.output === 'string' ? Buffer.from(event.output, 'utf8') : null;
  return jobFrom(id, record, output);
}

module.exports = { jobFrom, jobOfFinish, progressOf, FINAL_STATES };
