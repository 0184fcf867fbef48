'use strict';

// Trace contexts carried with jobs (issue 41), against a real redis-server, a real OTLP
// receiver (crates/testkit's `otlp-receiver`) and a real `wasmgear worker` exporting its spans
// to it: the client's `send FUNCTION` producer span (OpenTelemetry's SDK with an in-memory
// exporter, in this process) is the parent of the worker's `process FUNCTION` span; a remote
// context the program set is carried (with its tracestate); explicit `traceparent` and
// `tracestate` options win; bad ones are refused with the Rust client's sentences, nothing
// written; and without `@opentelemetry/api` the client works and carries nothing.

const { describe, it, before, after, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const Redis = require('ioredis');

const otel = require('@opentelemetry/api');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');

const { Client, BadInputError, LIMITS } = require('..');
const { startRedis, startWorker, startOtlpReceiver, until } = require('../test-support/harness');

const ROOT = path.join(__dirname, '..');
const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const SPAN_ID = '00f067aa0ba902b7';
const FORM =
  'is not a W3C traceparent: give 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, in lower case, the ids not all zeros';
const BAD_STATE =
  'invalid job option: tracestate is not a W3C tracestate: give at most 512 bytes of printable ASCII (key=value members separated by commas)';

/** The message a refused traceparent gets. */
const badParent = (given) => `invalid job option: traceparent ${JSON.stringify(given)} ${FORM}`;

/** Random lower-case hex of `bytes` bytes (never all zeros in practice). */
const hex = (bytes) => require('node:crypto').randomBytes(bytes).toString('hex');

describe('tracing (OpenTelemetry)', { timeout: 600000 }, () => {
  let redis;
  let receiver;
  let worker;
  let client;
  let contextManager;
  let provider = null;
  const exporter = new InMemorySpanExporter();

  before(async () => {
    redis = await startRedis();
    receiver = await startOtlpReceiver();
    worker = await startWorker(redis.url, ['echo'], 4, {}, {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });
    client = await Client.connect(redis.url);
    // A context manager from the start (context.with carries the active context through
    // await); the SDK's tracer provider only once the tests without one have run.
    contextManager = new AsyncLocalStorageContextManager().enable();
    assert.ok(otel.context.setGlobalContextManager(contextManager));
  });

  after(async () => {
    if (client) await client.close();
    if (worker) await worker.stop();
    if (receiver) await receiver.stop();
    if (redis) await redis.stop();
    otel.trace.disable();
    otel.context.disable();
    if (provider) await provider.shutdown();
  });

  beforeEach(() => exporter.reset());

  /** Registers the SDK: every span made from now on is recorded, and exported to `exporter`. */
  function registerSdk() {
    if (provider) return;
    provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    assert.ok(otel.trace.setGlobalTracerProvider(provider));
  }

  /** The worker's span of job `id`'s first attempt, once the receiver has it. */
  async function processSpan(id) {
    return until(
      `the worker's process span of ${id} at the OTLP receiver`,
      async () =>
        (await receiver.spans()).find(
          (span) =>
            span.kind === 'consumer' &&
            span.attributes['messaging.message.id'] === id &&
            span.attributes['wasmgear.job.attempt'] === '1',
        ),
      { timeoutMs: 60000, everyMs: 100 },
    );
  }

  /** The finished spans named `send FN` the client made (in this process). */
  const sendSpans = (fn = 'echo') => exporter.getFinishedSpans().filter((span) => span.name === `send ${fn}`);

  /** A remote span context, as a program continuing a trace it was handed would set it. */
  function remote(traceState = 'vendor=value') {
    return otel.trace.wrapSpanContext({
      traceId: hex(16),
      spanId: hex(8),
      traceFlags: otel.TraceFlags.SAMPLED,
      isRemote: true,
      traceState: otel.createTraceState(traceState),
    });
  }

  /** Runs `body` with `span` the active span. */
  const within = (span, body) => otel.context.with(otel.trace.setSpan(otel.context.active(), span), body);

  it('without an SDK: a remote context the program set is carried as it is, and no context carries nothing', async () => {
    const parent = remote();
    const { traceId, spanId } = parent.spanContext();
    const { id } = await within(parent, () => client.enqueue('echo', 'remote, no sdk'));
    const { id: plain } = await client.enqueue('echo', 'no context');
    const job = await client.wait(id, { timeoutMs: 60000 });
    assert.equal(job.record.trace, `00-${traceId}-${spanId}-01`);
    assert.equal(job.record.tracestate, 'vendor=value');
    const span = await processSpan(id);
    assert.equal(span.name, 'process echo');
    assert.equal(span.trace_id, traceId);
    assert.equal(span.parent_span_id, spanId);
    // Outside any span: nothing is carried, and the worker's span is a root of its own.
    const untraced = await client.wait(plain, { timeoutMs: 60000 });
    assert.equal(untraced.record.trace, undefined);
    assert.equal(untraced.record.tracestate, undefined);
    const root = await processSpan(plain);
    assert.equal(root.parent_span_id, '');
    assert.notEqual(root.trace_id, traceId);
    assert.equal(sendSpans().length, 0, 'no SDK: nothing recorded');
  });

  it("with an SDK: the client's send span is a child of the active span and the parent of the worker's", async () => {
    registerSdk();
    const tracer = otel.trace.getTracer('tracing.test');
    let request;
    const { id } = await tracer.startActiveSpan('request', async (span) => {
      request = span;
      try {
        return await client.enqueue('echo', 'traced');
      } finally {
        span.end();
      }
    });
    assert.equal(id, 'echo:3');
    const { traceId, spanId: requestId } = request.spanContext();
    const [send] = sendSpans();
    assert.ok(send, `a send echo span: ${exporter.getFinishedSpans().map((s) => s.name)}`);
    assert.equal(sendSpans().length, 1);
    assert.equal(send.kind, otel.SpanKind.PRODUCER);
    assert.equal(send.spanContext().traceId, traceId);
    assert.equal(send.parentSpanContext?.spanId, requestId);
    assert.deepEqual(send.attributes, {
      'messaging.system': 'wasmgear',
      'messaging.operation.type': 'send',
      'messaging.operation.name': 'send',
      'messaging.destination.name': 'echo',
      'messaging.batch.message_count': 1,
    });
    const sendId = send.spanContext().spanId;

    const job = await client.wait(id, { timeoutMs: 60000 });
    assert.equal(job.record.trace, `00-${traceId}-${sendId}-01`);
    assert.equal(job.record.tracestate, undefined);
    const span = await processSpan(id);
    assert.equal(span.name, 'process echo');
    assert.equal(span.kind, 'consumer');
    assert.equal(span.attributes['messaging.message.id'], 'echo:3');
    assert.equal(span.attributes['wasmgear.job.attempt'], '1');
    assert.equal(span.trace_id, traceId);
    assert.equal(span.parent_span_id, sendId);
    assert.equal(span.error, false);
  });

  it('with an SDK: a remote context set by hand is continued, its tracestate carried', async () => {
    registerSdk();
    const parent = remote();
    const { traceId, spanId: remoteId } = parent.spanContext();
    const { id } = await within(parent, () => client.enqueue('echo', 'remote'));
    const [send] = sendSpans();
    assert.ok(send);
    // The send span continues the remote trace, as a child of the remote span.
    assert.equal(send.spanContext().traceId, traceId);
    assert.equal(send.parentSpanContext?.spanId, remoteId);
    const sendId = send.spanContext().spanId;
    assert.notEqual(sendId, remoteId);
    const job = await client.wait(id, { timeoutMs: 60000 });
    assert.equal(job.record.trace, `00-${traceId}-${sendId}-01`);
    assert.equal(job.record.tracestate, 'vendor=value');
    const span = await processSpan(id);
    assert.equal(span.trace_id, traceId);
    assert.equal(span.parent_span_id, sendId);
  });

  it('explicit traceparent and tracestate options win, on enqueue, enqueueMany, batches and flows', async () => {
    registerSdk();
    const traceId = hex(16);
    const spanId = hex(8);
    const given = `00-${traceId}-${spanId}-01`;
    const tracer = otel.trace.getTracer('tracing.test');
    const written = await tracer.startActiveSpan('request', async (span) => {
      try {
        // Blanks around are trimmed; a later version is kept as version 00 of its first fields.
        const one = await client.enqueue('echo', 'explicit', { traceparent: ` ${given}\t`, tracestate: ' k=v ' });
        const many = await client.enqueueMany('echo', [
          { input: 'mine', traceparent: `cc-${traceId}-${spanId}-01-later`, tracestate: '' },
          'the send span\'s',
        ]);
        const batch = await client.batch([{ function: 'echo', input: 'b', options: { traceparent: given, tracestate: 'b=1' } }]);
        const flow = await client.submitFlow({
          name: 'traced',
          jobs: { a: { function: 'echo', input: 'f', traceparent: given }, z: { function: 'echo', after: ['a'] } },
        });
        return { one, many, batch, flow };
      } finally {
        span.end();
      }
    });
    const span = await processSpan(written.one.id);
    assert.equal(span.trace_id, traceId);
    assert.equal(span.parent_span_id, spanId);
    const record = async (id) => (await client.wait(id, { timeoutMs: 60000 })).record;
    const one = await record(written.one.id);
    assert.equal(one.trace, given);
    assert.equal(one.tracestate, 'k=v');
    const [mine, theirs] = await Promise.all(written.many.map((job) => record(job.id)));
    assert.equal(mine.trace, given);
    assert.equal(mine.tracestate, undefined);
    // The job without an option of its own carries the bulk's send span (one for the call).
    const sends = sendSpans();
    const bulk = sends.find((s) => s.attributes['messaging.batch.message_count'] === 2);
    assert.ok(bulk, `a send span of 2 jobs: ${sends.map((s) => JSON.stringify(s.attributes))}`);
    assert.equal(theirs.trace, `00-${bulk.spanContext().traceId}-${bulk.spanContext().spanId}-01`);
    assert.notEqual(bulk.spanContext().traceId, traceId);
    const batched = await record(written.batch.jobs[0]);
    assert.equal(batched.trace, given);
    assert.equal(batched.tracestate, 'b=1');
    const a = await record(written.flow.jobs.a);
    assert.equal(a.trace, given);
    // The flow's other job carries the flow's send span of echo (both jobs: one call).
    const z = await record(written.flow.jobs.z);
    const flowSend = sends.filter((s) => s.attributes['messaging.batch.message_count'] === 2).find((s) => s !== bulk);
    assert.ok(flowSend);
    assert.equal(z.trace, `00-${flowSend.spanContext().traceId}-${flowSend.spanContext().spanId}-01`);
    const worked = await processSpan(written.flow.jobs.a);
    assert.equal(worked.parent_span_id, spanId);
  });

  it('refuses a bad traceparent or tracestate with the Rust sentences, writing nothing', async () => {
    registerSdk();
    // A server of its own, no worker: DBSIZE counts what the refused calls wrote.
    const empty = await startRedis();
    const own = await Client.connect(empty.url);
    const admin = new Redis(empty.url);
    try {
      const good = `00-${TRACE_ID}-${SPAN_ID}-01`;
      const long = `00-${TRACE_ID}-${SPAN_ID}-01-${'x'.repeat(100)}`;
      const cases = [
        [{ traceparent: 'nope' }, badParent('nope')],
        [{ traceparent: '' }, badParent('')],
        [{ traceparent: good.toUpperCase() }, badParent(good.toUpperCase())],
        [{ traceparent: `00-${'0'.repeat(32)}-${SPAN_ID}-01` }, badParent(`00-${'0'.repeat(32)}-${SPAN_ID}-01`)],
        [{ traceparent: `00-${TRACE_ID}-${'0'.repeat(16)}-01` }, badParent(`00-${TRACE_ID}-${'0'.repeat(16)}-01`)],
        [{ traceparent: `ff${good.slice(2)}` }, badParent(`ff${good.slice(2)}`)],
        [{ traceparent: `${good}-more` }, badParent(`${good}-more`)],
        [{ traceparent: `cc${good.slice(2)}x` }, badParent(`cc${good.slice(2)}x`)],
        [{ traceparent: good.slice(0, -1) }, badParent(good.slice(0, -1))],
        // The message quotes the value as given, its first 80 characters.
        [{ traceparent: long }, badParent(long.slice(0, 80))],
        [{ traceparent: good, tracestate: `k=${'v'.repeat(LIMITS.MAX_TRACESTATE_BYTES - 1)}` }, BAD_STATE],
        [{ traceparent: good, tracestate: 'k=v\nx' }, BAD_STATE],
        [{ traceparent: good, tracestate: 'k=é' }, BAD_STATE],
        [{ traceparent: good, tracestate: 'k=\u007f' }, BAD_STATE],
        [{ tracestate: 'k=v' }, 'invalid job option: tracestate goes with traceparent: give traceparent too'],
      ];
      for (const [options, expected] of cases) {
        await assert.rejects(own.enqueue('echo', 'x', options), (error) => {
          assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
          assert.equal(error.exitCode, 2);
          assert.equal(error.message, expected);
          return true;
        });
      }
      // In a bulk, a batch or a flow: the job is named, and nothing of the call is written.
      await assert.rejects(
        own.enqueueMany('echo', ['fine', { input: 'y', traceparent: 'nope' }]),
        { name: 'BadInputError', message: `job 2 of the batch: ${badParent('nope')}` },
      );
      await assert.rejects(
        own.batch([{ function: 'echo', options: { traceparent: good, tracestate: 'k=\t\u0001' } }]),
        { name: 'BadInputError', message: `job 1 of the batch: ${BAD_STATE}` },
      );
      await assert.rejects(
        own.submitFlow({ name: 'bad', jobs: { a: { function: 'echo', traceparent: 'nope' } } }),
        { name: 'BadInputError', message: `invalid job option: job "a": traceparent "nope" ${FORM}` },
      );
      await assert.rejects(
        own.submitFlow({ name: 'bad', jobs: { a: { function: 'echo', traceparent: 7 } } }),
        { name: 'BadInputError', message: 'invalid job option: the flow does not read: jobs.a.traceparent: must be a string' },
      );
      assert.equal(await admin.dbsize(), 0, `a refused call wrote nothing: ${await admin.keys('*')}`);
      assert.equal(sendSpans().length, 0, 'no send span for a refused call');
      // The largest tracestate goes through, as it is.
      const widest = `k=${'v'.repeat(LIMITS.MAX_TRACESTATE_BYTES - 2)}`;
      const { id } = await own.enqueue('echo', 'x', { traceparent: good, tracestate: widest });
      const record = (await own.status(id)).record;
      assert.equal(record.trace, good);
      assert.equal(record.tracestate, widest);
    } finally {
      admin.disconnect();
      await own.close();
      await empty.stop();
    }
  });

  it('without @opentelemetry/api (the ES module entry, in a process where it cannot be loaded): enqueue works and carries nothing', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-no-otel-'));
    try {
      // A preload that makes the package unresolvable, as if it were not installed.
      const hide = path.join(dir, 'hide.cjs');
      fs.writeFileSync(
        hide,
        `const Module = require('node:module');
const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === '@opentelemetry/api' || request.startsWith('@opentelemetry/api/')) {
    const error = new Error("Cannot find module '" + request + "'");
    error.code = 'MODULE_NOT_FOUND';
    throw error;
  }
  return resolve.call(this, request, ...rest);
};
`,
      );
      const program = path.join(dir, 'produce.mjs');
      fs.writeFileSync(
        program,
        `import { createRequire } from 'node:module';
import { Client } from ${JSON.stringify(pathToFileURL(path.join(ROOT, 'index.mjs')).href)};
const require = createRequire(${JSON.stringify(path.join(ROOT, 'index.js'))});
let hidden = false;
try { require('@opentelemetry/api'); } catch { hidden = true; }
const { otelLoaded } = require('./lib/tracing.js');
const client = await Client.connect(process.argv[2]);
const plain = await client.enqueue('echo', 'no api');
const explicit = await client.enqueue('echo', 'explicit', { traceparent: process.argv[3], tracestate: 'k=v' });
await client.close();
console.log(JSON.stringify({ hidden, otelLoaded, plain: plain.id, explicit: explicit.id }));
`,
      );
      const given = `00-${hex(16)}-${hex(8)}-00`;
      const out = await new Promise((resolve, reject) => {
        execFile(
          process.execPath,
          ['--require', hide, program, redis.url, given],
          { cwd: dir, timeout: 60000 },
          (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)),
        );
      });
      const result = JSON.parse(out);
      assert.equal(result.hidden, true, 'the package is hidden in the child');
      assert.equal(result.otelLoaded, false);
      const plain = await client.wait(result.plain, { timeoutMs: 60000 });
      assert.equal(plain.output.toString(), 'no api');
      assert.equal(plain.record.trace, undefined);
      assert.equal(plain.record.tracestate, undefined);
      assert.equal((await processSpan(result.plain)).parent_span_id, '');
      // An explicit context needs no package (unsampled: the worker's span is not exported).
      const explicit = await client.wait(result.explicit, { timeoutMs: 60000 });
      assert.equal(explicit.record.trace, given);
      assert.equal(explicit.record.tracestate, 'k=v');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
