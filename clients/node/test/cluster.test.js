'use strict';

// The client against a real Redis Cluster of three primaries and a real worker: calls are
// routed by their keys' slot, the library is loaded on every primary, and one pub/sub
// connection to the node given hears the events of every node.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, BadInputError, NotReplicatedError } = require('..');
const { startCluster, startWorker, until } = require('../test-support/harness');
const manifest = require('../protocol/manifest.json');

describe('wasmgear client on Redis Cluster', { timeout: 300000 }, () => {
  let cluster;
  let worker;
  let client;
  let nodes;

  before(async () => {
    cluster = await startCluster(3);
    nodes = cluster.nodes.map((node) => new Redis(node.url));
  });

  after(async () => {
    if (client) await client.close();
    for (const node of nodes || []) node.disconnect();
    if (worker) await worker.stop();
    if (cluster) await cluster.stop();
  });

  it('finds the cluster and loads the library on every primary', async () => {
    client = await Client.connect(cluster.url);
    assert.equal(client.isCluster, true);
    for (const node of nodes) {
      assert.equal(await node.call('FCALL', 'wg2_version', '0'), manifest.version);
    }
    // The functions used below live on different nodes.
    const owners = new Set();
    for (const fn of ['echo', 'count', 'fail']) {
      const slot = await nodes[0].cluster('KEYSLOT', `wg:{${fn}}:jobs`);
      const shards = await nodes[0].cluster('SLOTS');
      owners.add(shards.find(([from, to]) => slot >= from && slot <= to)[2][1]);
    }
    assert.ok(owners.size >= 2, 'echo, count and fail are spread over the nodes');
  });

  it('enqueues, links across nodes and waits', async () => {
    worker = await startWorker(cluster.url, ['echo', 'count', 'fail']);
    const events = client.events();
    assert.equal(await events.ready, true);
    const first = await client.enqueue('echo', 'on one node');
    const second = await client.enqueue('count', '3 20', { after: [first.id] });
    const bulk = await client.enqueueMany('echo', Array.from({ length: 2500 }, (_, i) => `b${i}`));
    const reports = [];
    const jobs = await client.wait([first.id, second.id, ...bulk.map((j) => j.id)], {
      timeoutMs: 120000,
      onProgress: (p, id) => reports.push({ id, ...p }),
    });
    assert.equal(jobs[0].output.toString(), 'on one node');
    assert.equal(jobs[1].output.toString(), 'counted to 3');
    assert.ok(jobs[1].startedAt >= jobs[0].finishedAt);
    assert.equal(jobs.at(-1).output.toString(), 'b2499');
    assert.ok(reports.some((r) => r.id === second.id && r.done === 3));
    // Events of functions on other nodes reach the one pattern subscription.
    const seen = new Set();
    for await (const event of events) {
      if (event.event === 'finish') seen.add(event.function);
      if (seen.has('echo') && seen.has('count')) break;
    }
  });

  it('shares one subscription among many waits', async () => {
    const jobs = await client.enqueueMany('count', Array.from({ length: 20 }, () => '2 50'));
    const waiting = client.wait(jobs.map((j) => j.id), { timeoutMs: 120000 });
    const numsub = async () => Number((await nodes[0].pubsub('NUMSUB', 'wg:{count}:events'))[1]);
    await until('the waits to subscribe', async () => (await numsub()) >= 1);
    assert.equal(await numsub(), 1);
    assert.equal((await waiting).length, 20);
  });

  it('loads the library again on a node that lost it', async () => {
    // Flushed on every node: the first call finds no function and loads it everywhere.
    for (const node of nodes) await node.function('FLUSH');
    const { id } = await client.enqueue('fail', 'boom', { attempts: 1 });
    assert.match(id, /^fail:[0-9]+$/);
    await assert.rejects(client.wait(id, { timeoutMs: 60000 }), /failed/);
    for (const node of nodes) {
      assert.equal(await node.call('FCALL', 'wg2_version', '0'), manifest.version);
    }
  });

  it('refuses bad input before writing, on the node of the function', async () => {
    await assert.rejects(client.enqueue('echo', 'x', { at: new Date(Date.now() - 1000) }), BadInputError);
    const queues = await client.queues();
    assert.deepEqual(
      queues.map((q) => q.function),
      ['count', 'echo', 'fail'],
    );
    assert.equal(queues.find((q) => q.function === 'echo').succeeded, 2501);
  });

  it('submits a flow over the nodes: its record in the {flows} slot, its jobs and links in theirs', async () => {
    const submitted = await client.submitFlow({
      name: 'spread',
      jobs: {
        a: { function: 'echo', input: 'x' },
        b: { function: 'count', input: '2 10', after: ['a'] },
        c: { function: 'fail', input: 'no', attempts: 1, after: ['b'] },
        d: { function: 'echo', input: 'y', after: [{ job: 'c', on_failure: 'continue' }, 'a'] },
      },
    });
    const status = await client.waitFlow(submitted.id, { timeoutMs: 120000 });
    assert.deepEqual(status.counts, { succeeded: 3, failed: 1 }, JSON.stringify(status));
    assert.deepEqual(status.sinks, ['d']);
    assert.equal((await client.status(submitted.jobs.d)).output.toString(), 'y');
    assert.equal(await client.cancelFlow(submitted.id), 0);
  });

  it('runs a batch over the nodes: its keys in its own slot, its jobs in theirs, one callback', async () => {
    const { id, jobs } = await client.batch(
      [
        { function: 'echo', input: 'x' },
        { function: 'count', input: '2 10' },
        { function: 'fail', input: 'no', options: { attempts: 1 } },
        { function: 'echo', input: 'later', options: { delayMs: 3600000 } },
      ],
      { name: 'spread', onSuccess: { function: 'count' }, onComplete: { function: 'echo', data: [1] } },
    );
    // The last job ends by this client's cancel: its end is counted on the batch's node.
    await until('the three others to end', async () => (await client.batchStatus(id)).pending === 1, {
      timeoutMs: 120000,
      everyMs: 100,
    });
    assert.equal((await client.cancel(jobs[3])).outcome, 'cancelled');
    const status = await client.batchStatus(id);
    assert.deepEqual([status.succeeded, status.failed, status.cancelled, status.pending], [2, 1, 1, 0]);
    assert.deepEqual([status.failedIds, status.cancelledIds, status.onSuccess], [[jobs[2]], [jobs[3]], null]);
    const input = JSON.parse((await client.wait(status.onComplete, { timeoutMs: 120000 })).output.toString());
    assert.deepEqual([input.batch, input.callback, input.total, input.data], [id, 'complete', 4, [1]]);
  });

  it("asks the node of the function's keys for its replicas (none here): NotReplicatedError, each job written once", async () => {
    const asking = await Client.connect(cluster.url, { minReplicas: 1, minReplicasTimeoutMs: 100 });
    try {
      const scheduled = async (fn) => (await client.queues()).find((q) => q.function === fn).scheduled;
      // echo and count live on different nodes: FCALL and WAIT go together to each's.
      for (const fn of ['echo', 'count']) {
        const held = await scheduled(fn);
        await assert.rejects(asking.enqueue(fn, '2 10', { delayMs: 3600000 }), (error) => {
          assert.ok(error instanceof NotReplicatedError, `${error.name}: ${error.message}`);
          assert.deepEqual([error.what, error.wanted, error.confirmed, error.timeoutMs], [`the enqueue of a job of ${fn}`, 1, 0, 100]);
          return true;
        });
        assert.equal(await scheduled(fn), held + 1, fn);
      }
    } finally {
      await asking.close();
    }
  });
});
