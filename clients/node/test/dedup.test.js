'use strict';

// Keys that outlive their job (`uniqForMs`, `debounceMs`, `throttle`, each with `uniq`),
// against a real redis-server and a real `wasmgear worker` serving echo, and on a Redis no
// worker serves for the refusals: a uniq key answering with its succeeded job within its
// window (and not after it), a debounced job taking the last input before it starts, a
// throttled key making at most so many jobs per window, bad combinations refused with nothing
// written.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, BadInputError, ConflictError } = require('..');
const { jobOptions } = require('../lib/options');
const { startRedis, startWorker } = require('../test-support/harness');

const WAIT = 60000;

describe('keys that outlive their job', { timeout: 600000 }, () => {
  let redis;
  let worker;
  let client;
  let admin;

  before(async () => {
    redis = await startRedis();
    worker = await startWorker(redis.url, ['echo']);
    client = await Client.connect(redis.url);
    admin = new Redis(redis.url);
  });

  after(async () => {
    if (client) await client.close();
    if (admin) admin.disconnect();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
  });

  it('answers with the succeeded job within its uniqForMs window, and not after it', async () => {
    const first = await client.enqueue('echo', 'one', { uniq: 'window', uniqForMs: 60000 });
    assert.equal(first.created, true);
    assert.equal((await client.wait(first.id, { timeoutMs: WAIT })).output.toString(), 'one');
    // Within the window the key answers with the job that succeeded: nothing is made.
    const again = await client.enqueue('echo', 'two', { uniq: 'window', uniqForMs: 60000 });
    assert.deepEqual(again, { id: first.id, created: false });
    assert.deepEqual(await client.enqueueMany('echo', [{ input: 'three', uniq: 'window' }]), [
      { id: first.id, created: false },
    ]);
    assert.equal((await client.status(first.id)).state, 'succeeded');

    // Without uniqForMs the key is let go when its job ends: a new job is made.
    const done = await client.enqueue('echo', 'a', { uniq: 'no-window' });
    await client.wait(done.id, { timeoutMs: WAIT });
    const next = await client.enqueue('echo', 'b', { uniq: 'no-window' });
    assert.equal(next.created, true);
    assert.notEqual(next.id, done.id);

    // Once the window is over, the key makes a new job again.
    const brief = await client.enqueue('echo', 'x', { uniq: 'short-window', uniqForMs: 300 });
    await client.wait(brief.id, { timeoutMs: WAIT });
    // (An enqueue within the window writes nothing: asked again until the window is over.)
    let later;
    const deadline = Date.now() + WAIT;
    do {
      later = await client.enqueue('echo', 'y', { uniq: 'short-window' });
      if (!later.created) await new Promise((resolve) => setTimeout(resolve, 20));
    } while (!later.created && Date.now() < deadline);
    assert.equal(later.created, true);
    assert.notEqual(later.id, brief.id);
    assert.equal((await client.wait(later.id, { timeoutMs: WAIT })).output.toString(), 'y');
  });

  it('makes at most throttle.limit jobs with the key per window, the latest answering', async () => {
    const made = [];
    for (let i = 0; i < 3; i += 1) {
      made.push(await client.enqueue('echo', `t${i}`, { uniq: 'throttle', throttle: { limit: 2, intervalMs: 60000 } }));
    }
    assert.deepEqual(made.map((e) => e.created), [true, true, false]);
    assert.notEqual(made[0].id, made[1].id, 'a throttled key does not join an unfinished job');
    assert.equal(made[2].id, made[1].id, 'beyond the limit, the latest made answers');
    // In one call too, each job against those made before it.
    const throttle = { limit: 2, intervalMs: 60000 };
    const many = await client.enqueueMany(
      'echo',
      ['a', 'b', 'c', 'd'].map((input) => ({ input, uniq: 'throttle-many', throttle })),
    );
    assert.deepEqual(many.map((e) => e.created), [true, true, false, false]);
    assert.deepEqual([many[2].id, many[3].id], [many[1].id, many[1].id]);
    assert.notEqual(many[0].id, many[1].id);
    const outputs = (await client.wait([made[0].id, made[1].id], { timeoutMs: WAIT })).map((j) => j.output.toString());
    assert.deepEqual(outputs, ['t0', 't1']);
  });

  it('debounces: enqueued again before it starts, the job takes the new input and waits again', async () => {
    const first = await client.enqueue('echo', 'first', { uniq: 'debounce', debounceMs: 2000 });
    const second = await client.enqueue('echo', 'second', { uniq: 'debounce', debounceMs: 2000 });
    assert.equal(first.created, true);
    assert.deepEqual(second, { id: first.id, created: false });
    const job = await client.status(first.id);
    assert.equal(job.state, 'scheduled');
    assert.equal(job.attempt, 0);
    // The queue's input hash, by number: the input given last.
    assert.equal(await admin.hget('wg:{echo}:input', String(job.number)), 'second');
    // It ran once, with that input.
    assert.equal((await client.wait(first.id, { timeoutMs: WAIT })).output.toString(), 'second');
    // Started (here ended), the key makes a new job.
    const third = await client.enqueue('echo', 'third', { uniq: 'debounce', debounceMs: 50 });
    assert.equal(third.created, true);
    assert.notEqual(third.id, first.id);
    assert.equal((await client.wait(third.id, { timeoutMs: WAIT })).output.toString(), 'third');
  });

  it('sends the options after the Rust client\'s others', () => {
    assert.deepEqual(jobOptions({ uniq: 'u', group: 'g', throttle: { limit: 3, intervalMs: 1500 } }).named, [
      'uniq', 'u', 'group', 'g', 'throttle', '3', 'throttle_ms', '1500',
    ]);
    assert.deepEqual(jobOptions({ uniq: 'u', uniqForMs: 3600000 }).named, ['uniq', 'u', 'uniq_for', '3600000']);
    assert.deepEqual(jobOptions({ uniq: 'u', debounceMs: 250, delayMs: 0 }).named, ['uniq', 'u', 'debounce', '250']);
    assert.deepEqual(jobOptions({ uniq: 'u', uniqForMs: null, debounceMs: undefined }).named, ['uniq', 'u']);
  });

  describe('on a Redis no worker serves', () => {
    let bare;
    let own;
    let bareAdmin;

    before(async () => {
      bare = await startRedis();
      own = await Client.connect(bare.url);
      bareAdmin = new Redis(bare.url);
    });

    after(async () => {
      if (own) await own.close();
      if (bareAdmin) bareAdmin.disconnect();
      if (bare) await bare.stop();
    });

    it('refuses bad combinations and writes nothing', async () => {
      await own.enqueue('echo', 'a real job', { uniq: 'k', uniqForMs: 60000 });
      const keys = async () => (await bareAdmin.keys('*')).sort();
      const before = await keys();
      const seq = await bareAdmin.get('wg:{echo}:seq');
      const soon = new Date(Date.now() + 3600000);
      const per = { limit: 1, intervalMs: 1000 };
      const cases = [
        [() => own.enqueue('echo', 'x', { uniqForMs: 60000 }), 'invalid job option: uniqForMs works on a uniq key: give uniq too'],
        [() => own.enqueue('echo', 'x', { debounceMs: 1000 }), 'debounceMs works on a uniq key'],
        [() => own.enqueue('echo', 'x', { throttle: per }), 'throttle works on a uniq key'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', uniqForMs: 1000, debounceMs: 1000 }), 'give one of uniqForMs, debounceMs and throttle, not uniqForMs and debounceMs'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', debounceMs: 1000, throttle: per }), 'give one of uniqForMs, debounceMs and throttle'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', debounceMs: 1000, delayMs: 5000 }), "debounceMs is the job's delay: give no delayMs or at with it"],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', debounceMs: 1000, at: soon }), "debounceMs is the job's delay"],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', uniqForMs: 0 }), 'uniqForMs 0 is out of range 1ms..=10 years'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', uniqForMs: 1.5 }), 'uniqForMs 1.5 must be a whole number of milliseconds'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', debounceMs: 315360000001 }), 'debounceMs 315360000001 is out of range 1ms..=10 years'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', debounceMs: '5s' }), 'debounceMs "5s" must be a whole number'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', throttle: { limit: 0, intervalMs: 60000 } }), 'throttle.limit 0 is out of range 1..=9007199254740991'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', throttle: { limit: 1.5, intervalMs: 60000 } }), 'throttle.limit 1.5 is out of range'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', throttle: { limit: 2, intervalMs: 0 } }), 'throttle.intervalMs 0 is out of range 1ms..=10 years'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', throttle: { limit: 2 } }), 'throttle.intervalMs undefined must be a whole number'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', throttle: [2, 60000] }), 'throttle [2,60000] must be {limit, intervalMs}'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', throttle: 5 }), 'throttle 5 must be {limit, intervalMs}'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', throttle: { limit: 1, intervalMs: 1, every: 2 } }), 'must be {limit, intervalMs}'],
        [() => own.enqueue('echo', 'x', { uniq: 'k2', uniq_for: 1000 }), 'unknown option "uniq_for"'],
        [() => own.enqueueMany('echo', ['ok', { input: 'bad', uniqForMs: 1000 }]), 'job 2 of the batch: invalid job option: uniqForMs works on a uniq key'],
        [() => own.batch([{ function: 'echo' }, { function: 'echo', options: { uniqForMs: 60000 } }]), 'job 2 of the batch: invalid job option: uniqForMs works on a uniq key'],
        [() => own.batch([{ function: 'echo', options: { uniq: 'b', throttle: per } }]), "job 1 of the batch: invalid job option: a batch's jobs are always new, so they take no uniq"],
        [() => own.submitFlow({ name: 'f', jobs: { a: { function: 'echo', uniq: 'k', uniq_for_ms: 60000 } } }), 'unknown field "uniq_for_ms"'],
        [() => own.submitFlow({ name: 'f', jobs: { a: { function: 'echo', debounce: 1 } } }), 'unknown field "debounce"'],
      ];
      for (const [attempt, message] of cases) {
        await assert.rejects(attempt(), (error) => {
          assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
          assert.ok(!(error instanceof ConflictError), message);
          assert.ok(error.message.includes(message), `${error.message} lacks ${message}`);
          return true;
        });
        assert.deepEqual(await keys(), before, `${message}: keys changed`);
        assert.equal(await bareAdmin.get('wg:{echo}:seq'), seq, `${message}: a job was made`);
      }
    });
  });
});
