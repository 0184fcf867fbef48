'use strict';

// minReplicas: a primary and one real replica (`--replicaof`). With the replica in sync, a
// write of jobs resolves once the replica has it; with fewer replicas than asked for (one
// too many, or the replica gone), it rejects NotReplicatedError after its three sends, the
// jobs written once; a function's own min_replicas asks for replicas from every client.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, NotReplicatedError, WasmgearError } = require('..');
const { startRedis, startReplica, replicasConnected } = require('../test-support/harness');

/** The message of NotReplicatedError, as the Rust client words it. */
const notReplicated = (what, confirmed, wanted, timeoutMs) =>
  `${what} was written to the Redis primary, but only ${confirmed} of the ${wanted} replicas asked for ` +
  `confirmed it within ${timeoutMs} ms, even when sent again: if the primary fails now it may be lost. ` +
  'Check the replicas (INFO replication on the primary); the write is safe to send again ' +
  '(enqueue with a uniq key to be sure of one copy)';

/** Checks that `promise` rejects NotReplicatedError with these fields and message. */
async function rejectsNotReplicated(promise, { what, wanted, confirmed, timeoutMs }) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof NotReplicatedError, `${error.name}: ${error.message}`);
    assert.ok(error instanceof WasmgearError);
    assert.equal(error.exitCode, 6);
    assert.deepEqual([error.what, error.wanted, error.confirmed, error.timeoutMs], [what, wanted, confirmed, timeoutMs]);
    assert.equal(error.message, notReplicated(what, confirmed, wanted, timeoutMs));
    return true;
  });
}

describe('minReplicas: writes of jobs confirmed by replicas', { timeout: 60000 }, () => {
  let primary;
  let replica;
  let onPrimary;
  let onReplica;
  const clients = [];

  /** A client of the primary with `opts`, closed after the tests. */
  const connect = async (opts) => {
    const client = await Client.connect(primary.url, opts);
    clients.push(client);
    return client;
  };
  /** How many jobs function `fn` holds on `node`. */
  const jobs = (node, fn) => node.hlen(`wg:{${fn}}:jobs`);
  /** Whether `node` holds job `id`. */
  const holds = async (node, id) => {
    const [fn, number] = id.split(':');
    return (await node.hexists(`wg:{${fn}}:jobs`, number)) === 1;
  };

  before(async () => {
    // The full sync to the replica without the wait for more replicas (5 s by default).
    primary = await startRedis(['--repl-diskless-sync-delay', '0']);
    replica = await startReplica(primary.port);
    await replicasConnected(primary.url, 1);
    onPrimary = new Redis(primary.url);
    onReplica = new Redis(replica.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    onReplica.on('error', () => {});
  });

  after(async () => {
    for (const client of clients) await client.close();
    if (onPrimary) onPrimary.disconnect();
    if (onReplica) onReplica.disconnect();
    if (replica) await replica.stop();
    if (primary) await primary.stop();
  });

  it('with minReplicas 1, every write of jobs is on the replica once it resolves', async () => {
    const client = await connect({ minReplicas: 1 });
    const { id, created } = await client.enqueue('rep-fn', 'kept');
    assert.equal(created, true);
    // WAIT answered once the replica had it: read at once, no polling.
    assert.equal(await holds(onReplica, id), true);
    const many = await client.enqueueMany('rep-fn', ['a', { input: 'b', priority: 'high' }]);
    for (const job of many) assert.equal(await holds(onReplica, job.id), true, job.id);
    const flow = await client.submitFlow({
      name: 'replicated',
      jobs: { a: { function: 'rep-fn' }, b: { function: 'rep-other', after: ['a'] } },
    });
    for (const job of Object.values(flow.jobs)) assert.equal(await holds(onReplica, job), true, job);
    const batch = await client.batch([{ function: 'rep-fn', input: 'x' }, { function: 'rep-other' }]);
    for (const job of batch.jobs) assert.equal(await holds(onReplica, job), true, job);
    // The same uniq key answers with the same job, confirmed too.
    const first = await client.enqueue('rep-fn', 'u', { uniq: 'one' });
    const again = await client.enqueue('rep-fn', 'u', { uniq: 'one' });
    assert.deepEqual([again.id, again.created], [first.id, false]);
  });

  it('asking for more replicas than there are rejects NotReplicatedError; the job is written once', async () => {
    const client = await connect({ minReplicas: 2, minReplicasTimeoutMs: 200 });
    const before = await jobs(onPrimary, 'rep-more');
    await rejectsNotReplicated(client.enqueue('rep-more', 'x'), {
      what: 'the enqueue of a job of rep-more',
      wanted: 2,
      confirmed: 1,
      timeoutMs: 200,
    });
    assert.equal(await jobs(onPrimary, 'rep-more'), before + 1);
  });

  it("a function's min_replicas is read back, and confirmed for a client that asks for none", async () => {
    const client = await connect({ minReplicasTimeoutMs: 200 });
    assert.equal((await client.configure('rep-set', { minReplicas: 1 })).minReplicas, 1);
    assert.equal((await client.config('rep-set')).minReplicas, 1);
    const { id } = await client.enqueue('rep-set', 'confirmed');
    assert.equal(await holds(onReplica, id), true);
  });

  it('with the replica gone, minReplicas 1 and the function setting both reject; each job written once', async () => {
    await replica.stop();
    replica = null;
    await replicasConnected(primary.url, 0);

    const asking = await connect({ minReplicas: 1, minReplicasTimeoutMs: 200 });
    await rejectsNotReplicated(asking.enqueue('rep-gone', 'x'), {
      what: 'the enqueue of a job of rep-gone',
      wanted: 1,
      confirmed: 0,
      timeoutMs: 200,
    });
    assert.equal(await jobs(onPrimary, 'rep-gone'), 1);
    await rejectsNotReplicated(asking.enqueueMany('rep-gone', ['a', 'b', 'c']), {
      what: 'the enqueue of 3 jobs of rep-gone',
      wanted: 1,
      confirmed: 0,
      timeoutMs: 200,
    });
    assert.equal(await jobs(onPrimary, 'rep-gone'), 4);

    // minReplicas 0 (the default), but the function asks for 1 (set by the test before).
    const plain = await connect({ minReplicasTimeoutMs: 200 });
    const held = await jobs(onPrimary, 'rep-set');
    await rejectsNotReplicated(plain.enqueue('rep-set', 'y'), {
      what: 'the enqueue of a job of rep-set',
      wanted: 1,
      confirmed: 0,
      timeoutMs: 200,
    });
    assert.equal(await jobs(onPrimary, 'rep-set'), held + 1);
    // Cleared, the function asks for none again.
    assert.equal((await plain.configure('rep-set', { minReplicas: null })).minReplicas, null);
    const { created } = await plain.enqueue('rep-set', 'z');
    assert.equal(created, true);
    assert.equal(await jobs(onPrimary, 'rep-set'), held + 2);
  });
});
