/**
 * wasmgear for ES modules: the very objects of the CommonJS entry (index.js), re-exported,
 * so that `import` and `require` share one Client class and one set of error classes
 * (`instanceof` holds across both).
 */

import wasmgear from './index.js';

export const {
  Client,
  LIMITS,
  parseJobId,
  checkFunction,
  WasmgearError,
  BadInputError,
  ConflictError,
  NotFoundError,
  UnreachableError,
  JobFailedError,
  JobCancelledError,
  WaitTimeoutError,
  NotReplicatedError,
} = wasmgear;

export default wasmgear;
