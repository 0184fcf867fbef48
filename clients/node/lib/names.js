'use strict';

const { BadInputError } = require('./errors');
const protocol = require('./protocol');

/** The longest function name (the manifest's `max_function_name_len`). */
const MAX_FUNCTION_NAME_LEN = protocol.limits().MAX_FUNCTION_NAME_LEN;
const FUNCTION_NAME = new RegExp(`^[A-Za-z0-9_.-]{1,${MAX_FUNCTION_NAME_LEN}}$`);

/**
 * Checks a function name (1 to MAX_FUNCTION_NAME_LEN characters from A-Z a-z 0-9 _ - .) and returns it.
 * @param {unknown} name
 * @returns {string}
 */
function checkFunction(name) {
  if (typeof name !== 'string' || !FUNCTION_NAME.test(name)) {
    throw new BadInputError(
      `invalid function name ${JSON.stringify(name)}: use 1 to ${MAX_FUNCTION_NAME_LEN} ` +
        "characters from A-Z, a-z, 0-9, '_', '-' and '.'",
    );
  }
  return name;
}

/**
 * Splits a job id `FUNCTION:N` into its function and number (N >= 1, as decimal text).
 * @param {unknown} id
 * @param {string} [what] what the id is, for the message
 * @returns {{id: string, fn: string, number: string}}
 */
function parseJobId(id, what = 'job id') {
  const bad = () =>
    new BadInputError(
      `invalid ${what} ${JSON.stringify(id)}: a job id looks like \`echo:42\` (function, colon, number)`,
    );
  if (typeof id !== 'string') throw bad();
  const colon = id.lastIndexOf(':');
  if (colon < 0) throw bad();
  const fn = id.slice(0, colon);
  const number = id.slice(colon + 1);
  if (!FUNCTION_NAME.test(fn) || !/^[0-9]{1,20}$/.test(number) || /^0+$/.test(number)) {
    throw bad();
  }
  const canonical = number.replace(/^0+/, '');
  if (BigInt(canonical) > 18446744073709551615n) throw bad();
  return { id: `${fn}:${canonical}`, fn, number: canonical };
}

/** Whether `name` is a function name. */
function isFunction(name) {
  return typeof name === 'string' && FUNCTION_NAME.test(name);
}

module.exports = { checkFunction, isFunction, parseJobId, MAX_FUNCTION_NAME_LEN };
