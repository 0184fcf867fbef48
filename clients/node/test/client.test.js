'use strict';

// The client against a real redis-server and a real `wasmgear worker` running the example
// plugins echo, count and fail.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const Redis = require('ioredis');

const {
  Client,
  WasmgearError,
  BadInputError,
  ConflictError,
  NotFoundError,
  UnreachableError,
  JobFailedError,
  JobCancelledError,
  WaitTimeoutError,
} = require('..');
const { startRedis, startWorker, freePort, until, cli } = require('../test-support/harness');

const FUNCTIONS_KEY = 'wg:{functions}:names';

describe('wasmgear client', { timeout: 600000 }, () => {
  let redis;
  let worker;
  let client;
  let admin;

  before(async () => {
    redis = await startRedis();
    worker = await startWorker(redis.url, ['echo', 'count', 'fail']);
    client = await Client.connect(redis.url);
    admin = new Redis(redis.url);
  });

  after(async () => {
    if (client) await client.close();
    if (admin) admin.disconnect();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
  });

  it('round trip: enqueue echo, wait, read status and logs', async () => {
    const { id, created } = await client.enqueue('echo', 'hello from node');
    assert.match(id, /^echo:[0-9]+$/);
    assert.equal(created, true);
    const job = await client.wait(id, { timeoutMs: 60000 });
    assert.equal(job.id, id);
    assert.equal(job.state, 'succeeded');
    assert.ok(Buffer.isBuffer(job.output));
    assert.equal(job.output.toString(), 'hello from node');
    assert.equal(job.attempt, 1);
    assert.ok(job.createdAt instanceof Date && job.finishedAt instanceof Date);
    assert.ok(job.finishedAt >= job.createdAt);
    assert.equal(job.history.length, 1);
    assert.equal(job.history[0].outcome, 'succeeded');
    const again = await client.status(id);
    assert.deepEqual(again.record, job.record);
    assert.deepEqual(await client.cancel(id), { outcome: 'already-ended', state: 'succeeded' });
    assert.equal(typeof (await client.logs(id)), 'string');
    // Binary input comes back byte for byte.
    const bytes = Buffer.from([0, 1, 2, 250, 255, 10, 13]);
    const binary = await client.enqueue('echo', bytes);
    assert.deepEqual((await client.wait(binary.id, { timeoutMs: 60000 })).output, bytes);
    assert.ok((await admin.smembers(FUNCTIONS_KEY)).includes('echo'));
  });

  it('the README quick start is five lines and runs as written', async () => {
    const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
    const block = /## Quick start\s+```js\n([\s\S]*?)```/.exec(readme)[1];
    assert.equal(block.trimEnd().split('\n').length, 5, block);
    assert.ok(block.includes("'redis://127.0.0.1:6379'"), block);
    // A program of its own, in a folder where `wasmgear` is this package.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-quickstart-'));
    try {
      fs.mkdirSync(path.join(dir, 'node_modules'));
      fs.symlinkSync(path.resolve(__dirname, '..'), path.join(dir, 'node_modules', 'wasmgear'), 'dir');
      const program = path.join(dir, 'quickstart.mjs');
      fs.writeFileSync(program, block.replace('redis://127.0.0.1:6379', redis.url));
      const result = await new Promise((resolve) => {
        execFile(process.execPath, [program], { timeout: 60000 }, (error, stdout, stderr) => {
          resolve({ error, stdout, stderr });
        });
      });
      assert.equal(result.error, null, result.stderr);
      assert.equal(result.stdout, 'hello\n');
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('hands progress to the callback in seq order, never backwards', async () => {
    const { id } = await client.enqueue('count', '5 20');
    const reports = [];
    const job = await client.wait(id, {
      timeoutMs: 60000,
      onProgress: (progress, of) => reports.push({ ...progress, of }),
    });
    assert.equal(job.state, 'succeeded');
    assert.equal(job.output.toString(), 'counted to 5');
    assert.ok(reports.length >= 1, 'at least the last report is seen');
    for (let i = 1; i < reports.length; i += 1) {
      assert.ok(reports[i].seq > reports[i - 1].seq, `seq goes up: ${JSON.stringify(reports)}`);
      assert.ok(reports[i].done >= reports[i - 1].done, `done never goes back: ${JSON.stringify(reports)}`);
    }
    for (const report of reports) {
      assert.equal(report.of, id);
      assert.equal(report.total, 5);
    }
    assert.equal(reports.at(-1).done, 5);
    assert.equal(reports.at(-1).seq, job.progressSeq);
  });

  it('enqueues a bulk of 10 000 in calls of 1000 and waits for them all', async () => {
    const before = Number((await admin.get('wg:{echo}:seq')) || 0);
    const items = Array.from({ length: 10000 }, (_, i) => `bulk-${i}`);
    const jobs = await client.enqueueMany('echo', items);
    assert.equal(jobs.length, 10000);
    jobs.forEach((job, i) => {
      assert.equal(job.id, `echo:${before + 1 + i}`);
      assert.equal(job.created, true);
    });
    assert.equal(Number(await admin.get('wg:{echo}:seq')), before + 10000);
    const done = await client.wait(
      jobs.map((job) => job.id),
      { timeoutMs: 300000 },
    );
    assert.equal(done.length, 10000);
    for (const i of [0, 1, 999, 1000, 5000, 9999]) {
      assert.equal(done[i].state, 'succeeded');
      assert.equal(done[i].output.toString(), `bulk-${i}`);
    }
    assert.ok(done.every((job) => job.state === 'succeeded'));
    // Each call acknowledged the one before it: what is kept to answer calls sent again
    // does not grow by one entry per call.
    const kept = await admin.hkeys('wg:{echo}:calls');
    assert.ok(kept.length < 10, `calls kept: ${kept.length}`);
  });

  it('many waits at once share one subscription', async () => {
    const jobs = await client.enqueueMany(
      'count',
      Array.from({ length: 40 }, () => '2 50'),
    );
    const ids = jobs.map((job) => job.id);
    const seen = new Set();
    const pubsubClients = async () =>
      (await admin.client('LIST', 'TYPE', 'pubsub')).split('\n').filter((line) => line.trim()).length;
    const connections = await pubsubClients();
    const waiting = client.wait(ids, { timeoutMs: 120000, onProgress: (_, id) => seen.add(id) });
    const numsub = async () => Number((await admin.pubsub('NUMSUB', 'wg:{count}:events'))[1]);
    await until('the waits to subscribe', async () => (await numsub()) >= 1);
    assert.equal(await numsub(), 1);
    // At most the client's one pub/sub connection is new (made by its first wait).
    assert.ok((await pubsubClients()) <= connections + 1);
    const done = await waiting;
    assert.equal(done.length, 40);
    assert.ok(done.every((job) => job.state === 'succeeded' && job.output.toString() === 'counted to 2'));
    assert.equal(seen.size, 40, 'progress of every job was heard');
    // The last wait gone, the channel is let go.
    await until('the channel to be unsubscribed', async () => (await numsub()) === 0);
  });

  describe('refuses bad input and writes nothing', () => {
    const cases = [
      ['priority out of range', 'nobody', 'x', { priority: 1001 }, /priority 1001 is out of range -1000\.\.=1000/],
      ['priority not a number', 'nobody', 'x', { priority: 'urgent' }, /priority "urgent"/],
      ['too many tags', 'nobody', 'x', { tags: Array.from({ length: 33 }, (_, i) => `t${i}`) }, /33 tags are more than the limit of 32/],
      ['an empty tag', 'nobody', 'x', { tags: [''] }, /tag "" must be 1 to 200 bytes/],
      ['a tag with a control character', 'nobody', 'x', { tags: ['a\nb'] }, /control character/],
      ['a uniq key too long', 'nobody', 'x', { uniq: 'u'.repeat(201) }, /uniq "u+" must be 1 to 200 bytes/],
      ['bad function name', 'bad name!', 'x', {}, /invalid function name "bad name!"/],
      ['empty function name', '', 'x', {}, /invalid function name ""/],
      ['function name too long', 'f'.repeat(101), 'x', {}, /invalid function name/],
      ['`at` in the past', 'nobody', 'x', { at: new Date(Date.now() - 60000) }, /scheduled time [0-9]+ is in the past.*option at/],
      ['`at` more than 10 years ahead', 'nobody', 'x', { at: new Date(Date.now() + 11 * 365 * 24 * 3600 * 1000) }, /more than 10 years ahead/],
      ['`at` and delayMs', 'nobody', 'x', { at: new Date(Date.now() + 60000), delayMs: 1000 }, /delayMs or at/],
      ['`at` not a Date', 'nobody', 'x', { at: Date.now() + 60000 }, /at must be a valid Date/],
      ['attempts 0', 'nobody', 'x', { attempts: 0 }, /attempts 0 is out of range 1\.\.=1000/],
      ['attempts 1001', 'nobody', 'x', { attempts: 1001 }, /attempts 1001 is out of range/],
      ['timeoutMs 0', 'nobody', 'x', { timeoutMs: 0 }, /timeoutMs 0 is out of range 1ms\.\.=10 years/],
      ['retentionMs under a second', 'nobody', 'x', { retentionMs: 999 }, /retentionMs 999 is out of range 1s/],
      ['delayMs over 10 years', 'nobody', 'x', { delayMs: 11 * 365 * 24 * 3600 * 1000 }, /delayMs [0-9]+ is out of range/],
      ['delayMs negative', 'nobody', 'x', { delayMs: -1 }, /delayMs -1 is out of range/],
      ['an unknown option', 'nobody', 'x', { prio: 3 }, /unknown option "prio"/],
      ['input among the options', 'nobody', 'x', { input: 'y' }, /unknown option "input"/],
      ['a malformed dependency', 'nobody', 'x', { after: ['nope'] }, /dependency \(option after\) "nope"/],
      ['too many dependencies', 'nobody', 'x', { after: Array.from({ length: 10001 }, (_, i) => `echo:${i + 1}`) }, /10001 dependencies are more than the limit of 10000/],
      ['a missing dependency in the same function', 'nobody', 'x', { after: ['nobody:7'] }, /dependency nobody:7 does not exist/],
      ['a missing dependency in another function', 'nobody', 'x', { after: ['echo:99999999'] }, /dependency echo:99999999 does not exist/],
      ['an input that is not bytes', 'nobody', { a: 1 }, {}, /give a Buffer or a string/],
      ['expiresInMs and expiresAt', 'nobody', 'x', { expiresInMs: 5, expiresAt: Date.now() + 60000 }, /give expiresInMs or expiresAt, not both/],
      ['expiresInMs 0', 'nobody', 'x', { expiresInMs: 0 }, /expiresInMs 0 is out of range 1ms\.\.=10 years/],
      ['expiresInMs over 10 years', 'nobody', 'x', { expiresInMs: 11 * 365 * 24 * 3600 * 1000 }, /expiresInMs [0-9]+ is out of range/],
      ['expiresAt not a time', 'nobody', 'x', { expiresAt: 'soon' }, /expiresAt must be a valid Date or whole ms/],
    ];
    for (const [name, fn, input, options, message] of cases) {
      it(name, async () => {
        const names = (await admin.smembers(FUNCTIONS_KEY)).sort();
        const echoSeq = await admin.get('wg:{echo}:seq');
        const keysBefore = new Set(await admin.keys('*'));
        await assert.rejects(client.enqueue(fn, input, options), (error) => {
          assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
          assert.ok(error instanceof WasmgearError);
          // What the queue's state refuses (a time its clock has passed, a dependency that is
          // gone) is a ConflictError, the BadInputError the HTTP API answers with 409.
          assert.equal(error instanceof ConflictError, /in the past|does not exist|years ahead/.test(error.message), name);
          assert.equal(error.exitCode, 2);
          assert.match(error.message, message);
          return true;
        });
        assert.deepEqual(await admin.keys('wg:{nobody}:*'), []);
        assert.deepEqual((await admin.smembers(FUNCTIONS_KEY)).sort(), names);
        assert.equal(await admin.get('wg:{echo}:seq'), echoSeq);
        // No key appeared but what the suite's worker writes meanwhile for echo's earlier
        // jobs, its own entries and the idle marks of the functions it serves (it runs beside
        // these calls, and goes idle on `fail` or `count` whenever their queues are empty).
        const served = ['echo', 'count', 'fail'];
        const appeared = (await admin.keys('*'))
          .filter((key) => !keysBefore.has(key))
          .filter((key) => !key.startsWith('wg:{echo}:') && !key.includes('worker'))
          .filter((key) => !served.some((f) => key === `wg:{${f}}:idle` || key === `wg:{${f}}:idle-args`));
        assert.deepEqual(appeared, []);
      });
    }

    it('a bulk with one bad job among good ones', async () => {
      const items = Array.from({ length: 50 }, (_, i) => ({ input: `ok-${i}` }));
      items[37] = { input: 'bad', priority: -5000 };
      await assert.rejects(client.enqueueMany('nobody', items), (error) => {
        assert.ok(error instanceof BadInputError);
        assert.match(error.message, /job 38 of the batch: .*priority -5000/);
        return true;
      });
      const late = Array.from({ length: 5 }, (_, i) => ({ input: `ok-${i}` }));
      late[3] = { input: 'late', at: new Date(Date.now() - 1000) };
      await assert.rejects(client.enqueueMany('nobody', late), BadInputError);
      assert.deepEqual(await admin.keys('wg:{nobody}:*'), []);
      assert.equal(await admin.sismember(FUNCTIONS_KEY, 'nobody'), 0);
    });

    it('an input over the client limit', async () => {
      const small = await Client.connect(redis.url, { maxInputBytes: 10 });
      try {
        await assert.rejects(small.enqueue('nobody', 'eleven byte'), /11 bytes are larger than the limit of 10 bytes/);
        assert.deepEqual(await admin.keys('wg:{nobody}:*'), []);
        assert.equal((await small.enqueue('nobody-limit', 'ten bytes!')).created, true);
      } finally {
        await small.close();
      }
    });

    it('bad ids and URLs', async () => {
      for (const id of ['echo', 'echo:0', 'echo:x', ':5', 'bad name:3', 5]) {
        await assert.rejects(client.status(id), BadInputError, String(id));
      }
      await assert.rejects(Client.connect('http://127.0.0.1:6379'), BadInputError);
      await assert.rejects(Client.connect('not a url'), BadInputError);
      await assert.rejects(client.wait('echo:1', { timeoutMs: -1 }), BadInputError);
    });
  });

  it('cancels a running job', async () => {
    const { id } = await client.enqueue('count', '100 50');
    let sawProgress;
    const progressed = new Promise((resolve) => {
      sawProgress = resolve;
    });
    const waiting = client.wait(id, { timeoutMs: 60000, onProgress: (p) => sawProgress(p) });
    // (Checked below: the job's end may come before `cancel` itself returns.)
    waiting.catch(() => {});
    const first = await progressed;
    assert.ok(first.done >= 1 && first.done < 100);
    assert.equal((await client.status(id)).state, 'running');
    const outcome = await client.cancel(id);
    // The outcomes are the CLI's (`wasmgear cancel`): cancelled, stopping, already-ended.
    assert.deepEqual(outcome, { outcome: 'stopping', state: 'running' });
    await assert.rejects(waiting, (error) => {
      assert.ok(error instanceof JobCancelledError, `${error.name}: ${error.message}`);
      assert.equal(error.exitCode, 3);
      assert.equal(error.job.id, id);
      assert.equal(error.job.state, 'cancelled');
      return true;
    });
    const job = await client.status(id);
    assert.equal(job.state, 'cancelled');
    assert.ok(job.cancelRequestedAt instanceof Date);
    assert.ok(job.progress.done < 100, 'it stopped before the end');
    assert.deepEqual(await client.cancel(id), { outcome: 'already-ended', state: 'cancelled' });
    // The CLI says the same of the same job.
    const result = await cli(['cancel', '--redis', redis.url, '--json', id]);
    assert.deepEqual(JSON.parse(result.stdout), { id, outcome: 'already-ended', state: 'cancelled' });
  });

  it('cancels a queued job at once', async () => {
    const { id } = await client.enqueue('nobody-serves', 'x', { delayMs: 3600000 });
    assert.equal((await client.status(id)).state, 'scheduled');
    assert.deepEqual(await client.cancel(id), { outcome: 'cancelled', state: 'cancelled' });
    assert.equal((await client.status(id)).state, 'cancelled');
  });

  it('writes the same records as the CLI', async () => {
    const strip = (record) => {
      const copy = { ...record };
      for (const field of ['created_ms', 'run_at_ms', 'not_before_ms', 'ready_ms', 'started_ms', 'finished_ms']) {
        delete copy[field];
      }
      return copy;
    };
    const get = async (id) => {
      const [fn, n] = id.split(':');
      const keys = ['jobs', 'output', 'stats', 'events'].map((k) => `wg:{${fn}}:${k}`);
      const [raw] = await admin.call('FCALL_RO', 'wg2_get', '4', ...keys, fn, n);
      return { record: strip(JSON.parse(raw)), input: await admin.hget(`wg:{${fn}}:input`, n) };
    };
    const variants = [
      [{}, []],
      [
        { priority: 5, tags: ['nightly', 'team-a'], uniq: 'u-1', attempts: 2, timeoutMs: 30000, retentionMs: 3600000, failedRetentionMs: 7200000, delayMs: 60000 },
        ['--priority', '5', '--tag', 'nightly', '--tag', 'team-a', '--uniq', 'u-1', '--attempts', '2', '--timeout', '30s', '--retention', '1h', '--failed-retention', '2h', '--delay', '60s'],
      ],
      [{ priority: 'high', at: new Date(Date.now() + 3600000) }, ['--priority', 'high', '--at', String(Math.floor(Date.now() / 1000) + 3600)]],
      [{ priority: 'low', after: ['twin-dep:1'] }, ['--priority', 'low', '--after', 'twin-dep:1']],
    ];
    // A dependency in another function that never runs (nobody serves twin-dep).
    assert.equal((await client.enqueue('twin-dep', 'first')).id, 'twin-dep:1');
    for (const [i, [options, flags]] of variants.entries()) {
      const mine = await client.enqueue('twin-node', `input ${i}`, options);
      const result = await cli(['enqueue', '--redis', redis.url, 'twin-cli', `input ${i}`, ...flags]);
      assert.equal(result.code, 0, result.stderr);
      const theirs = result.stdout.trim();
      assert.equal(theirs.split(':')[1], mine.id.split(':')[1]);
      const a = await get(mine.id);
      const b = await get(theirs);
      assert.deepEqual(a, b, `variant ${i}`);
      assert.equal(a.input, `input ${i}`);
    }
    assert.ok((await admin.smembers(FUNCTIONS_KEY)).includes('twin-node'));
    const dep = await client.status('twin-dep:1');
    assert.deepEqual(dep.dependents.sort(), ['twin-cli:4', 'twin-node:4']);
  });

  it('links dependencies across functions', async () => {
    const first = await client.enqueue('echo', 'first');
    const second = await client.enqueue('count', '1 1', { after: [first.id] });
    const [a, b] = await client.wait([first.id, second.id], { timeoutMs: 60000 });
    assert.equal(a.state, 'succeeded');
    assert.equal(b.state, 'succeeded');
    assert.deepEqual(b.after, [first.id]);
    assert.ok(b.startedAt >= a.finishedAt);

    // A dependency that is cancelled (here by this client, which tells the dependents in
    // other functions) cancels its dependent.
    const held = await client.enqueue('nobody-serves', 'held');
    const dependent = await client.enqueue('echo', 'never', { after: [held.id] });
    assert.equal((await client.status(dependent.id)).state, 'waiting');
    assert.deepEqual((await client.status(held.id)).dependents, [dependent.id]);
    assert.deepEqual(await client.cancel(held.id), { outcome: 'cancelled', state: 'cancelled' });
    await assert.rejects(client.wait(dependent.id, { timeoutMs: 60000 }), (error) => {
      assert.ok(error instanceof JobCancelledError, error.message);
      assert.equal(error.job.error.class, 'dependency');
      assert.match(error.job.error.message, new RegExp(held.id));
      return true;
    });
    // A dependency that has already failed is refused, writing nothing.
    const failing = await client.enqueue('fail', 'boom', { attempts: 1 });
    await assert.rejects(client.wait(failing.id, { timeoutMs: 60000 }), JobFailedError);
    const seq = await admin.get('wg:{echo}:seq');
    await assert.rejects(client.enqueue('echo', 'x', { after: [failing.id] }), (error) => {
      assert.ok(error instanceof BadInputError);
      assert.match(error.message, /dependency fail:[0-9]+ has already failed/);
      return true;
    });
    assert.equal(await admin.get('wg:{echo}:seq'), seq);
  });

  it('fails, retries and reports a failed job', async () => {
    const { id } = await client.enqueue('fail', 'please fail', { attempts: 1 });
    await assert.rejects(client.wait(id, { timeoutMs: 60000 }), (error) => {
      assert.ok(error instanceof JobFailedError, error.message);
      assert.equal(error.exitCode, 1);
      assert.equal(error.job.state, 'failed');
      assert.ok(error.job.error && error.job.error.class.length > 0);
      assert.match(error.message, new RegExp(`job ${id} failed: ${error.job.error.class}`));
      return true;
    });
    assert.equal(await client.retry(id), true);
    await assert.rejects(client.wait(id, { timeoutMs: 60000 }), JobFailedError);
    const job = await client.status(id);
    assert.equal(job.history.length, 2);
    assert.equal(await client.retry('echo:1'), false, 'a succeeded job is not retried');
    // Waiting on several: a failure outranks the others.
    const ok = await client.enqueue('echo', 'fine');
    await assert.rejects(client.wait([ok.id, id], { timeoutMs: 60000 }), (error) => {
      assert.ok(error instanceof JobFailedError);
      assert.equal(error.results[0].state, 'succeeded');
      assert.equal(error.results[1].state, 'failed');
      return true;
    });
  });

  it('ends a job not started by its deadline expired; retry runs it without the deadline', async () => {
    // Expiry is applied by a lease of the function: paused, echo leases nothing, so the
    // job is still queued past its deadline, and the first lease after resume ends it.
    await client.configure('echo', { paused: true });
    let id;
    try {
      ({ id } = await client.enqueue('echo', 'too late', { expiresInMs: 1 }));
      // Still queued, or already ended by a lease call of the paused function; never started.
      assert.ok(['queued', 'expired'].includes((await client.status(id)).state));
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      await client.configure('echo', { paused: false });
    }
    await assert.rejects(client.wait(id, { timeoutMs: 60000 }), (error) => {
      assert.ok(error instanceof JobFailedError, error.message);
      assert.equal(error.exitCode, 1);
      assert.equal(error.job.state, 'expired');
      assert.equal(error.job.final, true);
      assert.equal(error.job.error.class, 'expired');
      assert.match(error.message, new RegExp(`job ${id} expired before it started: expired`));
      return true;
    });
    // An expired dependency: the job could never run.
    await assert.rejects(client.enqueue('echo', 'after it', { after: [id] }), (error) => {
      assert.ok(error instanceof ConflictError, error.message);
      assert.match(error.message, /has already expired/);
      return true;
    });
    assert.equal(await client.retry(id), true);
    const again = await client.wait(id, { timeoutMs: 60000 });
    assert.equal(again.state, 'succeeded');
    assert.equal(again.output.toString(), 'too late');
    // A deadline ahead (a Date or ms) does not stop a job; one Redis' clock has passed is refused.
    const inTime = await client.enqueue('echo', 'in time', { expiresAt: new Date(Date.now() + 3600000) });
    assert.equal((await client.wait(inTime.id, { timeoutMs: 60000 })).output.toString(), 'in time');
    const seq = await admin.get('wg:{echo}:seq');
    await assert.rejects(client.enqueue('echo', 'x', { expiresAt: Date.now() - 60000 }), (error) => {
      assert.ok(error instanceof ConflictError, error.message);
      assert.match(error.message, /expires_at/);
      return true;
    });
    assert.equal(await admin.get('wg:{echo}:seq'), seq);
  });

  it('joins an unfinished job with the same uniq key', async () => {
    const a = await client.enqueue('nobody-serves', 'a', { uniq: 'only-one' });
    const b = await client.enqueue('nobody-serves', 'b', { uniq: 'only-one' });
    assert.equal(a.created, true);
    assert.equal(b.created, false);
    assert.equal(b.id, a.id);
  });

  it('gives up waiting after the timeout', async () => {
    const { id } = await client.enqueue('nobody-serves', 'never runs');
    const started = Date.now();
    await assert.rejects(client.wait(id, { timeoutMs: 300 }), (error) => {
      assert.ok(error instanceof WaitTimeoutError, error.message);
      assert.equal(error.exitCode, 4);
      assert.equal(error.id, id);
      return true;
    });
    assert.ok(Date.now() - started < 5000);
    assert.equal((await client.status(id)).state, 'queued');
  });

  it('streams events of one function and of all', async () => {
    const one = client.events('echo');
    const all = client.events();
    assert.equal(await one.ready, true);
    assert.equal(await all.ready, true);
    const { id } = await client.enqueue('echo', 'events');
    const collect = async (stream) => {
      const kinds = [];
      for await (const event of stream) {
        if (event.id !== id) continue;
        assert.equal(event.function, 'echo');
        kinds.push(event.event);
        if (event.event === 'finish') {
          assert.equal(event.state, 'succeeded');
          break;
        }
      }
      return kinds;
    };
    const [kinds, kindsAll] = await Promise.all([collect(one), collect(all)]);
    assert.deepEqual(kinds, ['create', 'start', 'finish']);
    assert.deepEqual(kindsAll, ['create', 'start', 'finish']);
  });

  it('lists the queues as `wasmgear queues` does', async () => {
    const queues = await client.queues();
    const names = queues.map((q) => q.function);
    assert.deepEqual(names, [...names].sort());
    const result = await cli(['queues', '--redis', redis.url, '--json']);
    assert.equal(result.code, 0, result.stderr);
    const theirs = JSON.parse(result.stdout);
    // Nothing runs now: both views agree.
    assert.deepEqual(queues, theirs);
    const echo = queues.find((q) => q.function === 'echo');
    assert.ok(echo.succeeded >= 10000);
    assert.ok(echo.workers >= 1);
    const count = queues.find((q) => q.function === 'count');
    assert.ok(count.cancelled >= 1);
  });

  it('sends an enqueue whose reply is late again with the same call id: one job', async () => {
    // A server of its own, so that only this client's calls are counted.
    const own = await startRedis();
    const owner = new Redis(own.url);
    let impatient;
    try {
      impatient = await Client.connect(own.url, { commandTimeoutMs: 100 });
      await owner.config('RESETSTAT');
      // Redis holds every command for 400 ms: the first sends time out, and all of them
      // are carried out once the pause ends.
      await owner.client('PAUSE', '400', 'ALL');
      const { id, created } = await impatient.enqueue('resent', 'once');
      assert.equal(created, true);
      assert.equal(id, 'resent:1');
      const sends = Number(/cmdstat_fcall:calls=([0-9]+)/.exec(await owner.info('commandstats'))[1]);
      assert.ok(sends >= 2, `the call was sent ${sends} times`);
      assert.equal(Number(await owner.get('wg:{resent}:seq')), 1, 'enqueued once');
      assert.equal(await owner.hlen('wg:{resent}:jobs'), 1);
    } finally {
      owner.disconnect();
      if (impatient) await impatient.close();
      await own.stop();
    }
  });

  it('loads the library again when the server lost it', async () => {
    await admin.function('FLUSH');
    const { id } = await client.enqueue('echo', 'after a flush');
    assert.equal((await client.wait(id, { timeoutMs: 60000 })).output.toString(), 'after a flush');
    assert.equal(
      await admin.call('FCALL', 'wg2_version', '0'),
      require('../protocol/manifest.json').version,
    );
  });

  it('a wait outlasts the loss of its subscription', async () => {
    const { id } = await client.enqueue('count', '60 50');
    const reports = [];
    let sawProgress;
    const progressed = new Promise((resolve) => {
      sawProgress = resolve;
    });
    const waiting = client.wait(id, {
      timeoutMs: 60000,
      onProgress: (p) => {
        reports.push(p);
        sawProgress();
      },
    });
    await progressed;
    const numsub = async () => Number((await admin.pubsub('NUMSUB', 'wg:{count}:events'))[1]);
    assert.equal(await numsub(), 1);
    // Drops every pub/sub connection, the client's (and the worker's, which reconnects).
    const killed = await admin.client('KILL', 'TYPE', 'pubsub');
    assert.ok(killed >= 1);
    // The client subscribes again by itself while the job still runs.
    await until('the channel to be subscribed again', async () => (await numsub()) === 1, { timeoutMs: 10000 });
    assert.equal((await client.status(id)).state, 'running');
    const heard = reports.length;
    const job = await waiting;
    assert.ok(reports.length > heard, 'progress was heard after the loss');
    assert.equal(job.state, 'succeeded');
    assert.equal(job.output.toString(), 'counted to 60');
    for (let i = 1; i < reports.length; i += 1) assert.ok(reports[i].seq > reports[i - 1].seq);
    assert.equal(reports.at(-1).done, 60);
  });

  it('says NotFoundError for an unknown id', async () => {
    for (const call of [
      () => client.status('echo:99999999'),
      () => client.logs('echo:99999999'),
      () => client.cancel('echo:99999999'),
      () => client.retry('echo:99999999'),
      () => client.wait('echo:99999999', { timeoutMs: 1000 }),
    ]) {
      await assert.rejects(call(), (error) => {
        assert.ok(error instanceof NotFoundError, `${error.name}: ${error.message}`);
        assert.equal(error.exitCode, 5);
        assert.match(error.message, /echo:99999999/);
        return true;
      });
    }
  });

  it('says UnreachableError for a closed port', async () => {
    const port = await freePort();
    await assert.rejects(Client.connect(`redis://127.0.0.1:${port}`), (error) => {
      assert.ok(error instanceof UnreachableError, `${error.name}: ${error.message}`);
      assert.equal(error.exitCode, 6);
      assert.match(error.message, new RegExp(`127\\.0\\.0\\.1:${port}.*connection refused`));
      return true;
    });
  });
});
