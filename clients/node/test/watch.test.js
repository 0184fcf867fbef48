'use strict';

// Waits on watched jobs, against a real redis-server and a real `wasmgear worker` serving
// copies of echo (`held`) and fail (`failing`): a wait's first read (`wg2_watch`) marks the
// job as waited on (the stored record's `watched`, which `get` never shows); a watched job's
// `finish` event carries its record, and its output when it is at most 1024 bytes of printable
// text (else `output_omitted`); the wait ends with them, without another read of the job
// (MONITOR counts the reads); a job no one waits on has the plain event. The functions are
// paused while a wait starts, so that no job ends before it is watched.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, JobFailedError, JobCancelledError } = require('..');
const { startRedis, startWorker, until } = require('../test-support/harness');

const WAIT = 60000;
const EVENTS = ['wg:{held}:events', 'wg:{failing}:events'];

describe('waits on watched jobs', { timeout: 600000 }, () => {
  let redis;
  let worker;
  let client;
  let admin;
  let listener;
  /** Every event published on EVENTS since the start, in order. */
  const events = [];

  before(async () => {
    redis = await startRedis();
    worker = await startWorker(redis.url, ['held=echo', 'failing=fail']);
    client = await Client.connect(redis.url);
    admin = new Redis(redis.url);
    listener = new Redis(redis.url);
    listener.on('message', (_channel, message) => {
      const value = JSON.parse(message);
      events.push(...(Array.isArray(value) ? value : [value]));
    });
    await listener.subscribe(...EVENTS);
  });

  after(async () => {
    if (client) await client.close();
    if (listener) listener.disconnect();
    if (admin) admin.disconnect();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
  });

  /**
   * The stored record of job `id` (`HGET wg:{F}:jobs N`), as its raw text (the library's own
   * layout: its fields, then a JSON object of the others, `watched` among them).
   */
  async function stored(id) {
    const [fn, number] = id.split(':');
    return admin.hget(`wg:{${fn}}:jobs`, number);
  }

  /** Waits until every job of `ids` is marked as waited on in its stored record. */
  async function watched(ids) {
    for (const id of ids) {
      await until(`job ${id} to be marked as waited on`, async () => (await stored(id)).includes('"watched":true'), {
        timeoutMs: WAIT,
      });
    }
  }

  /** The `finish` event of job `id` (waiting for it). */
  async function finishOf(id) {
    return until(`the finish event of ${id}`, async () => events.find((e) => e.event === 'finish' && e.id === id), {
      timeoutMs: WAIT,
    });
  }

  /**
   * Runs `body()` while MONITOR counts the reads of jobs (`wg2_get` and `wg2_watch`) Redis
   * runs, until an ECHO sent after it returns: resolves `{value, reads}`, `reads(id)` the
   * names of the reads of job `id`, in order.
   */
  async function counting(body) {
    const monitor = await admin.monitor();
    const marker = `reads-counted-${Date.now()}-${Math.random()}`;
    const sent = [];
    let ended = false;
    monitor.on('monitor', (_time, args) => {
      const [command, name, numkeys] = args.map(String);
      if (ended) return;
      if (command.toUpperCase() === 'ECHO' && name === marker) ended = true;
      if (command.toUpperCase() !== 'FCALL' && command.toUpperCase() !== 'FCALL_RO') return;
      if (name !== 'wg2_get' && name !== 'wg2_watch') return;
      const [fn, number] = args.slice(3 + Number(numkeys)).map(String);
      sent.push({ name: name.slice('wg2_'.length), id: `${fn}:${number}` });
    });
    try {
      const value = await body();
      await admin.call('ECHO', marker);
      await until('MONITOR to show the end of the wait', async () => ended, { timeoutMs: WAIT });
      return { value, reads: (id) => sent.filter((read) => read.id === id).map((read) => read.name) };
    } finally {
      monitor.disconnect();
    }
  }

  /**
   * Enqueues `inputs` on `fn` while it is paused, starts `wait` on their ids and lets the jobs
   * run once each is marked as waited on. Resolves the ids and the wait's settlement.
   */
  async function waitedOn(fn, inputs, wait = (ids) => client.wait(ids, { timeoutMs: WAIT })) {
    await client.configure(fn, { paused: true });
    try {
      const ids = (await client.enqueueMany(fn, inputs)).map((job) => job.id);
      for (const id of ids) assert.ok(!(await stored(id)).includes('"watched"'), 'not marked before a wait');
      const waiting = wait(ids).then(
        (value) => ({ value }),
        (error) => ({ error }),
      );
      await watched(ids);
      return { ids, waiting };
    } finally {
      await client.configure(fn, { paused: false });
    }
  }

  it('a wait marks its job as waited on in the stored record; status never shows the mark', async () => {
    await client.configure('held', { paused: true });
    const { id } = await client.enqueue('held', 'marked');
    let waiting;
    try {
      assert.equal((await stored(id)).includes('"watched"'), false);
      waiting = client.wait(id, { timeoutMs: WAIT });
      await watched([id]);
      assert.ok((await stored(id)).includes('"watched"'));
      const queued = await client.status(id);
      assert.equal(queued.state, 'queued');
      assert.equal('watched' in queued.record, false, JSON.stringify(queued.record));
      // The library's own `get` answers the record without it too.
      const raw = await admin.call('FCALL_RO', 'wg2_get', '4', 'wg:{held}:jobs', 'wg:{held}:output', 'wg:{held}:stats',
        'wg:{held}:events', 'held', id.split(':')[1]);
      assert.equal('watched' in JSON.parse(raw[0]), false, raw[0]);
    } finally {
      await client.configure('held', { paused: false });
    }
    const job = await waiting;
    assert.equal(job.state, 'succeeded');
    assert.equal(job.output.toString(), 'marked');
    assert.equal('watched' in job.record, false, JSON.stringify(job.record));
    assert.equal('watched' in (await client.status(id)).record, false);
  });

  it('a small text output comes with the finish event: the wait ends with it, reading nothing more', async () => {
    const text = 'line one\tcolumn two\r\nline two: {"json": [1, 2]}\n';
    const { value: settled, reads } = await counting(async () => {
      const { waiting } = await waitedOn('held', [text]);
      return waiting;
    });
    assert.equal(settled.error, undefined, settled.error && settled.error.stack);
    const [job] = settled.value;
    const event = await finishOf(job.id);
    assert.equal(event.state, 'succeeded');
    assert.equal(event.output, text);
    assert.equal('output_omitted' in event, false, JSON.stringify(event));
    assert.equal(event.record.state, 'succeeded');
    assert.equal('watched' in event.record, false, JSON.stringify(event.record));
    // The wait's Job is what status reads afterwards: the same record and output.
    const status = await client.status(job.id);
    assert.deepEqual(event.record, status.record);
    assert.deepEqual(job, status);
    assert.deepEqual(job.output, Buffer.from(text));
    assert.equal(job.history.length, 1);
    assert.equal(job.history[0].outcome, 'succeeded');
    // One read, the first (`watch`); the end came with the event.
    assert.deepEqual(reads(job.id), ['watch']);
  });

  it('a large or binary output is omitted from the event: the wait reads it, for each of several ids', async () => {
    const inputs = [
      'a'.repeat(1024), // at the limit: carried
      'b'.repeat(1025), // over it
      'c'.repeat(5000),
      Buffer.from([0, 1, 2, 127, 200, 255, 10]), // not printable text
      Buffer.from('caf\u00e9 is not ASCII'),
      '', // an empty output: carried
    ];
    const { value: settled, reads } = await counting(async () => {
      const { waiting } = await waitedOn('held', inputs);
      return waiting;
    });
    assert.equal(settled.error, undefined, settled.error && settled.error.stack);
    const jobs = settled.value;
    assert.equal(jobs.length, inputs.length);
    const carried = [true, false, false, false, false, true];
    for (const [i, job] of jobs.entries()) {
      const input = Buffer.from(inputs[i]);
      assert.equal(job.state, 'succeeded');
      assert.deepEqual(job.output, input, `job ${i + 1}'s output`);
      const status = await client.status(job.id);
      assert.deepEqual(job, status, `job ${i + 1}`);
      const event = await finishOf(job.id);
      assert.deepEqual(event.record, status.record, `job ${i + 1}'s event's record`);
      if (carried[i]) {
        assert.equal(event.output, input.toString('latin1'), `job ${i + 1}'s event carries its output`);
        assert.equal('output_omitted' in event, false);
        assert.deepEqual(reads(job.id), ['watch'], `job ${i + 1}: no read after the event`);
      } else {
        assert.equal(event.output_omitted, true, `job ${i + 1}'s event omits its output: ${JSON.stringify(event).slice(0, 200)}`);
        assert.equal('output' in event, false);
        // Read first, then once more for the output the event did not carry.
        const read = reads(job.id);
        assert.ok(read.length >= 2 && read.every((name) => name === 'watch'), `job ${i + 1}: ${read}`);
      }
    }
  });

  it('a failed or cancelled job ends the wait with its record from the event, without output', async () => {
    const { value: settled, reads } = await counting(async () => {
      const { waiting } = await waitedOn('failing', ['on purpose'], (ids) => client.wait(ids[0], { timeoutMs: WAIT }));
      return waiting;
    });
    assert.ok(settled.error instanceof JobFailedError, String(settled.error));
    const failed = settled.error.job;
    assert.equal(failed.state, 'failed');
    assert.equal(failed.output, null);
    assert.match(failed.error.message, /failed on purpose: on purpose/);
    const event = await finishOf(failed.id);
    assert.equal(event.state, 'failed');
    assert.equal(event.record.state, 'failed');
    assert.equal('output' in event || 'output_omitted' in event, false, JSON.stringify(event));
    assert.deepEqual(failed, await client.status(failed.id));
    assert.deepEqual(reads(failed.id), ['watch']);

    // Cancelled while queued (the function paused): the cancel's finish event ends the wait.
    await client.configure('held', { paused: true });
    try {
      const { id } = await client.enqueue('held', 'never runs');
      const waiting = client.wait(id, { timeoutMs: WAIT }).then(
        () => assert.fail('a cancelled job does not resolve the wait'),
        (error) => error,
      );
      await watched([id]);
      const { value: error, reads: cancelReads } = await counting(async () => {
        assert.deepEqual(await client.cancel(id), { outcome: 'cancelled', state: 'cancelled' });
        return waiting;
      });
      assert.ok(error instanceof JobCancelledError, String(error));
      const event = await finishOf(id);
      assert.equal(event.record.state, 'cancelled');
      assert.equal('output' in event || 'output_omitted' in event, false, JSON.stringify(event));
      assert.deepEqual(error.job, await client.status(id));
      // The cancel reads the job for its children (`get`); the wait reads nothing more.
      assert.deepEqual(cancelReads(id), ['get']);
    } finally {
      await client.configure('held', { paused: false });
    }
  });

  it('a job no one waits on has the plain finish event', async () => {
    const { id } = await client.enqueue('held', 'unwatched');
    const event = await finishOf(id);
    assert.deepEqual(event, { event: 'finish', id, state: 'succeeded' });
    assert.equal((await stored(id)).includes('"watched"'), false);
    // Waiting on it once it has ended reads it (and marks nothing).
    const job = await client.wait(id, { timeoutMs: WAIT });
    assert.equal(job.output.toString(), 'unwatched');
    assert.equal((await stored(id)).includes('"watched"'), false);
  });
});
