'use strict';

/**
 * Acknowledged means replicated, when asked (the Rust client's crates/client/src/replication.rs).
 *
 * Redis replicates asynchronously: a primary that fails right after a write may take it
 * with it, and a replica promoted in its place never saw it. A write that must survive that
 * is followed, on the same connection, by `WAIT N TIMEOUT`, which answers once N replicas
 * have confirmed every write the connection made (or the timeout passed, with how many
 * did). `minReplicas` is how many a client asks for; a function's own `min_replicas`
 * setting (which the enqueue script's reply carries) can ask for more.
 *
 * A write whose replicas fall short is sent again with its call id: on the same primary it
 * is answered as the first time and written once; on a primary promoted without it, it is
 * written there. When the replicas still fall short the caller gets NotReplicatedError.
 * What needs no server lives here; lib/client.js sends the calls.
 */

const { BadInputError, NotReplicatedError } = require('./errors');
const { LIMITS } = require('./options');

/** How many times a write is sent (with its call id) before replicas that fall short are reported. */
const CONFIRM_ATTEMPTS = 3;

const shown = (value) => JSON.stringify(value) ?? String(value);

/**
 * The connect options `minReplicas` (0 to LIMITS.MAX_MIN_REPLICAS; 0, the default, asks for
 * none) and `minReplicasTimeoutMs` (at least 1 ms, less than the command timeout, as WAIT
 * holds the connection that long and must answer within it; by default
 * LIMITS.MIN_REPLICAS_TIMEOUT_MS, or just under a shorter command timeout), checked:
 * `{count, timeoutMs}`. Throws BadInputError.
 */
function minReplicasOf(count, timeoutMs, commandTimeoutMs = LIMITS.RESPONSE_TIMEOUT_MS) {
  const refuse = (text) => new BadInputError(`invalid connect option ${text}`);
  const wanted = count ?? 0;
  if (typeof wanted !== 'number' || !Number.isSafeInteger(wanted) || wanted < 0 || wanted > LIMITS.MAX_MIN_REPLICAS) {
    throw refuse(
      `minReplicas: ${shown(wanted)} is not a whole number 0 to ${LIMITS.MAX_MIN_REPLICAS} ` +
        '(how many replicas must confirm each write of jobs; 0 asks for none)',
    );
  }
  if (timeoutMs === undefined || timeoutMs === null) {
    // A function's own setting may ask for replicas whatever the client's count.
    const ms = Math.max(1, Math.min(LIMITS.MIN_REPLICAS_TIMEOUT_MS, commandTimeoutMs - 1));
    return Object.freeze({ count: wanted, timeoutMs: ms });
  }
  if (typeof timeoutMs !== 'number' || !Number.isSafeInteger(timeoutMs) || timeoutMs < 1) {
    throw refuse(
      `minReplicasTimeoutMs: ${shown(timeoutMs)} is not a whole number of ms >= 1 (WAIT with 0 waits forever)`,
    );
  }
  if (timeoutMs >= commandTimeoutMs) {
    throw refuse(
      `minReplicasTimeoutMs: ${timeoutMs} ms is not less than the command timeout (${commandTimeoutMs} ms), ` +
        'which a WAIT for the replicas must answer within',
    );
  }
  return Object.freeze({ count: wanted, timeoutMs });
}

/** The function's own `min_replicas` setting, the 4th element of the enqueue script's reply (0 when unset). */
function enqueueSetting(reply) {
  const n = Number(Array.isArray(reply) ? reply[3] : 0);
  return Number.isSafeInteger(n) && n > 0 ? n : 0;
}

/** What a write of `count` jobs of function `fn` is called in NotReplicatedError. */
function enqueueWhat(fn, count) {
  return count === 1 ? `the enqueue of a job of ${fn}` : `the enqueue of ${count} jobs of ${fn}`;
}

/** The error for a write `what` that `confirmed` of `wanted` replicas confirmed within `timeoutMs`. */
function notReplicated(what, wanted, confirmed, timeoutMs) {
  return new NotReplicatedError(
    `${what} was written to the Redis primary, but only ${confirmed} of the ${wanted} replicas asked for ` +
      `confirmed it within ${timeoutMs} ms, even when sent again: if the primary fails now it may be lost. ` +
      'Check the replicas (INFO replication on the primary); the write is safe to send again ' +
      '(enqueue with a uniq key to be sure of one copy)',
    { what, wanted, confirmed, timeoutMs },
  );
}

/**
 * Sends a call that carries a call id and has it confirmed by `min.count` replicas, or by as
 * many as the function's own setting asks (`functionSetting(reply)`), whichever is more:
 * `send()` sends it alone and resolves its reply; `sendWaiting(wanted, timeoutMs)` sends it
 * with `WAIT wanted timeoutMs` right after it on the same connection and resolves `[reply,
 * replicas]`. With replicas asked for, the call goes with its WAIT; when they fall short
 * (or the function asks for more than the client), the same call is sent again (answered
 * as the first time, or written again on a primary that lost it), CONFIRM_ATTEMPTS sends
 * in all. Rejects NotReplicatedError (naming the write `what()`) when they still fall short.
 */
async function invokeConfirmed(what, min, send, sendWaiting, functionSetting) {
  let wanted = min.count;
  let confirmed = 0;
  for (let attempt = 0; attempt < CONFIRM_ATTEMPTS; attempt += 1) {
    if (wanted === 0) {
      const reply = await send();
      wanted = functionSetting(reply);
      if (wanted === 0) return reply;
      // The function asks for replicas: the call again (answered from what it remembered)
      // with its WAIT.
      continue;
    }
    const [reply, replicas] = await sendWaiting(wanted, min.timeoutMs);
    wanted = Math.max(wanted, functionSetting(reply));
    if (replicas >= wanted) return reply;
    confirmed = replicas;
  }
  throw notReplicated(what(), wanted, confirmed, min.timeoutMs);
}

module.exports = {
  CONFIRM_ATTEMPTS,
  minReplicasOf,
  enqueueSetting,
  enqueueWhat,
  notReplicated,
  invokeConfirmed,
};
