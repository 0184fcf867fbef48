// `resume-js`: `resume` in JavaScript, the checkpoints example. Runs `N` steps, saving the
// position after each one (`resumeEach`), and on its first attempt fails on purpose once it
// has done half of them (`N / 2` rounded down, with a retry); the next attempt resumes from
// the last position saved. The output says where the attempt that succeeded resumed from:
// `resumed from K` (`resumed from 5` for `N = 10`; `resumed from 0` when it ran through at
// once).
//
// Input is UTF-8 text, `"N"` or `"N MS"`: `MS` milliseconds of work per step (none when left
// out). Input of another shape fails the job for good with a message that quotes it.

import { job, resumeEach, textInput, quote, progress, log, Fail, Retry } from './wasmgear.js';

// What Rust's `str::split_whitespace` splits at (Unicode White_Space), and its unsigned integers.
const WHITESPACE = /[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;
const UNSIGNED = /^\+?[0-9]+$/;

/** Waits `ms` milliseconds (JavaScript in a component has no sleep: watch the clock). */
function busy(ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // work
  }
}

function resume(j, input) {
  const text = textInput(input);
  const words = text.split(WHITESPACE).filter((word) => word !== '');
  if (words.length < 1 || words.length > 2 || !words.every((word) => UNSIGNED.test(word))) {
    throw new Fail(
      `resume expects "N" or "N MS" (steps, then milliseconds of work per step), got ${quote(text)}`,
    );
  }
  const steps = Number(words[0]);
  const pause = words.length === 2 ? Number(words[1]) : 0;
  const failAt = j.attempt === 1 ? Math.floor(steps / 2) : undefined;
  const from = resumeEach(Array.from({ length: steps }, (_, i) => i), 1, (position) => {
    if (position === failAt) {
      throw new Retry(`failing on purpose after ${position} of ${steps} steps (first attempt)`);
    }
    busy(pause);
    progress(position + 1, steps);
  });
  log.info(`attempt ${j.attempt} resumed from step ${from} of ${steps}`);
  return `resumed from ${from}`;
}

export const handler = job(resume);
