'use strict';

// Checkpoints against a real redis-server and a real `wasmgear worker` serving the example
// plugin `resume`: input "N" (or "N MS", MS ms per step) runs N steps, saving its position
// after each; its first attempt fails on purpose after N/2 steps, and its output says where
// the attempt that succeeded resumed from ("resumed from K").

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');

const { Client, BadInputError, JobFailedError } = require('..');
const { startRedis, startWorker } = require('../test-support/harness');

const WAIT = { timeoutMs: 60000 };

describe('checkpoints', { timeout: 300000 }, () => {
  let redis;
  let worker;
  let client;

  before(async () => {
    redis = await startRedis();
    worker = await startWorker(redis.url, ['resume']);
    client = await Client.connect(redis.url);
  });

  after(async () => {
    if (client) await client.close();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
  });

  /**
   * Enqueues `resume 10` with one attempt, so that its failure on purpose after 5 steps is
   * final, and waits for it to fail; resolves its id, the failed Job the wait gave and when
   * it was enqueued.
   */
  async function failedHalfWay() {
    const enqueuedAt = Date.now();
    const { id } = await client.enqueue('resume', '10', { attempts: 1 });
    let failed;
    await assert.rejects(client.wait(id, WAIT), (error) => {
      assert.ok(error instanceof JobFailedError, `${error.name}: ${error.message}`);
      assert.match(error.message, /failing on purpose after 5 of 10 steps/);
      failed = error.job;
      return true;
    });
    return { id, failed, enqueuedAt };
  }

  /** Waits for job `id` to succeed and checks that it kept no checkpoint; resolves its output. */
  async function succeededWithoutCheckpoint(id) {
    const done = await client.wait(id, WAIT);
    assert.equal(done.state, 'succeeded');
    assert.equal(done.checkpoint, null);
    assert.equal((await client.status(id)).checkpoint, null);
    assert.equal(await client.checkpoint(id), null);
    return done.output.toString();
  }

  it('a failed job keeps its checkpoint; retry resumes from it, and its success drops it', async () => {
    const { id, failed, enqueuedAt } = await failedHalfWay();
    // The record tells the checkpoint's size and when it was saved; the bytes are read apart.
    const status = await client.status(id);
    assert.equal(status.state, 'failed');
    assert.deepEqual(status.checkpoint, failed.checkpoint);
    assert.equal(status.checkpoint.bytes, 1);
    assert.ok(status.checkpoint.savedAt instanceof Date);
    assert.ok(status.checkpoint.savedAt.getTime() >= enqueuedAt - 1000, String(status.checkpoint.savedAt));
    assert.ok(status.checkpoint.savedAt <= status.finishedAt, String(status.checkpoint.savedAt));
    assert.deepEqual(status.checkpoint, { bytes: 1, savedAt: new Date(status.record.checkpoint.ms) });
    assert.deepEqual(await client.checkpoint(id), Buffer.from('5'));

    assert.equal(await client.retry(id), true);
    assert.equal(await succeededWithoutCheckpoint(id), 'resumed from 5');
  });

  it('retry with fresh drops the checkpoint: the job starts over', async () => {
    const { id } = await failedHalfWay();
    assert.deepEqual(await client.checkpoint(id), Buffer.from('5'));
    assert.equal(await client.retry(id, { fresh: true }), true);
    assert.equal(await succeededWithoutCheckpoint(id), 'resumed from 0');
  });

  it('a job no attempt of which saved one keeps no checkpoint', async () => {
    // Zero steps: nothing to save, and it never fails.
    const { id } = await client.enqueue('resume', '0', { attempts: 1 });
    assert.equal(await succeededWithoutCheckpoint(id), 'resumed from 0');
    assert.equal(await client.checkpoint('resume:99999999'), null, 'a job that never existed keeps none');
  });

  it('the event stream carries the checkpoints a running job saves, with their size', async () => {
    const stream = client.events('resume');
    assert.equal(await stream.ready, true);
    // 50 ms per step: the worker sends its saves to Redis at most every 50 ms.
    const { id } = await client.enqueue('resume', '10 50', { attempts: 1 });
    const seen = [];
    for await (const event of stream) {
      if (event.id !== id) continue;
      seen.push(event);
      if (event.event === 'finish') break;
    }
    const kinds = seen.map((event) => event.event);
    const checkpoints = seen.filter((event) => event.event === 'checkpoint');
    assert.ok(checkpoints.length >= 1, JSON.stringify(kinds));
    // Saved while it ran, beside its progress reports.
    assert.deepEqual(kinds.slice(0, 2), ['create', 'start']);
    assert.deepEqual(
      kinds.slice(2, -1).filter((kind) => kind !== 'progress'),
      checkpoints.map(() => 'checkpoint'),
      JSON.stringify(kinds),
    );
    for (const event of checkpoints) {
      assert.equal(event.function, 'resume');
      // Positions 1 to 5: one digit each.
      assert.equal(event.bytes, 1, JSON.stringify(event));
    }
    assert.equal(seen.at(-1).state, 'failed');
    assert.deepEqual(await client.checkpoint(id), Buffer.from('5'));
  });

  it('refuses a fresh that is not true or false before any call', async () => {
    const { id } = await failedHalfWay();
    for (const options of [{ fresh: 'yes' }, { fresh: 1 }, { fresh: true, attempts: 2 }, 'fresh']) {
      await assert.rejects(client.retry(id, options), (error) => {
        assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
        assert.match(error.message, /^invalid retry option: /);
        return true;
      });
    }
    // Nothing was sent: a job that does not exist is refused the same way, not NotFoundError.
    await assert.rejects(client.retry('resume:99999999', { fresh: 'yes' }), (error) => {
      assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
      assert.equal(error.message, 'invalid retry option: fresh "yes" must be true or false');
      return true;
    });
    // The job is as it was: failed, its checkpoint kept.
    const status = await client.status(id);
    assert.equal(status.state, 'failed');
    assert.equal(status.attempt, 1);
    assert.deepEqual(await client.checkpoint(id), Buffer.from('5'));
  });
});
