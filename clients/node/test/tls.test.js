'use strict';

// rediss://: the client over TLS to a real redis-server that speaks only TLS, with a
// certificate authority made for the test.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');

const { Client, UnreachableError, BadInputError } = require('..');
const { startTlsRedis } = require('../test-support/harness');

describe('wasmgear client over TLS', { timeout: 120000 }, () => {
  let redis;

  before(async () => {
    redis = await startTlsRedis();
  });

  after(async () => {
    if (redis) await redis.stop();
  });

  it('enqueues, reads and hears events over rediss://', async () => {
    const client = await Client.connect(redis.url, { tls: { ca: redis.ca } });
    try {
      const events = client.events('tls-fn');
      assert.equal(await events.ready, true);
      const { id } = await client.enqueue('tls-fn', 'secret', { tags: ['tls'] });
      const job = await client.status(id);
      assert.equal(job.state, 'queued');
      assert.deepEqual(job.tags, ['tls']);
      const { value } = await events.next();
      assert.deepEqual(value, { function: 'tls-fn', event: 'create', id });
      events.close();
      assert.deepEqual(await client.cancel(id), { outcome: 'cancelled', state: 'cancelled' });
      const queues = await client.queues();
      assert.equal(queues.find((q) => q.function === 'tls-fn').cancelled, 1);
    } finally {
      await client.close();
    }
  });

  it('refuses a server whose certificate it cannot check, and plain redis:// to a TLS port', async () => {
    await assert.rejects(Client.connect(redis.url, { connectTimeoutMs: 2000 }), (error) => {
      assert.ok(error instanceof UnreachableError, `${error.name}: ${error.message}`);
      assert.match(error.message, /certificate/i);
      return true;
    });
    await assert.rejects(
      Client.connect(`redis://127.0.0.1:${redis.port}`, { connectTimeoutMs: 1000 }),
      UnreachableError,
    );
    await assert.rejects(Client.connect(`redis://127.0.0.1:${redis.port}`, { tls: { ca: redis.ca } }), BadInputError);
  });
});
