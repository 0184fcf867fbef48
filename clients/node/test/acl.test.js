'use strict';

// Least privilege in Redis: the client connected as a user made from `wasmgear acl producer`
// runs a producer's flows (enqueue and wait, status, events, flows, queues) with nothing
// refused in Redis' ACL log, is refused what a producer may not do (a lease, a cancel), and
// says plainly that such a user may not load the library (as tests/all/redis_acl.rs checks
// the CLI). A real redis-server, the real `wasmgear acl` and a real worker on the default
// user.

const { describe, it, before, after, beforeEach } = require('node:test');
const assert = require('node:assert/strict');

const { Client, WasmgearError } = require('..');
const { startRedis, startWorker, until, ask, makeUser, refusals } = require('../test-support/harness');

const WAIT_MS = 60000;
const MAY_NOT_LOAD = 'this Redis user may not load it (FUNCTION LOAD)';
const refused = (error) => error instanceof WasmgearError && /NOPERM|permission/.test(error.message);

describe('least-privilege Redis users', { timeout: 600000 }, () => {
  let redis;
  let worker;
  let producer;
  let client;

  before(async () => {
    redis = await startRedis();
    worker = await startWorker(redis.url, ['echo', 'count']);
    // The default user loads the library (the producer may not).
    await (await Client.connect(redis.url)).close();
    producer = await makeUser(redis.url, 'producer', 'app');
    client = await Client.connect(producer);
  });

  after(async () => {
    if (client) await client.close();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
  });

  beforeEach(async () => {
    await ask(redis.url, 'ACL', 'LOG', 'RESET');
  });

  it('a producer runs its flows with nothing refused, and is refused a lease and a cancel', async () => {
    const events = client.events('echo');
    assert.equal(await events.ready, true);
    const { id } = await client.enqueue('echo', 'as a producer');
    const kinds = [];
    for await (const event of events) {
      if (event.id !== id) continue;
      kinds.push(event.event);
      if (event.event === 'finish') break;
    }
    assert.deepEqual(kinds, ['create', 'start', 'finish']);
    const job = await client.wait(id, { timeoutMs: WAIT_MS });
    assert.equal(job.output.toString(), 'as a producer');
    assert.equal((await client.status(id)).state, 'succeeded');
    assert.equal(typeof (await client.logs(id)), 'string');
    const many = await client.enqueueMany('echo', ['m1', 'm2']);
    const done = await client.wait(many.map((e) => e.id), { timeoutMs: WAIT_MS });
    assert.deepEqual(done.map((j) => j.output.toString()), ['m1', 'm2']);
    // A dependency on a job of the same function: the enqueue links it itself.
    const later = await client.enqueue('echo', 'after', { after: [id] });
    assert.equal((await client.wait(later.id, { timeoutMs: WAIT_MS })).output.toString(), 'after');

    const flow = await client.submitFlow({
      name: 'acl',
      jobs: {
        a: { function: 'echo', input: 'first' },
        b: { function: 'echo', input: 'then', after: ['a'] },
      },
    });
    const status = await client.waitFlow(flow.id, { timeoutMs: WAIT_MS });
    assert.equal(status.ended, true);
    assert.deepEqual(status.counts, { succeeded: 2 });
    assert.equal((await client.flow(flow.id)).name, 'acl');

    const queues = await client.queues();
    assert.ok(queues.find((q) => q.function === 'echo').workers >= 1);
    await client.config('echo');
    await client.groups('echo');

    assert.deepEqual(await refusals(redis.url, 'app'), [], 'the producer was refused what its flows need');

    // What a producer may not do: lease (a worker's), cancel (an operator's).
    await assert.rejects(ask(producer, 'FCALL', 'wg2_lease', '0'), /NOPERM/);
    const scheduled = await client.enqueue('echo', 'later', { delayMs: 3600000 });
    await assert.rejects(client.cancel(scheduled.id), refused);
    assert.equal((await client.status(scheduled.id)).state, 'scheduled');
    // Both refusals (Redis counts alike ones in one entry).
    assert.deepEqual(await refusals(redis.url, 'app'), ['command fcall']);
  });

  it('a producer opens a batch, and its jobs run', async () => {
    const batch = await client.batch([{ function: 'echo', input: 'one' }, { function: 'echo', input: 'two' }], { name: 'acl' });
    const deadline = Date.now() + WAIT_MS;
    let status = await client.batchStatus(batch.id);
    while (!status.ended && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      status = await client.batchStatus(batch.id);
    }
    assert.equal(status.succeeded, 2);
    assert.deepEqual(await refusals(redis.url, 'app'), []);
  });

  it('a producer enqueues a job after an ended job of another function', async () => {
    const first = await client.enqueue('echo', 'first');
    await client.wait(first.id, { timeoutMs: WAIT_MS });
    const then = await client.enqueue('count', '1 1', { after: [first.id] });
    assert.equal((await client.wait(then.id, { timeoutMs: WAIT_MS })).state, 'succeeded');
    assert.deepEqual(await refusals(redis.url, 'app'), []);
  });
});

describe('a least-privilege user on a Redis without the library', { timeout: 120000 }, () => {
  let redis;

  before(async () => {
    redis = await startRedis();
  });

  after(async () => {
    if (redis) await redis.stop();
  });

  it('is told that it may not load the library, and who may', async () => {
    const producer = await makeUser(redis.url, 'producer', 'app');
    await assert.rejects(Client.connect(producer), (error) => {
      assert.ok(error instanceof WasmgearError, error);
      assert.ok(error.message.includes(MAY_NOT_LOAD), error.message);
      assert.ok(error.message.includes('`wasmgear acl`'), error.message);
      assert.equal(error.exitCode, 1);
      return true;
    });
    await assert.rejects(ask(redis.url, 'FCALL', 'wg2_version', '0'), /Function not found/);
  });
});
