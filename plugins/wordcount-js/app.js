// `wordcount-js`: counts the words, lines and characters of a text.
//
// Input is JSON `{"text": "..."}`. The text is processed in chunks of 1000 characters (Unicode
// code points), reporting progress `(i, n, "chunk i/n")` after each and checking for
// cancellation before each. The output is compact JSON
// `{"words":W,"lines":L,"chars":C,"top":[["word",count],...]}`: words are maximal runs of
// characters other than space, \t, \n, \r, \x0b and \x0c; lines counts '\n'; chars counts code
// points; top holds the 3 most frequent words (ASCII-lowercased), by count descending, then
// word ascending in code point (= UTF-8 byte) order. `wordcount-python` computes exactly the
// same bytes.
//
// Input that is not a JSON object with a string "text" fails the job for good;
// `"fail_retry": true` makes it ask for a retry instead (to test error classes), and
// `"chunk_delay_ms": N` makes it wait N ms before each chunk (a long job to cancel in tests).

import { job, jsonInput, jsonOutput, log, progress, cancelled, Fail, Retry } from './wasmgear.js';

const CHUNK = 1000;
const TOP = 3;
const WORD = /[^ \t\n\r\x0b\x0c]+/g;
const WHITESPACE = ' \t\n\r\x0b\x0c';

function jsonType(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  switch (typeof value) {
    case 'object': return 'an object';
    case 'string': return 'a string';
    case 'boolean': return 'a boolean';
    case 'number': return 'a number';
    default: return 'something else';
  }
}

/** The text to count, from the job's input bytes; throws Fail or Retry. */
function parse(input) {
  const request = jsonInput(input);
  if (request === null || typeof request !== 'object' || Array.isArray(request)) {
    throw new Fail(`wordcount expects a JSON object {"text": "..."}, got ${jsonType(request)}`);
  }
  if (request.fail_retry === true) throw new Retry('asked to retry');
  if (!Object.prototype.hasOwnProperty.call(request, 'text')) {
    throw new Fail('wordcount expects a JSON object {"text": "..."}: "text" is missing');
  }
  const text = request.text;
  if (typeof text !== 'string') throw new Fail(`"text" must be a string, got ${jsonType(text)}`);
  const delay = Number.isInteger(request.chunk_delay_ms) ? request.chunk_delay_ms : 0;
  return { text, delay };
}

/** Waits `ms` milliseconds (JavaScript in a component has no sleep: watch the clock). */
function pause(ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) { /* wait */ }
}

/** The number of code points of `s` (a lone surrogate counts as one). */
function codePoints(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++, n++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
  }
  return n;
}

/** The pieces of `s` of `size` code points each (the last may be shorter). */
function* chunks(s, size) {
  let start = 0;
  let n = 0;
  for (let i = 0; i < s.length; ) {
    const c = s.charCodeAt(i);
    i++;
    if (c >= 0xd800 && c <= 0xdbff && i < s.length) {
      const d = s.charCodeAt(i);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    if (++n === size) {
      yield s.slice(start, i);
      start = i;
      n = 0;
    }
  }
  if (n > 0) yield s.slice(start);
}

/** Compares strings by code point (= UTF-8 byte order), not by UTF-16 unit. */
function compareCodePoints(a, b) {
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    const x = a.codePointAt(i);
    const y = b.codePointAt(j);
    if (x !== y) return x < y ? -1 : 1;
    i += x > 0xffff ? 2 : 1;
    j += y > 0xffff ? 2 : 1;
  }
  if (i < a.length) return 1;
  if (j < b.length) return -1;
  return 0;
}

const asciiLower = (s) => s.replace(/[A-Z]+/g, (m) => m.toLowerCase());

/**
 * Counts `text` chunk by chunk, checking for cancellation before each chunk and reporting
 * progress after each; returns the output object.
 */
function count(text, delay) {
  const counts = new Map();
  let words = 0;
  const add = (word) => {
    words++;
    const key = asciiLower(word);
    counts.set(key, (counts.get(key) || 0) + 1);
  };

  const chars = codePoints(text);
  const total = Math.ceil(chars / CHUNK);
  let carry = []; // the pieces of a word that runs on into the next chunk
  let i = 0;
  for (const chunk of chunks(text, CHUNK)) {
    if (delay > 0) pause(delay);
    if (cancelled()) throw new Fail(`cancelled after ${i} of ${total} chunks`);
    const tokens = chunk.match(WORD) || [];
    if (tokens.length === 1 && tokens[0].length === chunk.length) {
      carry.push(chunk); // no whitespace at all: the word goes on
    } else {
      if (carry.length > 0) {
        if (WHITESPACE.includes(chunk[0])) add(carry.join(''));
        else tokens[0] = carry.join('') + tokens[0];
        carry = [];
      }
      if (tokens.length > 0 && !WHITESPACE.includes(chunk[chunk.length - 1])) {
        carry = [tokens.pop()];
      }
      for (const token of tokens) add(token);
    }
    i++;
    progress(i, total, `chunk ${i}/${total}`);
  }
  if (carry.length > 0) add(carry.join(''));

  const top = [...counts]
    .sort((a, b) => b[1] - a[1] || compareCodePoints(a[0], b[0]))
    .slice(0, TOP);
  let lines = 0;
  for (let k = text.indexOf('\n'); k !== -1; k = text.indexOf('\n', k + 1)) lines++;
  return { words, lines, chars, top };
}

function wordcount(_job, input) {
  const { text, delay } = parse(input);
  log.info(`counting ${codePoints(text)} characters`);
  return jsonOutput(count(text, delay));
}

export const handler = job(wordcount);
