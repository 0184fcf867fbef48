// `split-js`: `split` in JavaScript. Every line of the input is a chunk, enqueued as a child
// job of the function `child` names (the manifest's `[config]`, default `reverse`); the output
// is the children's outputs, one per line, in the chunks' order.
//
// Needs the grant: `[jobs] enqueue = ["reverse"]` in its manifest.

import { job, textInput, config, enqueue, wait, log, Fail } from './wasmgear.js';

function split(job, input) {
  const child = config('child') || 'reverse';
  const ids = textInput(input).split('\n').map((chunk) => enqueue(child, chunk));
  log.info(`enqueued ${ids.length} children of ${child}`);
  const decoder = new TextDecoder();
  return ids
    .map((id) => {
      const outcome = wait(id, 60000);
      if (outcome.state !== 'succeeded') {
        throw new Fail(`child ${id} ${outcome.state}: ${outcome.message || ''}`);
      }
      return decoder.decode(outcome.output);
    })
    .join('\n');
}

export const handler = job(split);
