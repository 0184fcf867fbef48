'use strict';

// A wait outlasts a restart of Redis: the client reconnects, subscribes again and reads
// the record again, and hears how the job ended.

const { describe, it, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, JobCancelledError } = require('..');
const { startRedis, until } = require('../test-support/harness');

describe('a wait across a restart of Redis', { timeout: 120000 }, () => {
  let redis;
  let client;

  after(async () => {
    if (client) await client.close();
    if (redis) await redis.stop();
  });

  it('hears the end of a job after the server came back', async () => {
    redis = await startRedis();
    client = await Client.connect(redis.url);
    // Nobody serves this function: the job waits until the test cancels it.
    const { id } = await client.enqueue('restart-fn', 'waits');
    const waiting = client.wait(id, { timeoutMs: 60000 });
    // (Checked below: the cancel's finish event, carrying the job's record, may end the wait
    // before `cancel` itself returns.)
    waiting.catch(() => {});
    const numsub = async (url) => {
      const admin = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
      admin.on('error', () => {});
      try {
        return Number((await admin.pubsub('NUMSUB', 'wg:{restart-fn}:events'))[1]);
      } finally {
        admin.disconnect();
      }
    };
    await until('the wait to subscribe', async () => (await numsub(redis.url)) === 1);

    // Saved to disk and stopped, then started again on the same port from that file.
    const admin = new Redis(redis.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    admin.on('error', () => {});
    admin.shutdown('SAVE').catch(() => {});
    await redis.exited;
    admin.disconnect();
    redis = await startRedis([], redis.dir, redis.port);

    await until('the wait to subscribe again', async () => (await numsub(redis.url)) === 1, {
      timeoutMs: 30000,
    });
    assert.equal((await client.status(id)).state, 'queued');
    assert.deepEqual(await client.cancel(id), { outcome: 'cancelled', state: 'cancelled' });
    await assert.rejects(waiting, (error) => {
      assert.ok(error instanceof JobCancelledError, `${error.name}: ${error.message}`);
      assert.equal(error.job.state, 'cancelled');
      return true;
    });
  });
});
