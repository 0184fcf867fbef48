// `join-js`: `join` in JavaScript. Its output is its dependencies' outputs, in the order of
// its `after` list, one per line; a dependency that did not succeed fails the job for good,
// naming it.

import { job, dependencies, log, Fail } from './wasmgear.js';

function join() {
  const outputs = [];
  for (const dependency of dependencies()) {
    if (dependency.state !== 'succeeded') {
      throw new Fail(`dependency ${dependency.id} is ${dependency.state}: ${dependency.error ?? 'no output'}`);
    }
    outputs.push(dependency.output());
  }
  log.info(`joined the outputs of ${outputs.length} dependencies`);
  const size = outputs.reduce((n, o) => n + o.length, 0) + Math.max(outputs.length - 1, 0);
  const joined = new Uint8Array(size);
  let at = 0;
  outputs.forEach((output, i) => {
    if (i > 0) joined[at++] = 10;
    joined.set(output, at);
    at += output.length;
  });
  return joined;
}

export const handler = job(join);
