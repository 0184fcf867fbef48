// The types of the ES module entry (index.mjs): the same as the CommonJS entry's.
import * as wasmgear from './index.js';

export * from './index.js';
export default wasmgear;
