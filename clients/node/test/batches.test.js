'use strict';

// Batches against a real redis-server and three real `wasmgear worker` processes serving
// echo, fail and the callbacks' functions on_ok and on_done (copies of echo: a callback's
// output is its input), as tests/all/batches.rs runs them.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, BadInputError, ConflictError, NotFoundError } = require('..');
const { startRedis, startWorker, until } = require('../test-support/harness');

const WAIT_MS = 120000;
/** A delay that keeps a job from running while the test looks at its batch. */
const LATER = { delayMs: 3600000 };

/** tests/all/batches.rs `spec()`: a success callback with data, a complete one without. */
const spec = (name) => ({
  name,
  onSuccess: { function: 'on_ok', data: { note: name } },
  onComplete: { function: 'on_done' },
});

describe('batches', { timeout: 600000 }, () => {
  let redis;
  let workers = [];
  let client;
  let admin;

  before(async () => {
    redis = await startRedis();
    workers = await Promise.all(
      [0, 1, 2].map(() => startWorker(redis.url, ['echo', 'fail', 'on_ok=echo', 'on_done=echo'], 4)),
    );
    client = await Client.connect(redis.url);
    admin = new Redis(redis.url);
  });

  after(async () => {
    if (client) await client.close();
    if (admin) admin.disconnect();
    for (const worker of workers) await worker.stop();
    if (redis) await redis.stop();
  });

  /**
   * The inputs of every callback job of function `fn` for batch `id` (on_ok and on_done have
   * no other jobs: their numbers run from 1), each waited for and read as JSON.
   */
  const callbacks = async (fn, id) => {
    const inputs = [];
    for (let n = 1; ; n += 1) {
      let job;
      try {
        job = await client.wait(`${fn}:${n}`, { timeoutMs: WAIT_MS });
      } catch (error) {
        if (error instanceof NotFoundError) break;
        throw error;
      }
      const input = JSON.parse(job.output.toString());
      if (input.batch === id) inputs.push({ id: job.id, input });
    }
    return inputs;
  };

  /** Batch `id`'s status once it has ended with its complete callback enqueued. */
  const ended = (id) =>
    until(
      `batch ${id} to end with its callbacks enqueued`,
      async () => {
        const status = await client.batchStatus(id);
        return status.endedAt !== null && status.onComplete !== null && status.onComplete !== 'due' && status;
      },
      { timeoutMs: WAIT_MS, everyMs: 100 },
    );

  it('batches whose jobs all succeed get exactly one onSuccess and one onComplete callback each, with the counts', async () => {
    // Four batches at once, their last jobs ending together on three workers.
    const submitted = await Promise.all(
      [0, 1, 2, 3].map((b) =>
        client.batch(
          Array.from({ length: 10 }, (_, j) => ({ function: 'echo', input: `${b}-${j}`, options: { attempts: 1 } })),
          spec(`ok${b}`),
        ),
      ),
    );
    for (const [b, { id, jobs }] of submitted.entries()) {
      assert.match(id, /^[0-9a-f]{16}$/);
      assert.equal(jobs.length, 10);
      assert.ok(jobs.every((job) => /^echo:[0-9]+$/.test(job)), JSON.stringify(jobs));
      const status = await ended(id);
      assert.equal(status.name, `ok${b}`);
      assert.equal(status.open, false);
      assert.deepEqual(
        [status.total, status.pending, status.succeeded, status.failed, status.cancelled],
        [10, 0, 10, 0, 0],
      );
      assert.deepEqual([status.failedIds, status.cancelledIds], [[], []]);
      assert.ok(status.createdAt <= status.endedAt);
      assert.match(status.onSuccess, /^on_ok:[0-9]+$/);
      assert.match(status.onComplete, /^on_done:[0-9]+$/);
    }
    for (const [b, { id }] of submitted.entries()) {
      const successes = await callbacks('on_ok', id);
      const completes = await callbacks('on_done', id);
      assert.equal(successes.length, 1, `batch ${id}: ${JSON.stringify(successes)}`);
      assert.equal(completes.length, 1, `batch ${id}: ${JSON.stringify(completes)}`);
      const status = await client.batchStatus(id);
      assert.equal(successes[0].id, status.onSuccess);
      assert.equal(completes[0].id, status.onComplete);
      assert.deepEqual(successes[0].input, {
        batch: id,
        name: `ok${b}`,
        callback: 'success',
        total: 10,
        succeeded: 10,
        failed: 0,
        cancelled: 0,
        failed_ids: [],
        cancelled_ids: [],
        data: { note: `ok${b}` },
      });
      assert.deepEqual(completes[0].input, { ...successes[0].input, callback: 'complete', data: null });
    }
  });

  it('a batch with a failing job gets only onComplete, with failed_ids', async () => {
    const jobs = [
      ...Array.from({ length: 5 }, (_, j) => ({ function: 'echo', input: `f-${j}`, options: { attempts: 1 } })),
      { function: 'fail', input: 'no', options: { attempts: 1 } },
    ];
    const { id, jobs: ids } = await client.batch(jobs, spec('failing'));
    const failing = ids[ids.length - 1];
    assert.match(failing, /^fail:[0-9]+$/);
    const status = await ended(id);
    assert.deepEqual(
      [status.total, status.pending, status.succeeded, status.failed, status.cancelled],
      [6, 0, 5, 1, 0],
    );
    assert.deepEqual(status.failedIds, [failing]);
    assert.equal(status.onSuccess, null, 'no success callback is due');
    const completes = await callbacks('on_done', id);
    assert.equal(completes.length, 1, JSON.stringify(completes));
    assert.equal(completes[0].input.callback, 'complete');
    assert.deepEqual(
      [completes[0].input.total, completes[0].input.succeeded, completes[0].input.failed],
      [6, 5, 1],
    );
    assert.deepEqual(completes[0].input.failed_ids, [failing]);
    assert.deepEqual(await callbacks('on_ok', id), []);
    assert.equal((await client.status(failing)).state, 'failed');
  });

  it('a batch filled in two calls while open: its status counts them; closed, it refuses adds', async () => {
    const id = await client.openBatch(spec('filled'));
    const first = await client.addToBatch(id, [{ function: 'echo', input: 'a', options: LATER }]);
    const second = await client.addToBatch(id, [
      { function: 'echo', input: 'b', options: LATER },
      { function: 'fail', input: 'c', options: LATER },
    ]);
    assert.equal(first.length, 1);
    assert.match(second[1], /^fail:[0-9]+$/);
    let status = await client.batchStatus(id);
    assert.deepEqual([status.open, status.total, status.pending, status.endedAt], [true, 3, 3, null]);
    assert.equal(status.name, 'filled');
    assert.equal((await client.status(first[0])).state, 'scheduled');
    assert.equal((await client.status(first[0])).record.batch, id);

    // Bad input is refused before anything is written: no number reserved, nothing counted.
    const seq = await admin.get('wg:{echo}:seq');
    await assert.rejects(
      client.addToBatch(id, [{ function: 'echo' }, { function: 'echo', options: { priority: 5000 } }]),
      (error) => error instanceof BadInputError && /^job 2 of the batch: .*priority 5000/.test(error.message),
    );
    await assert.rejects(
      client.addToBatch(id, [{ function: 'echo', options: { after: ['echo:999999'] } }]),
      (error) => error instanceof ConflictError && /dependency echo:999999 does not exist/.test(error.message),
    );
    assert.equal(await admin.get('wg:{echo}:seq'), seq);
    assert.equal((await client.batchStatus(id)).total, 3);

    await client.closeBatch(id);
    await client.closeBatch(id); // again: nothing changes
    await assert.rejects(
      client.addToBatch(id, [{ function: 'echo', input: 'late', options: LATER }]),
      (error) =>
        error instanceof ConflictError &&
        error.exitCode === 2 &&
        error.message === `batch ${id}: the batch is closed: no job can be added to it`,
    );
    assert.equal(await admin.get('wg:{echo}:seq'), seq, 'the refused job was never written');
    status = await client.batchStatus(id);
    assert.deepEqual([status.open, status.total, status.pending, status.onSuccess, status.onComplete], [false, 3, 3, null, null]);

    for (const call of [
      () => client.batchStatus('abc123'),
      () => client.closeBatch('abc123'),
      () => client.addToBatch('abc123', [{ function: 'echo' }]),
    ]) {
      await assert.rejects(call(), (error) => {
        assert.ok(error instanceof NotFoundError, `${error.name}: ${error.message}`);
        assert.equal(error.message, 'no batch abc123: it was never opened, or it was forgotten');
        assert.equal(error.batch, 'abc123');
        assert.equal(error.exitCode, 5);
        return true;
      });
    }
    await assert.rejects(client.batchStatus('not-hex'), BadInputError);

    // A closed batch with no job fires its callbacks at once.
    const { id: empty, jobs } = await client.batch([], spec('empty'));
    assert.deepEqual(jobs, []);
    const done = await client.batchStatus(empty);
    assert.ok(done.endedAt instanceof Date);
    assert.match(done.onSuccess, /^on_ok:[0-9]+$/);
    const input = JSON.parse((await client.wait(done.onSuccess, { timeoutMs: WAIT_MS })).output.toString());
    assert.deepEqual([input.total, input.callback, input.batch, input.data], [0, 'success', empty, { note: 'empty' }]);
  });

  it('a job of a batch cancelled by this client is counted, and its end fires the callbacks', async () => {
    const { id, jobs } = await client.batch(
      [
        { function: 'echo', input: 'x', options: LATER },
        { function: 'fail', input: 'y', options: LATER },
      ],
      spec('cancelled'),
    );
    assert.deepEqual((await client.cancel(jobs[0])).outcome, 'cancelled');
    let status = await client.batchStatus(id);
    assert.deepEqual([status.cancelled, status.pending, status.endedAt], [1, 1, null]);
    assert.deepEqual(status.cancelledIds, [jobs[0]]);
    // Told: the job keeps no batch to tell (its retention is its own again).
    assert.deepEqual((await client.status(jobs[0])).record.untold ?? [], []);

    // The last job cancelled: the batch has ended, and this client enqueued its callback.
    await client.cancel(jobs[1]);
    status = await client.batchStatus(id);
    assert.deepEqual([status.cancelled, status.pending, status.onSuccess], [2, 0, null]);
    assert.ok(status.endedAt instanceof Date);
    assert.match(status.onComplete, /^on_done:[0-9]+$/);
    const input = JSON.parse((await client.wait(status.onComplete, { timeoutMs: WAIT_MS })).output.toString());
    assert.deepEqual([input.callback, input.cancelled, input.cancelled_ids.sort()], ['complete', 2, [...jobs].sort()]);
    // Cancelling again counts nothing twice.
    assert.equal((await client.cancel(jobs[0])).outcome, 'already-ended');
    assert.equal((await client.batchStatus(id)).cancelled, 2);
    assert.equal((await callbacks('on_done', id)).length, 1);
  });
});
