'use strict';

// Groups inside a function (a tenant, customer or document key per job), against a real
// redis-server and a real `wasmgear worker` serving echo and count on a Redis of its own (the
// tests pause and cap these functions): jobs leased round robin across groups, a group of
// concurrency 1 running its jobs one at a time, a paused group, group keys and settings
// refused with nothing written, the function's group defaults read back, flows' and batches'
// jobs in groups.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, BadInputError, ConflictError } = require('..');
const { startRedis, startWorker, until, cli } = require('../test-support/harness');

const WAIT = 60000;
const NONE = Object.freeze({ concurrency: null, rateLimit: null, paused: false });

/** A group as `groups` lists it, with no settings of its own and no rate window to wait for. */
const plain = (group, ready, running = 0) => ({ group, ready, running, config: NONE, rateLimitedUntil: null });

describe('groups', { timeout: 600000 }, () => {
  let redis;
  let worker;
  let client;

  before(async () => {
    redis = await startRedis();
    worker = await startWorker(redis.url, ['echo', 'count']);
    client = await Client.connect(redis.url);
  });

  after(async () => {
    if (client) await client.close();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
  });

  it('leases jobs round robin across groups: five of big, then one of a and one of b', async () => {
    const settings = await client.configure('echo', { paused: true, concurrency: 1 });
    assert.equal(settings.paused, true);
    assert.equal(settings.concurrency, 1);
    try {
      const big = (
        await client.enqueueMany('echo', [1, 2, 3, 4, 5].map((i) => ({ input: `big-${i}`, group: 'big' })))
      ).map((job) => job.id);
      const a = (await client.enqueue('echo', 'a-1', { group: 'a' })).id;
      const b = (await client.enqueue('echo', 'b-1', { group: 'b' })).id;
      assert.equal((await client.status(big[0])).record.group_id, 'big');

      const overview = await client.groups('echo');
      assert.deepEqual(overview, {
        groups: 3,
        truncated: false,
        ungroupedReady: 0,
        listed: [plain('big', 5), plain('a', 1), plain('b', 1)],
      });
      assert.deepEqual((await client.groups('echo', { limit: 1 })).listed, [plain('big', 5)]);
      assert.deepEqual((await client.groups('echo', { group: 'b' })).listed, [plain('b', 1)]);
      // The CLI reads the same groups.
      const shown = await cli(['groups', 'echo', '--json', '--redis', redis.url]);
      assert.equal(shown.code, 0, shown.stderr);
      const theirs = JSON.parse(shown.stdout);
      assert.deepEqual([theirs.groups, theirs.truncated, theirs.ungrouped_ready], [3, false, 0]);
      assert.deepEqual(theirs.listed.map((g) => [g.group, g.ready, g.running]), [['big', 5, 0], ['a', 1, 0], ['b', 1, 0]]);
      // Queued counts the jobs with a group too.
      assert.equal((await client.queues()).find((q) => q.function === 'echo').queued, 7);

      const stream = client.events('echo');
      assert.equal(await stream.ready, true);
      const started = [];
      const heard = (async () => {
        for await (const event of stream) {
          if (event.event === 'start') started.push(event.id);
          if (started.length === 7) break;
        }
      })();
      await client.configure('echo', { paused: false });
      await until('seven jobs to start', () => started.length === 7, { timeoutMs: WAIT });
      await heard;
      assert.deepEqual(started, [big[0], a, b, big[1], big[2], big[3], big[4]]);
      const jobs = await client.wait([...big, a, b], { timeoutMs: WAIT });
      assert.deepEqual(
        jobs.map((job) => job.output.toString()),
        ['big-1', 'big-2', 'big-3', 'big-4', 'big-5', 'a-1', 'b-1'],
      );
      // Nothing ready, running or configured: no group is left.
      assert.deepEqual(await client.groups('echo'), { groups: 0, truncated: false, ungroupedReady: 0, listed: [] });
    } finally {
      await client.configure('echo', { paused: false, concurrency: null });
    }
  });

  it('runs the jobs of a group of concurrency 1 one at a time, the other groups beside them', async () => {
    const own = await client.configureGroup('count', 'seq', { concurrency: 1 });
    assert.deepEqual(own, { concurrency: 1, rateLimit: null, paused: false });
    assert.deepEqual(await client.groups('count', { group: 'seq' }), {
      groups: 1,
      truncated: false,
      ungroupedReady: 0,
      listed: [{ ...plain('seq', 0), config: own }],
    });
    await client.configure('count', { paused: true });
    let seq;
    let free;
    try {
      seq = (await client.enqueueMany('count', [1, 2, 3].map(() => ({ input: '3 100', group: 'seq' })))).map((j) => j.id);
      free = (await client.enqueueMany('count', [1, 2].map(() => ({ input: '3 100', group: 'free' })))).map((j) => j.id);
      const listed = (await client.groups('count')).listed;
      assert.deepEqual(listed.map((g) => [g.group, g.ready, g.running, g.config.concurrency]), [
        ['seq', 3, 0, 1],
        ['free', 2, 0, null],
      ]);
    } finally {
      await client.configure('count', { paused: false });
    }
    let most = 0;
    await until(
      'the sequence to run',
      async () => {
        const [group] = (await client.groups('count', { group: 'seq' })).listed;
        most = Math.max(most, group.running);
        return group.ready === 0 && group.running === 0;
      },
      { timeoutMs: WAIT, everyMs: 10 },
    );
    assert.equal(most, 1, 'the group of concurrency 1 was never seen with exactly one job running');
    const seqJobs = await client.wait(seq, { timeoutMs: WAIT });
    const freeJobs = await client.wait(free, { timeoutMs: WAIT });
    for (let i = 1; i < seqJobs.length; i += 1) {
      assert.ok(seqJobs[i].startedAt >= seqJobs[i - 1].finishedAt, 'two jobs of the sequence overlapped');
    }
    // The other group was not held back by the sequence.
    for (const job of freeJobs) assert.ok(job.startedAt < seqJobs[1].startedAt);
    // Its own concurrency cleared, the group has nothing left to list.
    assert.deepEqual(await client.configureGroup('count', 'seq', { concurrency: null }), NONE);
    assert.deepEqual((await client.groups('count', { group: 'seq' })).listed, [plain('seq', 0)]);
    assert.equal((await client.groups('count')).groups, 0);
  });

  it('holds the jobs of a paused group while the others run', async () => {
    assert.deepEqual(await client.configureGroup('echo', 'held', { paused: true }), { ...NONE, paused: true });
    const held = (await client.enqueueMany('echo', ['h-1', 'h-2'].map((input) => ({ input, group: 'held' })))).map((j) => j.id);
    const others = (await client.enqueueMany('echo', ['g-1', 'g-2'].map((input) => ({ input, group: 'go' })))).map((j) => j.id);
    others.push((await client.enqueue('echo', 'no group')).id);
    assert.deepEqual((await client.wait(others, { timeoutMs: WAIT })).map((j) => j.state), ['succeeded', 'succeeded', 'succeeded']);
    for (const id of held) assert.equal((await client.status(id)).state, 'queued');
    assert.deepEqual(await client.groups('echo'), {
      groups: 1,
      truncated: false,
      ungroupedReady: 0,
      listed: [{ ...plain('held', 2), config: { ...NONE, paused: true } }],
    });
    // Its own limits beside the pause, then cleared: the pause stays until resumed.
    const own = await client.configureGroup('echo', 'held', { concurrency: 2, rateLimit: { limit: 10, intervalMs: 60000 } });
    assert.deepEqual(own, { concurrency: 2, rateLimit: { limit: 10, intervalMs: 60000 }, paused: true });
    assert.deepEqual((await client.groups('echo', { group: 'held' })).listed[0].config, own);
    assert.deepEqual(
      await client.configureGroup('echo', 'held', { concurrency: null, rateLimit: null }),
      { ...NONE, paused: true },
    );
    for (const id of held) assert.equal((await client.status(id)).state, 'queued');
    assert.deepEqual(await client.configureGroup('echo', 'held', { paused: false }), NONE);
    assert.deepEqual((await client.wait(held, { timeoutMs: WAIT })).map((j) => j.output.toString()), ['h-1', 'h-2']);
  });

  describe('on a Redis no worker serves', () => {
    let bare;
    let own;
    let admin;

    before(async () => {
      bare = await startRedis();
      own = await Client.connect(bare.url);
      admin = new Redis(bare.url);
    });

    after(async () => {
      if (own) await own.close();
      if (admin) admin.disconnect();
      if (bare) await bare.stop();
    });

    it('refuses bad group keys and settings and writes nothing', async () => {
      const first = await own.enqueue('echo', 'a real job', { group: 'g' });
      const keys = async () => (await admin.keys('*')).sort();
      const before = await keys();
      const seq = await admin.get('wg:{echo}:seq');
      const cases = [];
      for (const key of ['a b', '', 'x'.repeat(201), 'a"b', 'a|b', 'a\\b', 'é', 'tab\t', 5]) {
        const shown = JSON.stringify(key);
        cases.push(
          [() => own.enqueue('echo', 'x', { group: key }), `invalid job option: group ${shown}`],
          [() => own.configureGroup('echo', key, { paused: true }), `invalid group setting: group ${shown}`],
          [() => own.configureGroup('other', key, { concurrency: 1 }), `invalid group setting: group ${shown}`],
          [() => own.groups('echo', { group: key }), `invalid groups option: group ${shown}`],
        );
      }
      cases.push(
        [() => own.enqueueMany('echo', ['ok', { input: 'bad', group: 'a b' }, 'ok']), 'job 2 of the batch: invalid job option: group "a b" holds " "'],
        [() => own.enqueueMany('echo', Array.from({ length: 1500 }, (_, i) => ({ input: `${i}`, group: i === 1400 ? 'a|b' : 'g' }))), 'job 1401 of the batch'],
        [() => own.batch([{ function: 'echo' }, { function: 'echo', options: { group: '' } }]), 'job 2 of the batch: invalid job option: group "" must be 1 to 200 bytes long'],
        [() => own.submitFlow({ name: 'f', jobs: { a: { function: 'echo', group: 'no spaces please' } } }), 'job "a": group "no spaces please" holds " "'],
        [() => own.submitFlow({ name: 'f', jobs: { a: { function: 'echo', group: 7 } } }), 'jobs.a.group: must be a string'],
        [() => own.groups('echo', { limit: 0 }), 'list 1 to 1000 groups, not 0'],
        [() => own.groups('echo', { limit: 1001 }), 'list 1 to 1000 groups, not 1001'],
        [() => own.groups('bad name!'), 'invalid function name'],
        [() => own.configureGroup('echo', 'g', { concurrency: 0 }), 'a concurrency of 0 would stop group "g"; pause it instead'],
        [() => own.configureGroup('echo', 'g', { concurrency: -1 }), 'concurrency -1 must be a whole number'],
        [() => own.configureGroup('echo', 'g', { rateLimit: { limit: 0, intervalMs: 60000 } }), 'a rate limit needs at least 1 job per interval of at least 1ms'],
        [() => own.configureGroup('echo', 'g', { rateLimit: 5 }), 'rateLimit 5 must be {limit, intervalMs}'],
        [() => own.configureGroup('echo', 'g', { paused: 'yes' }), 'paused "yes" must be true or false'],
        [() => own.configureGroup('bad name!', 'g', { paused: true }), 'invalid function name'],
        [() => own.configure('echo', { groupConcurrency: 0 }), 'a group concurrency of 0 would stop every group'],
        [() => own.configure('echo', { groupRateLimit: { limit: 1, intervalMs: -1 } }), 'groupRateLimit.intervalMs -1 is out of range'],
        [() => own.configure('echo', { groupConcurrency: 2 ** 53 }), 'must be a whole number in 1..=9007199254740991'],
        [() => own.configure('echo', { concurrency: 0 }), 'a concurrency cap of 0'],
        [() => own.configure('echo', { keepFinished: 0 }), 'keep at least 1 finished job'],
        [() => own.configure('other', { groupConcurrency: 1.5 }), 'groupConcurrency 1.5 must be a whole number'],
        [() => own.configure('other', { group_concurrency: 1 }), 'unknown setting "group_concurrency"'],
      );
      for (const [attempt, message] of cases) {
        await assert.rejects(attempt(), (error) => {
          assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
          assert.ok(!(error instanceof ConflictError), message);
          assert.equal(error.exitCode, 2);
          assert.ok(error.message.includes(message), `${error.message} lacks ${message}`);
          return true;
        });
        assert.deepEqual(await keys(), before, `${message}: keys changed`);
        assert.equal(await admin.get('wg:{echo}:seq'), seq, `${message}: a job was made`);
        assert.equal(await admin.hlen('wg:{echo}:group-config'), 0, message);
      }
      // The widest key there is: every printable character a key may hold, 200 bytes.
      const widest = Array.from({ length: 94 }, (_, i) => String.fromCharCode(0x21 + i))
        .filter((c) => !'"\\|'.includes(c)).join('').repeat(3).slice(0, 200);
      const wide = await own.enqueue('echo', 'wide', { group: widest });
      assert.equal((await own.status(wide.id)).record.group_id, widest);
      assert.deepEqual((await own.groups('echo')).listed.map((g) => g.group), [widest, 'g']);
      assert.equal((await own.status(first.id)).state, 'queued');
    });

    it("reads the function's group defaults back", async () => {
      const none = {
        paused: false,
        concurrency: null,
        rateLimit: null,
        keepFinished: null,
        groupConcurrency: null,
        groupRateLimit: null,
        minReplicas: null,
        encrypt: false,
      };
      assert.deepEqual(await own.config('defaults'), none);
      const settings = await own.configure('defaults', { groupConcurrency: 2, groupRateLimit: { limit: 5, intervalMs: 2000 } });
      assert.deepEqual(settings, { ...none, groupConcurrency: 2, groupRateLimit: { limit: 5, intervalMs: 2000 } });
      assert.deepEqual(await own.config('defaults'), settings);
      assert.deepEqual(await admin.hgetall('wg:{defaults}:config'), {
        group_concurrency: '2', group_rate_limit: '5', group_rate_interval_ms: '2000',
      });
      assert.equal(await admin.sismember('wg:{functions}:names', 'defaults'), 1);
      // The Rust CLI reads what this client wrote.
      const shown = await cli(['config', 'defaults', '--json', '--redis', bare.url]);
      assert.equal(shown.code, 0, shown.stderr);
      const theirs = JSON.parse(shown.stdout);
      assert.deepEqual([theirs.group_concurrency, theirs.group_rate_limit], [2, '5/2000ms']);
      // A setting left out is kept; a rate limit read back can be given again.
      const again = await own.configure('defaults', {
        concurrency: 3, rateLimit: { limit: 10, intervalMs: 60000 }, keepFinished: 100, groupRateLimit: settings.groupRateLimit,
      });
      assert.deepEqual(again, {
        paused: false,
        concurrency: 3,
        rateLimit: { limit: 10, intervalMs: 60000 },
        keepFinished: 100,
        groupConcurrency: 2,
        groupRateLimit: { limit: 5, intervalMs: 2000 },
        minReplicas: null,
        encrypt: false,
      });
      assert.deepEqual(await own.configure('defaults'), again);
      // The replicas each enqueue of its jobs must be confirmed by, kept as `min_replicas`.
      assert.equal((await own.configure('defaults', { minReplicas: 2 })).minReplicas, 2);
      assert.equal(await admin.hget('wg:{defaults}:config', 'min_replicas'), '2');
      assert.equal((await own.configure('defaults', { minReplicas: null })).minReplicas, null);
      assert.equal(await admin.hexists('wg:{defaults}:config', 'min_replicas'), 0);
      const cleared = await own.configure('defaults', { groupConcurrency: null, groupRateLimit: null });
      assert.deepEqual([cleared.groupConcurrency, cleared.groupRateLimit, cleared.concurrency], [null, null, 3]);
      assert.deepEqual(await own.configure('defaults', { concurrency: null, rateLimit: null, keepFinished: null }), none);
      assert.deepEqual(await admin.hgetall('wg:{defaults}:config'), {});
    });

    it("puts flows' and batches' jobs in their groups", async () => {
      const flow = await own.submitFlow({
        name: 'tenant',
        jobs: {
          a: { function: 'tenants', input: 'a', group: 't1' },
          b: { function: 'tenants', input: 'b', group: 't1', after: ['a'] },
        },
      });
      const batch = await own.batch([
        { function: 'tenants', input: 'y', options: { group: 't2' } },
        { function: 'tenants', input: 'z' },
      ]);
      assert.equal((await own.status(flow.jobs.a)).record.group_id, 't1');
      const waiting = await own.status(flow.jobs.b);
      assert.deepEqual([waiting.state, waiting.record.group_id], ['waiting', 't1']);
      assert.equal((await own.status(batch.jobs[0])).record.group_id, 't2');
      assert.equal((await own.status(batch.jobs[1])).record.group_id, undefined);
      assert.deepEqual(await own.groups('tenants'), {
        groups: 2,
        truncated: false,
        ungroupedReady: 1,
        listed: [plain('t1', 1), plain('t2', 1)],
      });
      assert.equal((await own.queues()).find((q) => q.function === 'tenants').queued, 3);
    });
  });
});
