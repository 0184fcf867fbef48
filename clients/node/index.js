'use strict';

/**
 * wasmgear: enqueue jobs on a wasmgear queue, follow them and read their results, over
 * Redis, with the same Redis Functions library the workers run (shipped in protocol/).
 */

const { Client } = require('./lib/client');
const errors = require('./lib/errors');
const { LIMITS } = require('./lib/options');
const names = require('./lib/names');

/** Splits a job id `FUNCTION:N`; throws BadInputError when it is not one. */
function parseJobId(id) {
  const parsed = names.parseJobId(id);
  return { id: parsed.id, function: parsed.fn, number: Number(parsed.number) };
}

module.exports.Client = Client;
module.exports.LIMITS = LIMITS;
module.exports.parseJobId = parseJobId;
/** Checks a function name; throws BadInputError when it is not one. */
module.exports.checkFunction = names.checkFunction;
module.exports.WasmgearError = errors.WasmgearError;
module.exports.BadInputError = errors.BadInputError;
module.exports.ConflictError = errors.ConflictError;
module.exports.NotFoundError = errors.NotFoundError;
module.exports.UnreachableError = errors.UnreachableError;
module.exports.JobFailedError = errors.JobFailedError;
module.exports.JobCancelledError = errors.JobCancelledError;
module.exports.WaitTimeoutError = errors.WaitTimeoutError;
module.exports.NotReplicatedError = errors.NotReplicatedError;
