// `sum-batch-js`: `sum-batch` in JavaScript, a batch plugin (the WIT world `batch`, built with
// `--world-name batch`). Each job's input is whole numbers separated by white space; its
// output is their sum and the size of the batch it ran in: `6 (in a batch of 100)`. Empty
// input sums to 0.
//
// Each job ends on its own: a word that is not a whole number fails that job for good
// (`"x" is not a whole number`), and an input starting with `flaky` asks for a retry on the
// job's first attempt (the numbers after it are summed on the next). An input starting with
// `sleep MS` waits that many milliseconds first, on the job's first attempt only. A job whose
// cancellation was asked for before its turn is skipped (`each`).
//
// Its manifest (`sum-batch-js.toml` beside the component) says how many jobs a call takes:
// `batch = { max = 100, wait = "20ms" }`.

import { batch, each, textInput, quote, Fail, Retry } from './wasmgear-batch.js';

// What Rust's `str::split_whitespace` splits at (Unicode White_Space), and its integers.
const WHITESPACE = /[\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;
const WHOLE = /^[+-]?[0-9]+$/;
const UNSIGNED = /^\+?[0-9]+$/;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

/** `word` as a 64-bit whole number (a BigInt); anything else fails the job for good. */
function wholeNumber(word) {
  if (WHOLE.test(word)) {
    const n = BigInt(word);
    if (n >= I64_MIN && n <= I64_MAX) return n;
  }
  throw new Fail(`${quote(word)} is not a whole number`);
}

/** Waits `ms` milliseconds (JavaScript in a component has no sleep: watch the clock). */
function busy(ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // work
  }
}

/** Sums one job's numbers; `size` is the batch's. */
function add(j, input, size) {
  let words = textInput(input).split(WHITESPACE).filter((word) => word !== '');
  if (words[0] === 'sleep') {
    if (words.length < 2 || !UNSIGNED.test(words[1]) || BigInt(words[1]) >= 1n << 64n) {
      throw new Fail('`sleep` takes the milliseconds to sleep');
    }
    if (j.attempt === 1) busy(Number(words[1]));
    words = words.slice(2);
  }
  if (words[0] === 'flaky') {
    words = words.slice(1);
    if (j.attempt === 1) throw new Retry('flaky on its first attempt');
  }
  let total = 0n;
  for (const word of words) {
    total += wholeNumber(word);
    if (total < I64_MIN || total > I64_MAX) throw new Fail('the sum does not fit 64 bits');
  }
  return `${total} (in a batch of ${size})`;
}

/** Sums each job of the batch. */
function sumBatch(jobs) {
  return each(jobs, (j, input) => add(j, input, jobs.length));
}

export const batchHandler = batch(sumBatch);
