'use strict';

/**
 * The errors of the wasmgear client. Each carries `exitCode`, the exit code the `wasmgear`
 * CLI gives for the same trouble, so that scripts can treat both alike.
 */

/** The base of every error this library throws. */
class WasmgearError extends Error {
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = this.constructor.name;
  }
}
WasmgearError.prototype.exitCode = 1;

/** Bad input: an option out of range, a malformed name or id. Nothing was written. */
class BadInputError extends WasmgearError {}
BadInputError.prototype.exitCode = 2;

/**
 * A well-formed request the queue's state refuses; nothing was written: a time to run at that
 * the queue's clock has passed, a dependency that is gone, failed or cancelled (the HTTP API
 * answers 409; the CLI exits with 2, as for other refused input).
 */
class ConflictError extends BadInputError {}

/**
 * No such job (never enqueued, or its retention is over): `id` names it; or no such flow
 * (never submitted, or forgotten with its jobs): `flow` names it; or no such batch (never
 * opened, or forgotten): `batch` names it.
 */
class NotFoundError extends WasmgearError {
  constructor(message, options = {}) {
    super(message, options);
    this.id = options.id;
    if (options.flow !== undefined) this.flow = options.flow;
    if (options.batch !== undefined) this.batch = options.batch;
  }
}
NotFoundError.prototype.exitCode = 5;

/** Redis cannot be reached, or what answered is not Redis. */
class UnreachableError extends WasmgearError {}
UnreachableError.prototype.exitCode = 6;

/**
 * A waited-for job ended `failed` or `expired` (for several jobs: at least one did). `job` is the first
 * such job; `results` holds, per id waited for, its final Job or the error of its wait.
 */
class JobFailedError extends WasmgearError {
  constructor(message, options = {}) {
    super(message, options);
    this.job = options.job;
    this.results = options.results;
  }
}
JobFailedError.prototype.exitCode = 1;

/** A waited-for job ended `cancelled` (and none failed). */
class JobCancelledError extends WasmgearError {
  constructor(message, options = {}) {
    super(message, options);
    this.job = options.job;
    this.results = options.results;
  }
}
JobCancelledError.prototype.exitCode = 3;

/**
 * A wait ran out of time; the job itself goes on. For a flow's wait, `flow` names the flow
 * and `id` the job it was waiting for then.
 */
class WaitTimeoutError extends WasmgearError {
  constructor(message, options = {}) {
    super(message, options);
    this.id = options.id;
    this.results = options.results;
    if (options.flow !== undefined) this.flow = options.flow;
  }
}
WaitTimeoutError.prototype.exitCode = 4;

/**
 * A write of jobs asked to be confirmed by replicas (the connect option `minReplicas`, or
 * the function's own `minReplicas` setting, whichever asks for more), and fewer confirmed it
 * within `timeoutMs`, even when it was sent again (with its call id: written once). The
 * primary has it; if the primary fails now it may be lost. `what` names the write, `wanted`
 * the replicas asked for, `confirmed` how many did. The exit code is the CLI's for Redis
 * out of reach (6): the write is safe to send again.
 */
class NotReplicatedError extends WasmgearError {
  constructor(message, options = {}) {
    super(message, options);
    this.what = options.what;
    this.wanted = options.wanted;
    this.confirmed = options.confirmed;
    this.timeoutMs = options.timeoutMs;
  }
}
NotReplicatedError.prototype.exitCode = 6;

module.exports = {
  WasmgearError,
  BadInputError,
  ConflictError,
  NotFoundError,
  UnreachableError,
  JobFailedError,
  JobCancelledError,
  WaitTimeoutError,
  NotReplicatedError,
};
