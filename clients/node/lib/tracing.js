'use strict';

/**
 * The W3C trace context a job carries (PROTOCOL.md; the Rust client's
 * crates/proto/src/trace.rs and crates/client/src/propagation.rs): the `traceparent` of the
 * span the job was made in and the `tracestate` that came with it, sent as enqueue's `trace`
 * and `tracestate` options, so that the worker's `process FUNCTION` span of each attempt is a
 * child of that span.
 *
 * Where it comes from: an explicit `traceparent` (and `tracestate`) option, checked here as
 * the Rust client checks one, word for word; else, when `@opentelemetry/api` can be loaded
 * (an optional peer dependency), the `send FUNCTION` producer span this client opens for each
 * write of jobs (`producing`), else the active context's span (a remote one the program
 * set); else none. Without the package, nothing is opened and nothing is carried.
 */

const { BadInputError } = require('./errors');
const protocol = require('./protocol');

/** `@opentelemetry/api`, or null when it cannot be loaded (it is optional). Loaded once. */
const api = (() => {
  try {
    return require('@opentelemetry/api');
  } catch {
    return null;
  }
})();

/** The package's version, as the tracer's. */
const VERSION = (() => {
  try {
    return require('../package.json').version;
  } catch {
    return undefined;
  }
})();

/** The longest tracestate kept, bytes (the manifest's `max_tracestate_bytes`). */
const MAX_TRACESTATE_BYTES = protocol.limits().MAX_TRACESTATE_BYTES ?? 512;

/** The enqueue options that place a job (a flow's or batch's): sent after the trace. */
const PLACEMENT = new Set(['number', 'flow', 'batch', 'dependent']);

function refuse(text) {
  return new BadInputError(`invalid job option: ${text}`);
}

/** Whether `s` is `length` lower-case hex digits (not all zeros when `nonzero`). */
function isHex(s, length, nonzero) {
  return s.length === length && /^[0-9a-f]*$/.test(s) && !(nonzero && /^0*$/.test(s));
}

/** `s` without the spaces and tabs around it. */
function trimBlanks(s) {
  return s.replace(/^[ \t]+/, '').replace(/[ \t]+$/, '');
}

/**
 * Checks a traceparent (and an optional tracestate) as the Rust `TraceContext::new` does:
 * version-00 `00-TRACEID-SPANID-FLAGS` in lower-case hex, the ids not all zeros (a later
 * version is read by its first four fields); a tracestate of at most MAX_TRACESTATE_BYTES
 * bytes of printable ASCII (empty or blank: none). Returns `{traceparent, tracestate}`, the
 * traceparent as version 00 and `tracestate` undefined when there is none; throws
 * BadInputError with the Rust client's sentence.
 */
function traceContext(traceparent, tracestate) {
  if (typeof traceparent !== 'string') {
    throw refuse(`traceparent ${JSON.stringify(traceparent) ?? String(traceparent)} must be a string`);
  }
  const refused = () =>
    refuse(
      `traceparent ${JSON.stringify(Array.from(traceparent).slice(0, 80).join(''))} is not a W3C traceparent: ` +
        'give 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, in lower case, the ids not all zeros',
    );
  const value = trimBlanks(traceparent);
  if (value.length < 55) throw refused();
  const fields = value.slice(0, 55).split('-');
  if (fields.length !== 4) throw refused();
  const [version, traceId, spanId, flags] = fields;
  const later = value.length > 55;
  if (
    !isHex(version, 2, false) ||
    version === 'ff' ||
    (version === '00' && later) ||
    (later && value[55] !== '-') ||
    !isHex(traceId, 32, true) ||
    !isHex(spanId, 16, true) ||
    !isHex(flags, 2, false)
  ) {
    throw refused();
  }
  let state;
  if (tracestate !== undefined && tracestate !== null) {
    const badState = () =>
      refuse(
        `tracestate is not a W3C tracestate: give at most ${MAX_TRACESTATE_BYTES} bytes of printable ASCII ` +
          '(key=value members separated by commas)',
      );
    if (typeof tracestate !== 'string') throw badState();
    const trimmed = trimBlanks(tracestate);
    if (trimmed !== '') {
      if (/[^\x20-\x7e]/.test(trimmed) || trimmed.length > MAX_TRACESTATE_BYTES) throw badState();
      state = trimmed;
    }
  }
  return { traceparent: `00-${traceId}-${spanId}-${flags}`, tracestate: state };
}

/**
 * The named options of the `traceparent` and `tracestate` options (`trace`, `tracestate`),
 * checked; none when no traceparent is given. A tracestate goes only with a traceparent.
 */
function traceOptions(options) {
  const given = (value) => value !== undefined && value !== null;
  if (!given(options.traceparent)) {
    if (given(options.tracestate)) throw refuse('tracestate goes with traceparent: give traceparent too');
    return [];
  }
  return namedOf(traceContext(options.traceparent, options.tracestate));
}

/** A checked context as enqueue's named options. */
function namedOf(context) {
  const named = ['trace', context.traceparent];
  if (context.tracestate !== undefined) named.push('tracestate', context.tracestate);
  return named;
}

/**
 * A job's named options carrying `context` (from `producing`) unless they name a trace of
 * their own: the `trace` pair goes after the job's options and before those that place it
 * (`number`, `flow`, `batch`, `dependent`), in the order the Rust client sends them.
 */
function withTrace(named, context) {
  if (!context) return named;
  let at = named.length;
  for (let i = 0; i < named.length; i += 2) {
    if (named[i] === 'trace') return named;
    if (at === named.length && PLACEMENT.has(named[i])) at = i;
  }
  return [...named.slice(0, at), ...namedOf(context), ...named.slice(at)];
}

/** An OpenTelemetry span context as the context a job carries, or null (invalid, or not one). */
function ofSpanContext(spanContext) {
  if (!spanContext) return null;
  const flags = (spanContext.traceFlags & 1) === 1 ? '01' : '00';
  const state = spanContext.traceState ? spanContext.traceState.serialize() : undefined;
  try {
    return traceContext(`00-${spanContext.traceId}-${spanContext.spanId}-${flags}`, state);
  } catch {
    return null;
  }
}

/**
 * Runs `body(context)` for a write of `count` jobs of function `fn`, `context` being the
 * trace context its jobs carry (null: none). With `@opentelemetry/api` loaded, the write is
 * a `send FN` span of kind producer (OpenTelemetry's messaging conventions), a child of the
 * active context, active while `body` runs and ended once it has settled; the context is
 * that span's when it is valid (an SDK is registered), else the active context's span's (a
 * remote one the program set), else none. Without the package: `body(null)`.
 */
async function producing(fn, count, body) {
  if (!api) return body(null);
  const { trace, context, SpanKind, SpanStatusCode } = api;
  const parent = context.active();
  const span = trace.getTracer('wasmgear', VERSION).startSpan(
    `send ${fn}`,
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        'messaging.system': 'wasmgear',
        'messaging.operation.type': 'send',
        'messaging.operation.name': 'send',
        'messaging.destination.name': fn,
        'messaging.batch.message_count': count,
      },
    },
    parent,
  );
  const own = span.spanContext();
  const active = trace.getSpanContext(parent);
  let carried = null;
  if (api.isSpanContextValid(own)) carried = ofSpanContext(own);
  else if (active && api.isSpanContextValid(active)) carried = ofSpanContext(active);
  try {
    return await context.with(trace.setSpan(parent, span), () => body(carried));
  } catch (error) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: String((error && error.message) || error) });
    if (error instanceof Error) span.recordException(error);
    throw error;
  } finally {
    span.end();
  }
}

module.exports = { traceContext, traceOptions, withTrace, producing, ofSpanContext, otelLoaded: api !== null };
