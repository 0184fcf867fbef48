'use strict';

// Flows and failure policies against a real redis-server and a real `wasmgear worker`
// serving the example plugins reverse, join and fail: a diamond whose `join` reads its
// dependencies' outputs, bad graphs refused with nothing written, a fan-in across functions
// written with nothing to link and functions waiting on each other, a flow cancelled, waited
// on and retried, and the `ignore` and `continue` policies (in a flow and on plain enqueue).

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, BadInputError, ConflictError, NotFoundError, WaitTimeoutError } = require('..');
const { startRedis, startWorker } = require('../test-support/harness');

const WAIT_MS = 120000;

/** tests/all/flows.rs `diamond_document()`: the document every producer submits alike. */
const DIAMOND = {
  name: 'diamond',
  jobs: {
    a: { function: 'reverse', input: 'aa0' },
    b: { function: 'reverse', input: 'bb1', after: ['a'] },
    c: { function: 'reverse', input_json: { n: 2 }, after: ['a'] },
    d: { function: 'join', after: ['c', { job: 'b', on_failure: 'ignore' }] },
  },
};

/** The flow's job `name`, as its status lists it. */
const jobOf = (status, name) => {
  const job = status.jobs.find((j) => j.name === name);
  assert.ok(job, `the flow has no job ${name}: ${JSON.stringify(status)}`);
  return job;
};

/**
 * Runs `body()` and records the library functions this process calls meanwhile through
 * ioredis' `call` (the path of the client's `FCALL`s; Redis answers them as ever): resolves
 * `{value, calls}`, each call `{name, fn, args}` (`enqueue`, its function, the arguments
 * after the function's name).
 */
async function fcallsDuring(body) {
  const calls = [];
  const own = Object.getOwnPropertyDescriptor(Redis.prototype, 'call');
  const inherited = Redis.prototype.call;
  Redis.prototype.call = function call(command, ...argv) {
    if (String(command).toUpperCase() === 'FCALL') {
      const [name, numkeys, ...rest] = argv.map(String);
      const [fn, ...args] = rest.slice(Number(numkeys));
      calls.push({ name: name.replace(/^wg2_/, ''), fn, args });
    }
    return inherited.call(this, command, ...argv);
  };
  try {
    return { value: await body(), calls };
  } finally {
    if (own) Object.defineProperty(Redis.prototype, 'call', own);
    else delete Redis.prototype.call;
  }
}

/** The calls of library function `name` among `calls` (fcallsDuring's). */
const callsOf = (calls, name) => calls.filter((call) => call.name === name);

describe('flows', { timeout: 600000 }, () => {
  let redis;
  let worker;
  let client;

  before(async () => {
    redis = await startRedis();
    worker = await startWorker(redis.url, ['reverse', 'join', 'fail'], 8);
    client = await Client.connect(redis.url);
  });

  after(async () => {
    if (client) await client.close();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
  });

  /** The output of job `id`, as text. */
  const output = async (id) => (await client.status(id)).output?.toString() ?? null;

  it('the diamond document: each job after its dependencies, join reads c then b', async () => {
    const submitted = await client.submitFlow(DIAMOND);
    assert.ok(Number.isSafeInteger(submitted.id) && submitted.id > 0, JSON.stringify(submitted));
    assert.deepEqual(Object.keys(submitted.jobs).sort(), ['a', 'b', 'c', 'd']);
    assert.match(submitted.jobs.a, /^reverse:[0-9]+$/);
    assert.match(submitted.jobs.d, /^join:[0-9]+$/);

    const status = await client.waitFlow(submitted.id, { timeoutMs: WAIT_MS });
    assert.equal(status.id, submitted.id);
    assert.equal(status.name, 'diamond');
    assert.ok(status.createdAt instanceof Date && status.createdAt.getTime() > 0);
    assert.equal(status.ended, true);
    assert.deepEqual(status.counts, { succeeded: 4 }, JSON.stringify(status));
    assert.deepEqual(status.sinks, ['d']);
    assert.deepEqual(status.jobs.map((j) => j.name), ['a', 'b', 'c', 'd'], 'dependencies first');
    assert.deepEqual(status.jobs.map((j) => j.id), ['a', 'b', 'c', 'd'].map((n) => submitted.jobs[n]));
    assert.deepEqual(jobOf(status, 'd').after, [
      { job: 'c', onFailure: 'cancel' },
      { job: 'b', onFailure: 'ignore' },
    ]);
    assert.deepEqual(jobOf(status, 'a').after, []);

    // c's input is input_json's compact text, reversed; then b's output.
    assert.equal(await output(submitted.jobs.c), '}2:"n"{');
    assert.equal(await output(submitted.jobs.d), '}2:"n"{\n1bb');
    assert.equal(jobOf(status, 'd').outputBytes, Buffer.byteLength('}2:"n"{\n1bb'));
    assert.equal(jobOf(status, 'd').error, null);

    // Each job started after its dependencies ended, and its record names the flow.
    const records = {};
    for (const name of ['a', 'b', 'c', 'd']) records[name] = (await client.status(submitted.jobs[name])).record;
    for (const [first, then] of [['a', 'b'], ['a', 'c'], ['b', 'd'], ['c', 'd']]) {
      assert.ok(records[first].finished_ms <= records[then].started_ms, `${first} ended before ${then} started`);
    }
    for (const record of Object.values(records)) assert.equal(record.flow, submitted.id);
    assert.deepEqual(records.d.on_failure, { [submitted.jobs.b]: 'ignore' });

    // Nothing left to cancel or retry.
    assert.equal(await client.cancelFlow(submitted.id), 0);
    assert.deepEqual(await client.retryFlow(submitted.id), []);
  });

  it('a bad graph is refused whole, with the Rust sentence, and nothing is written', async () => {
    // A server of its own, no worker: DBSIZE counts what the refused flows wrote.
    const empty = await startRedis();
    const own = await Client.connect(empty.url);
    const admin = new Redis(empty.url);
    try {
      const cases = [
        [
          { name: 'cycle', jobs: {
            a: { function: 'reverse', after: ['c'] },
            b: { function: 'join', after: ['a'] },
            c: { function: 'reverse', after: ['b'] },
          } },
          'invalid job option: the flow has a cycle: a → c → b → a (each waits on the next)',
        ],
        [
          { name: 'unknown', jobs: { a: { function: 'reverse' }, b: { function: 'join', after: ['nope'] } } },
          'invalid job option: job "b" waits on "nope", which the flow does not have',
        ],
        [
          { name: 'uniq', jobs: { a: { function: 'reverse' }, u: { function: 'reverse', uniq: 'k' } } },
          'invalid job option: job "u": a flow\'s jobs are always new, so they take no uniq',
        ],
        [
          { name: 'self', jobs: { a: { function: 'reverse', after: ['a'] } } },
          'invalid job option: job "a" waits on itself',
        ],
        [{ name: 'empty', jobs: {} }, 'invalid job option: flow "empty" has no jobs'],
      ];
      for (const [document, expected] of cases) {
        await assert.rejects(own.submitFlow(document), (error) => {
          assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
          assert.equal(error.exitCode, 2);
          assert.equal(error.message, expected);
          return true;
        });
      }
      // An input over the client's limit, in the last job written, is refused first too.
      const small = await Client.connect(empty.url, { maxInputBytes: 4 });
      try {
        await assert.rejects(
          small.submitFlow({ name: 'big', jobs: { a: { function: 'reverse', input: 'abc' }, z: { function: 'join', input: 'abcde', after: ['a'] } } }),
          { message: 'invalid job option: job "z": input of 5 bytes is larger than the limit of 4 bytes' },
        );
      } finally {
        await small.close();
      }
      assert.equal(await admin.dbsize(), 0, `a refused flow wrote nothing: ${await admin.keys('*')}`);
      await assert.rejects(own.flow(999), (error) => {
        assert.ok(error instanceof NotFoundError, `${error.name}: ${error.message}`);
        assert.equal(error.exitCode, 5);
        assert.equal(error.flow, 999);
        assert.match(error.message, /^no flow 999: /);
        return true;
      });
      await assert.rejects(own.cancelFlow('999'), NotFoundError);
      await assert.rejects(own.flow('nope'), BadInputError);
    } finally {
      admin.disconnect();
      await own.close();
      await empty.stop();
    }
  });

  it('a fan-in across functions: the dependencies name their dependent as they are written, nothing is linked', async () => {
    const sources = ['s1', 's2', 's3', 's4', 's5'];
    const document = {
      name: 'fan-in',
      jobs: {
        ...Object.fromEntries(sources.map((name, k) => [name, { function: 'reverse', input: `${k}x` }])),
        all: { function: 'join', after: sources },
      },
    };
    // Paused, reverse leases nothing: its jobs are read as the submit left them.
    await client.configure('reverse', { paused: true });
    let submitted;
    try {
      const { value, calls } = await fcallsDuring(() => client.submitFlow(document));
      submitted = value;
      // The dependent's function first, then its dependencies', each in one call.
      assert.deepEqual(callsOf(calls, 'enqueue').map((call) => call.fn), ['join', 'reverse']);
      assert.deepEqual(callsOf(calls, 'link'), [], 'the fan-in needs no link');
      for (const name of sources) {
        const job = await client.status(submitted.jobs[name]);
        assert.equal(job.state, 'queued', name);
        assert.deepEqual(job.dependents, [submitted.jobs.all], `${name} names its dependent`);
      }
      const all = await client.status(submitted.jobs.all);
      assert.equal(all.state, 'waiting');
      assert.deepEqual([...all.waitingOn].sort(), sources.map((name) => submitted.jobs[name]).sort());
    } finally {
      await client.configure('reverse', { paused: false });
    }
    const status = await client.waitFlow(submitted.id, { timeoutMs: WAIT_MS });
    assert.deepEqual(status.counts, { succeeded: 6 }, JSON.stringify(status));
    assert.equal(await output(submitted.jobs.all), sources.map((_, k) => `x${k}`).join('\n'));

    // A plain enqueue's dependencies in another function are linked in one call too: both
    // have ended, and the reply's two states are told to the dependent.
    const { value: plain, calls } = await fcallsDuring(() =>
      client.enqueue('join', '', { after: [submitted.jobs.s1, submitted.jobs.s2] }),
    );
    assert.deepEqual(callsOf(calls, 'link').map((call) => [call.fn, call.args.length]), [['reverse', 4]]);
    assert.equal((await client.wait(plain.id, { timeoutMs: WAIT_MS })).output.toString(), 'x0\nx1');
  });

  it('functions waiting on each other: one written first, the edge its order cannot serve linked last', async () => {
    // join's j1 waits on reverse's r1, reverse's r2 on j1: join goes first (by bytes), so r1
    // and r2 name their dependents j1 and j2, and j1 → r2 is the one edge left to link.
    const document = {
      name: 'ping-pong',
      jobs: {
        r1: { function: 'reverse', input: 'ab' },
        j1: { function: 'join', after: ['r1'] },
        r2: { function: 'reverse', input: 'cd', after: ['j1'] },
        j2: { function: 'join', after: ['r2', 'j1'] },
      },
    };
    const { value: submitted, calls } = await fcallsDuring(() => client.submitFlow(document));
    assert.deepEqual(callsOf(calls, 'enqueue').map((call) => call.fn), ['join', 'reverse']);
    const [, j1] = submitted.jobs.j1.split(':');
    assert.deepEqual(callsOf(calls, 'link'), [{ name: 'link', fn: 'join', args: [j1, submitted.jobs.r2] }]);

    const status = await client.waitFlow(submitted.id, { timeoutMs: WAIT_MS });
    assert.deepEqual(status.counts, { succeeded: 4 }, JSON.stringify(status));
    assert.equal(await output(submitted.jobs.j1), 'ba');
    assert.equal(await output(submitted.jobs.j2), 'dc\nba');
    const records = {};
    for (const name of ['r1', 'j1', 'r2', 'j2']) records[name] = (await client.status(submitted.jobs[name])).record;
    for (const [first, then] of [['r1', 'j1'], ['j1', 'r2'], ['r2', 'j2']]) {
      assert.ok(records[first].finished_ms <= records[then].started_ms, `${first} ended before ${then} started`);
    }
    // r1 named its dependent at its write. j1 → r2 was linked last (the call is checked
    // above): j1's record names r2 only if j1 had not ended when the link came, as the
    // worker may run r1 and j1 in between; the link then tells r2 at once. Either way r2
    // ran after j1, as checked above.
    assert.deepEqual(records.r1.dependents, [submitted.jobs.j1]);
  });

  it('cancels a flow whose root is delayed: every unfinished job, once', async () => {
    const submitted = await client.submitFlow({
      name: 'to-cancel',
      jobs: {
        later: { function: 'reverse', input: 'x', delay_ms: 3600000 },
        next: { function: 'join', after: ['later'] },
        last: { function: 'reverse', input: 'y', after: ['next'] },
      },
    });
    let status = await client.flow(submitted.id);
    assert.deepEqual(status.counts, { waiting: 2, scheduled: 1 }, JSON.stringify(status));
    assert.deepEqual(status.jobs.map((j) => j.name), ['later', 'next', 'last']);
    assert.deepEqual(status.sinks, ['last']);
    assert.equal(status.ended, false);

    await assert.rejects(client.waitFlow(submitted.id, { timeoutMs: 200 }), (error) => {
      assert.ok(error instanceof WaitTimeoutError, `${error.name}: ${error.message}`);
      assert.equal(error.flow, submitted.id);
      assert.equal(error.id, submitted.jobs.later);
      assert.equal(error.message, `gave up waiting for flow ${submitted.id} after the timeout; its jobs go on`);
      return true;
    });

    assert.equal(await client.cancelFlow(submitted.id), 3);
    status = await client.flow(String(submitted.id));
    assert.deepEqual(status.counts, { cancelled: 3 });
    assert.equal(status.ended, true);
    assert.equal(await client.cancelFlow(submitted.id), 0);
    // Ended already: the wait answers at once.
    assert.deepEqual((await client.waitFlow(submitted.id, { timeoutMs: 1000 })).counts, { cancelled: 3 });
  });

  it('the ignore policy: join runs and reads the failed job\'s error; cancel and continue as Rust', async () => {
    const submitted = await client.submitFlow({
      name: 'policies',
      jobs: {
        ok: { function: 'reverse', input: 'ko' },
        bad: { function: 'fail', input: 'one', attempts: 1 },
        bad2: { function: 'fail', input: 'two', attempts: 1 },
        cancelled: { function: 'join', after: ['ok', 'bad'] },
        ignored: { function: 'join', after: ['ok', { job: 'bad', on_failure: 'ignore' }] },
        ignored_but_cancelled: { function: 'join', after: [{ job: 'bad', on_failure: 'ignore' }, 'bad2'] },
        continued: { function: 'join', after: [{ job: 'bad', on_failure: 'continue' }, { job: 'bad2' }, 'ok'] },
      },
    });
    const status = await client.waitFlow(submitted.id, { timeoutMs: WAIT_MS });
    const states = Object.fromEntries(status.jobs.map((j) => [j.name, j.state]));
    assert.deepEqual(states, {
      ok: 'succeeded',
      bad: 'failed',
      bad2: 'failed',
      cancelled: 'cancelled',
      ignored: 'succeeded',
      ignored_but_cancelled: 'cancelled',
      continued: 'succeeded',
    });
    assert.deepEqual(status.counts, { succeeded: 3, failed: 2, cancelled: 2 });
    assert.match(jobOf(status, 'bad').error, /failed on purpose: one/);
    assert.match(jobOf(status, 'cancelled').error, /bad|fail:/);

    const [first, second, ...rest] = (await output(submitted.jobs.ignored)).split('\n');
    assert.deepEqual(rest, []);
    assert.equal(first, 'ok');
    assert.ok(second.startsWith('error: '), second);
    assert.ok(second.includes(submitted.jobs.bad) && second.includes('failed on purpose: one'), second);

    const lines = (await output(submitted.jobs.continued)).split('\n');
    assert.equal(lines.length, 3, lines.join('\n'));
    assert.ok(lines[0].startsWith('error: ') && lines[0].includes('failed on purpose: one'), lines[0]);
    assert.ok(lines[1].startsWith('error: ') && lines[1].includes('failed on purpose: two'), lines[1]);
    assert.equal(lines[2], 'ok');

    // Retried in the record's order: the failed jobs fail again, the dependents cancelled
    // because of them wait for them again and are cancelled again; `ok` is not run again.
    const retried = await client.retryFlow(submitted.id);
    assert.deepEqual(
      [...retried].sort(),
      ['bad', 'bad2', 'cancelled', 'ignored_but_cancelled'].map((n) => submitted.jobs[n]).sort(),
    );
    const order = status.jobs.map((j) => j.id);
    assert.deepEqual(retried, order.filter((id) => retried.includes(id)), 'dependencies first');
    const again = await client.waitFlow(submitted.id, { timeoutMs: WAIT_MS });
    assert.equal(jobOf(again, 'cancelled').state, 'cancelled');
    assert.equal(jobOf(again, 'bad').state, 'failed');
    assert.equal((await client.status(submitted.jobs.bad)).history.length, 2);
    assert.equal((await client.status(submitted.jobs.ok)).attempt, 1);
  });

  it('onFailure on plain enqueue: after_ignore beside after, even on a dependency that has failed', async () => {
    const bad = await client.enqueue('fail', 'three', { attempts: 1 });
    const ok = await client.enqueue('reverse', 'cba');
    await assert.rejects(client.wait([bad.id, ok.id], { timeoutMs: WAIT_MS }), { name: 'JobFailedError' });
    // A cancel edge on a failed dependency is refused; an ignore edge is not.
    await assert.rejects(client.enqueue('join', '', { after: [bad.id, ok.id] }), ConflictError);
    const join = await client.enqueue('join', '', { after: [bad.id, ok.id], onFailure: { [bad.id]: 'ignore' } });
    const job = await client.wait(join.id, { timeoutMs: WAIT_MS });
    assert.deepEqual(job.record.on_failure, { [bad.id]: 'ignore' });
    const [first, second] = job.output.toString().split('\n');
    assert.ok(first.startsWith('error: ') && first.includes('failed on purpose: three'), first);
    assert.equal(second, 'abc');

    // continue: the dependent runs once the dependency has ended, however.
    const pending = await client.enqueue('fail', 'four', { attempts: 1, delayMs: 300 });
    const after = await client.enqueue('join', '', { after: [pending.id], onFailure: { [pending.id]: 'continue' } });
    assert.equal((await client.status(after.id)).state, 'waiting');
    const continued = await client.wait(after.id, { timeoutMs: WAIT_MS });
    assert.match(continued.output.toString(), /^error: .*failed on purpose: four/);

    await assert.rejects(
      client.enqueue('join', '', { after: [ok.id], onFailure: { [bad.id]: 'ignore' } }),
      { message: `invalid job option: onFailure names ${bad.id}, which is not a dependency (add it to after)` },
    );
  });
});
