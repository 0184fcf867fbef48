'use strict';

// Cancelling a job cancels its children (the jobs it enqueued through `wasmgear:job/jobs`),
// and theirs: against a real redis-server and a real `wasmgear worker` that serves only
// `split`, so the `reverse` children it enqueues stay queued until they are cancelled.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, JobCancelledError, JobFailedError } = require('..');
const protocol = require('../lib/protocol');
const { startRedis, startWorker, until } = require('../test-support/harness');

// `split` may enqueue children of `reverse` (as plugins/split/split.toml grants) and of
// `split` itself: a `split` child of a `split` job enqueues `reverse` grandchildren.
const MANIFEST = '[jobs]\nenqueue = ["reverse", "split"]\nmax_children = 200\n';

/** The final Jobs of a wait on an array of ids, however they ended (a timeout rejects). */
const endOf = (waiting) =>
  waiting.catch((error) => {
    if (error instanceof JobCancelledError || error instanceof JobFailedError) return error.results;
    throw error;
  });

/** The ids a job's record lists as its children. */
const childrenOf = (job) => (Array.isArray(job.record.children) ? job.record.children.map(String) : []);

describe('cancelling a job cancels its children', { timeout: 600000 }, () => {
  let redis;
  let worker;
  let client;
  let admin;

  before(async () => {
    redis = await startRedis();
    worker = await startWorker(redis.url, ['split'], 4, { split: MANIFEST });
    client = await Client.connect(redis.url);
    admin = new Redis(redis.url);
  });

  after(async () => {
    if (client) await client.close();
    if (admin) admin.disconnect();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
  });

  /** The states of jobs `ids`, in order. */
  const states = async (ids) => Promise.all(ids.map(async (id) => (await client.status(id)).state));

  it('a running split parent: its queued children end cancelled as cancel returns, then the parent', async () => {
    const { id: parent } = await client.enqueue('split', 'ab\ncd\nef');
    const children = await until('split to enqueue 3 children', async () => {
      const job = await client.status(parent);
      assert.ok(['queued', 'running'].includes(job.state), JSON.stringify(job.record));
      const listed = childrenOf(job);
      return listed.length === 3 ? listed : null;
    }, { timeoutMs: 60000 });
    assert.ok(children.every((id) => id.startsWith('reverse:')), children.join(' '));
    assert.deepEqual(await states(children), ['queued', 'queued', 'queued']);

    assert.deepEqual(await client.cancel(parent), { outcome: 'stopping', state: 'running' });
    assert.deepEqual(await states(children), ['cancelled', 'cancelled', 'cancelled']);
    const [ended] = await endOf(client.wait([parent], { timeoutMs: 60000 }));
    assert.equal(ended.state, 'cancelled');
    // Cancelling again changes nothing, and still answers for the parent.
    assert.deepEqual(await client.cancel(parent), { outcome: 'already-ended', state: 'cancelled' });
  });

  it("a split parent's running split children and their queued grandchildren all end cancelled", async () => {
    const plan = { function: 'split', chunks: ['ab\ncd', 'ef\ngh'] };
    const { id: parent } = await client.enqueue('split', JSON.stringify(plan));
    const tree = await until('two split children with two reverse children each', async () => {
      const job = await client.status(parent);
      assert.ok(['queued', 'running'].includes(job.state), JSON.stringify(job.record));
      const found = new Map();
      for (const child of childrenOf(job)) found.set(child, childrenOf(await client.status(child)));
      const grown = found.size === 2 && [...found.values()].every((g) => g.length === 2);
      return grown ? found : null;
    }, { timeoutMs: 60000 });
    const children = [...tree.keys()];
    const grandchildren = [...tree.values()].flat();
    assert.ok(children.every((id) => id.startsWith('split:')), children.join(' '));
    assert.ok(grandchildren.every((id) => id.startsWith('reverse:')), grandchildren.join(' '));
    assert.deepEqual(await states(children), ['running', 'running']);
    assert.deepEqual(await states(grandchildren), ['queued', 'queued', 'queued', 'queued']);

    assert.equal((await client.cancel(parent)).outcome, 'stopping');
    assert.deepEqual(await states(grandchildren), ['cancelled', 'cancelled', 'cancelled', 'cancelled']);
    const ended = await endOf(client.wait([parent, ...children], { timeoutMs: 60000 }));
    assert.deepEqual(ended.map((job) => job.state), ['cancelled', 'cancelled', 'cancelled']);
  });

  it('visits each job once whatever the records list: a diamond, a cycle, a job listing itself', async () => {
    // Records made by hand with the library's `adopt`. Nobody serves this function: its
    // jobs stay queued.
    const [a, b, c, d] = (await client.enqueueMany('nobody-serves', ['a', 'b', 'c', 'd'])).map((j) => j.id);
    for (const [parent, child] of [[a, b], [a, c], [a, a], [b, d], [c, d], [d, a]]) {
      const [fn, number] = parent.split(':');
      const call = protocol.callOn('adopt', fn);
      await admin.call(call.command, call.name, call.keys.length, ...call.keys, fn, number, child);
    }
    assert.deepEqual(childrenOf(await client.status(a)), [b, c, a]);

    // The cancels Redis runs, as MONITOR sees them (in order; an ECHO sent after `cancel`
    // returns marks the end). A cancel that never ends fails the test after a minute.
    const monitor = await admin.monitor();
    const sent = [];
    let ended = false;
    monitor.on('monitor', (_time, args) => {
      const [command, name, numkeys] = args.map(String);
      if (command.toUpperCase() === 'ECHO' && name === 'cancel-done') ended = true;
      if (command.toUpperCase() !== 'FCALL') return;
      const rest = args.slice(3 + Number(numkeys)).map(String);
      sent.push(`${name.replace(/^wg2_/, '')} ${rest[0]}:${rest[1]}`);
    });
    const counted = await Client.connect(redis.url);
    try {
      let timer;
      const outcome = await Promise.race([
        counted.cancel(a),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`cancel goes on: ${sent.slice(-4).join(' ')}`)), 60000);
        }),
      ]).finally(() => clearTimeout(timer));
      assert.deepEqual(outcome, { outcome: 'cancelled', state: 'cancelled' });
      await admin.call('ECHO', 'cancel-done');
      await until('MONITOR to show the end of the cancel', async () => ended);
    } finally {
      await counted.close();
      monitor.disconnect();
    }
    const cancels = sent.filter((call) => call.startsWith('cancel ')).map((call) => call.slice(7));
    assert.deepEqual(cancels.sort(), [a, b, c, d].sort());
    assert.deepEqual(await states([a, b, c, d]), ['cancelled', 'cancelled', 'cancelled', 'cancelled']);
  });
});
