'use strict';

// Encrypted job data (lib/encryption.js): the envelope checked against the pinned vector of
// crates/proto/src/crypto.rs (`crypto_vectors`), and, against a real redis-server and a real
// `wasmgear worker` given the key file, as tests/all/encryption.rs checks the Rust side: the
// client seals the inputs it writes (enqueue, enqueueMany, flows, batches), the worker opens
// them and seals the output, error, log and checkpoint, the client opens what it reads; no plaintext is
// in Redis; a client without the key is refused, writing nothing; a ciphertext moved to
// another job does not open.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const Redis = require('ioredis');

const { Client, BadInputError, JobFailedError } = require('..');
const { KeyRing, MAGIC, TEXT_PREFIX, isSealed, sealedWith, encryptionOf, openLog, saidSealed } = require('../lib/encryption');
const { startRedis, startWorker, cli } = require('../test-support/harness');

const WAIT = { timeoutMs: 60000 };
const FILE =
  '# rotated 2026-11-28\n' +
  'k2 AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n' +
  'k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=  # the first key\n';
const K1 = 'k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n';
/** What a client without keys reads in place of a text key `key` sealed. */
const notice = (key) => `<encrypted (key "${key}"); no key here (give the key file: WASMGEAR_ENCRYPTION_KEY_FILE)>`;

/** The BadInputError `body` throws (or rejects with): its message. */
async function refusal(body) {
  let message = null;
  await assert.rejects(async () => body(), (error) => {
    assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
    message = error.message;
    return true;
  });
  return message;
}

describe('the envelope, as crates/proto/src/crypto.rs writes it', () => {
  it('reproduces the pinned vector (crypto_vectors)', () => {
    const ring = KeyRing.parse('keys', FILE);
    assert.equal(ring.current, 'k2');
    const sealed = ring.sealWithNonce('echo:1', 'input', Buffer.from('hello'), Buffer.alloc(12, 7));
    assert.equal(
      sealed.toString('hex'),
      '007767656e6331026b32070707070707070707070707' + '82a6453f042645a893ed10f0c5e389a1107bf4c2db',
    );
    assert.equal(sealed.length, MAGIC.length + 1 + 2 + 12 + 5 + 16);
    assert.deepEqual(ring.open('echo:1', 'input', sealed), Buffer.from('hello'));
  });

  it('sealed data opens only as its job and field', async () => {
    const ring = KeyRing.parse('keys', FILE);
    const sealed = ring.seal('resize:7', 'input', Buffer.from('secret'));
    assert.ok(isSealed(sealed));
    assert.ok(!sealed.includes('secret'));
    assert.equal(sealedWith(sealed), 'k2');
    assert.deepEqual(ring.open('resize:7', 'input', sealed), Buffer.from('secret'));
    assert.equal(
      await refusal(() => ring.open('resize:8', 'input', sealed)),
      'encrypted data of resize:8 (input) does not open with key "k2": it was changed, or belongs to another job',
    );
    assert.match(await refusal(() => ring.open('resize:7', 'output', sealed)), /of resize:7 \(output\) does not open/);
    const changed = Buffer.from(sealed);
    changed[changed.length - 1] ^= 1;
    await refusal(() => ring.open('resize:7', 'input', changed));
    // Plain data passes as it is.
    assert.deepEqual(ring.open('resize:7', 'input', Buffer.from('plain')), Buffer.from('plain'));
    // Cut short: refused, naming the job and the field.
    for (let cut = MAGIC.length; cut < Math.min(sealed.length, 40); cut += 1) {
      assert.match(await refusal(() => ring.open('resize:7', 'input', sealed.subarray(0, cut))), /resize:7 \(input\)/);
    }
  });

  it('old keys open what they sealed; a key the file lacks is named', async () => {
    const sealed = KeyRing.parse('old', K1).seal('f:1', 'output', Buffer.from('out'));
    assert.deepEqual(KeyRing.parse('keys', FILE).open('f:1', 'output', sealed), Buffer.from('out'));
    const other = KeyRing.parse('x', 'k9 AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n');
    assert.equal(
      await refusal(() => other.open('f:1', 'output', sealed)),
      'encrypted with key "k1", which is not in this key file (add it to read the data)',
    );
  });

  it('text fields hold the envelope in base64; a log opens line by line', async () => {
    const ring = KeyRing.parse('keys', FILE);
    const sealed = ring.sealText('f:1', 'error', 'it broke');
    assert.ok(sealed.startsWith(TEXT_PREFIX));
    assert.equal(sealedWith(sealed), 'k2');
    assert.equal(ring.openText('f:1', 'error', sealed), 'it broke');
    assert.equal(ring.openText('f:1', 'error', 'plain'), 'plain');
    assert.match(await refusal(() => ring.openText('f:1', 'error', 'wgenc1:!!')), /f:1 \(error\) is cut short or garbled/);
    const attempt = (n, text) => `--- attempt ${n} ---\n${ring.sealText('f:1', 'log', text)}\n`;
    const log = attempt(1, 'one\ntwo') + attempt(2, 'three');
    assert.equal(openLog(ring, 'f:1', log), '--- attempt 1 ---\none\ntwo\n--- attempt 2 ---\nthree\n');
    // The front of the oldest attempt kept, cut by the log's size limit.
    const cut = log.slice(log.indexOf(TEXT_PREFIX) + 10);
    assert.equal(openLog(ring, 'f:1', cut), "[the start of this attempt's encrypted log was cut]\n--- attempt 2 ---\nthree\n");
    assert.equal(openLog(ring, 'f:1', 'plain log\n'), 'plain log\n');
    // Without keys, each sealed line says so (naming the key), its line break kept.
    assert.equal(openLog(null, 'f:1', log), `--- attempt 1 ---\n${notice('k2')}\n--- attempt 2 ---\n${notice('k2')}\n`);
    assert.equal(openLog(null, 'f:1', `plain\n${ring.sealText('f:1', 'log', 'x')}`), `plain\n${notice('k2')}\n`);
    assert.equal(saidSealed('wgenc1:!!'), notice('?'));
    assert.equal(saidSealed('plain'), 'plain');
  });

  it('refuses bad key files naming the file and the line', async () => {
    const key = 'ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=';
    for (const [text, says] of [
      ['', 'the encryption key file keys: it holds no key (add one with `wasmgear keys new FILE ID`)'],
      ['# only a comment\n\n', 'it holds no key'],
      ['k1\n', 'the encryption key file keys: line 1: expected `ID BASE64KEY`'],
      ['\nk1 a b\n', 'line 2: expected `ID BASE64KEY`'],
      ['k1 notbase64!\n', 'line 1: the key is not base64'],
      ['k1 AAA\n', 'line 1: the key is not base64'],
      ['k1 AAAA\n', 'line 1: the key is 3 bytes, not 32'],
      [`bad/id ${key}\n`, 'line 1: key id "bad/id" must be 1 to 32 of [A-Za-z0-9_.-]'],
      [`${'x'.repeat(33)} ${key}\n`, 'must be 1 to 32 of'],
      [`k1 ${key}\r\nk1 ${key}\r\n`, 'line 2: key id "k1" is used twice'],
    ]) {
      assert.ok((await refusal(() => KeyRing.parse('keys', text))).includes(says), JSON.stringify(text));
    }
    assert.match(await refusal(() => KeyRing.fromFile('/nonexistent/keys')), /^cannot read the encryption key file \/nonexistent\/keys: /);
  });

  it('takes the key file and encryptAll from the options, else the environment', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-node-keys-'));
    const file = path.join(dir, 'keys');
    fs.writeFileSync(file, FILE);
    try {
      assert.deepEqual(encryptionOf({}, {}), { keys: null, encryptAll: false });
      const fromEnv = encryptionOf({}, { WASMGEAR_ENCRYPTION_KEY_FILE: file, WASMGEAR_ENCRYPT_ALL: '1' });
      assert.equal(fromEnv.keys.current, 'k2');
      assert.equal(fromEnv.encryptAll, true);
      const given = encryptionOf({ encryptionKeyFile: file, encryptAll: false }, { WASMGEAR_ENCRYPT_ALL: '1' });
      assert.deepEqual([given.keys.current, given.encryptAll], ['k2', false]);
      assert.equal(encryptionOf({ encryptionKeyFile: null }, { WASMGEAR_ENCRYPTION_KEY_FILE: file }).keys, null);
      assert.match(await refusal(() => encryptionOf({ encryptAll: true }, {})), /^encryptAll needs a key file/);
      assert.match(await refusal(() => encryptionOf({ encryptionKeyFile: 7 }, {})), /encryptionKeyFile: give the path/);
      assert.match(await refusal(() => encryptionOf({ encryptAll: 'yes' }, {})), /encryptAll: "yes" is not true or false/);
      // Refused before anything connects (nothing listens on port 1).
      assert.match(
        await refusal(() => Client.connect('redis://127.0.0.1:1', { encryptionKeyFile: path.join(dir, 'none') })),
        /^cannot read the encryption key file /,
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * Every key of the Redis at `url` matching `pattern` (but those `skip` names) and its
 * contents, as buffers (strings, hashes, lists, sets, sorted sets, streams), the keys sorted.
 */
async function dump(url, pattern = '*', skip = []) {
  const redis = new Redis(url);
  try {
    const values = [];
    for (const key of (await redis.keysBuffer(pattern)).sort(Buffer.compare)) {
      if (skip.includes(key.toString())) continue;
      values.push(key);
      const type = await redis.type(key);
      if (type === 'string') values.push(await redis.getBuffer(key));
      else if (type === 'hash') values.push(...(await redis.hgetallBuffer(key).then((h) => Object.values(h))), ...(await redis.hkeysBuffer(key)));
      else if (type === 'list') values.push(...(await redis.lrangeBuffer(key, 0, -1)));
      else if (type === 'set') values.push(...(await redis.smembersBuffer(key)));
      else if (type === 'zset') values.push(...(await redis.zrangeBuffer(key, 0, -1)));
      else if (type === 'stream') values.push(Buffer.from(JSON.stringify(await redis.xrange(key, '-', '+'))));
      else throw new Error(`key ${key} has type ${type}, not dumped`);
    }
    return values;
  } finally {
    redis.disconnect();
  }
}

const holds = (values, needle) => values.some((value) => value.includes(needle));

describe('encrypted jobs against a real worker', { timeout: 300000 }, () => {
  let redis;
  let worker;
  let dir;
  let keys;
  let client;
  let blind;
  let admin;

  before(async () => {
    redis = await startRedis();
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-node-keys-'));
    keys = path.join(dir, 'keys');
    const made = await cli(['keys', 'new', keys, 'k1']);
    assert.equal(made.code, 0, made.stderr);
    worker = await startWorker(redis.url, ['echo', 'fail', 'resume', 'plain=echo'], 4, {}, { WASMGEAR_ENCRYPTION_KEY_FILE: keys });
    const set = await cli(['config', 'echo', '--encrypt', '--new', '--redis', redis.url]);
    assert.equal(set.code, 0, set.stderr);
    client = await Client.connect(redis.url, { encryptionKeyFile: keys });
    blind = await Client.connect(redis.url, { encryptionKeyFile: null });
    admin = new Redis(redis.url);
  });

  after(async () => {
    if (client) await client.close();
    if (blind) await blind.close();
    if (admin) admin.disconnect();
    if (worker) await worker.stop();
    if (redis) await redis.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a client without the key is refused with the reason, and nothing is written', async () => {
    assert.equal((await blind.config('echo')).encrypt, true);
    // The queue's keys of echo but its roll call (which the idle worker renews).
    const queue = () => dump(redis.url, 'wg:{echo}:*', ['wg:{echo}:workers']);
    const before = await queue();
    const message = await refusal(() => blind.enqueue('echo', 'NODE-TOPSECRET-REFUSED'));
    assert.equal(
      message,
      'job 1: function echo stores only encrypted input (config --encrypt): give the producer the key file ' +
        '(WASMGEAR_ENCRYPTION_KEY_FILE)',
    );
    await refusal(() => blind.enqueueMany('echo', ['NODE-TOPSECRET-REFUSED', 'NODE-TOPSECRET-REFUSED']));
    assert.deepEqual(await queue(), before);
    assert.ok(!holds(await dump(redis.url), 'NODE-TOPSECRET-REFUSED'));
  });

  it('seals what it writes, the worker opens and seals, the client opens what it reads', async () => {
    const { id } = await client.enqueue('echo', 'NODE-TOPSECRET-IN');
    const done = await client.wait(id, WAIT);
    assert.equal(done.output.toString(), 'NODE-TOPSECRET-IN');
    assert.equal((await client.status(id)).output.toString(), 'NODE-TOPSECRET-IN');
    assert.equal((await client.input(id)).toString(), 'NODE-TOPSECRET-IN');
    // Stored sealed, bound to its id; read without the key, the bytes as stored.
    const [fn, number] = id.split(':');
    const stored = await admin.hgetBuffer(`wg:{${fn}}:input`, number);
    assert.ok(stored.subarray(0, MAGIC.length).equals(MAGIC), stored.toString('hex'));
    assert.equal(sealedWith(stored), 'k1');
    assert.deepEqual(await blind.input(id), stored);
    const raw = await blind.status(id);
    assert.equal(sealedWith(raw.output), 'k1');
    assert.ok(!raw.output.includes('NODE-TOPSECRET-IN'));

    // Many at once, a flow and a batch: each sealed with the number reserved for it.
    const many = await client.enqueueMany('echo', ['NODE-TOPSECRET-MANY-1', { input: 'NODE-TOPSECRET-MANY-2' }]);
    const flow = await client.submitFlow({
      name: 'sealed',
      jobs: {
        a: { function: 'echo', input: 'NODE-TOPSECRET-FLOW-A' },
        b: { function: 'echo', input: 'NODE-TOPSECRET-FLOW-B', after: ['a'] },
      },
    });
    const batch = await client.batch([
      { function: 'echo', input: 'NODE-TOPSECRET-BATCH-1' },
      { function: 'echo', input: 'NODE-TOPSECRET-BATCH-2' },
    ]);
    const ids = [...many.map((job) => job.id), flow.jobs.a, flow.jobs.b, ...batch.jobs];
    const outputs = (await client.wait(ids, WAIT)).map((job) => job.output.toString());
    assert.deepEqual(outputs, [
      'NODE-TOPSECRET-MANY-1',
      'NODE-TOPSECRET-MANY-2',
      'NODE-TOPSECRET-FLOW-A',
      'NODE-TOPSECRET-FLOW-B',
      'NODE-TOPSECRET-BATCH-1',
      'NODE-TOPSECRET-BATCH-2',
    ]);

    // encryptAll seals the inputs of a function that does not ask for it.
    const all = await Client.connect(redis.url, { encryptionKeyFile: keys, encryptAll: true });
    try {
      assert.equal((await all.config('plain')).encrypt, false);
      const { id: plain } = await all.enqueue('plain', 'NODE-TOPSECRET-ALL');
      assert.equal((await all.wait(plain, WAIT)).output.toString(), 'NODE-TOPSECRET-ALL');
      assert.equal(sealedWith(await blind.input(plain)), 'k1');
    } finally {
      await all.close();
    }
  });

  it("a failing job's error message and log are sealed in Redis and opened by the client", async () => {
    const set = await client.configure('fail', { encrypt: true });
    assert.equal(set.encrypt, true);
    const { id } = await client.enqueue('fail', 'NODE-TOPSECRET-ERR', { attempts: 1 });
    await assert.rejects(client.wait(id, WAIT), (error) => {
      assert.ok(error instanceof JobFailedError, `${error.name}: ${error.message}`);
      assert.match(error.message, /failed on purpose: NODE-TOPSECRET-ERR/);
      return true;
    });
    const status = await client.status(id);
    assert.match(status.error.message, /failed on purpose: NODE-TOPSECRET-ERR/);
    assert.match(status.record.error.message, /failed on purpose: NODE-TOPSECRET-ERR/);
    assert.match(status.history.at(-1).message, /failed on purpose: NODE-TOPSECRET-ERR/);
    assert.match(await client.logs(id), /failing on purpose/);
    // Sealed as stored: a client without the key is told so, never given the envelope.
    const stored = await admin.hget('wg:{fail}:jobs', id.split(':')[1]);
    assert.ok(stored.includes(TEXT_PREFIX) && !stored.includes('NODE-TOPSECRET-ERR'));
    for (const raw of [await blind.status(id), await blind.wait(id, WAIT).catch((error) => error.job)]) {
      assert.equal(raw.error.message, notice('k1'));
      assert.equal(raw.record.error.message, notice('k1'));
      assert.deepEqual(raw.history.map((entry) => entry.message), [notice('k1')]);
      assert.deepEqual(raw.record.history.map((entry) => entry.message), [notice('k1')]);
    }
    const log = await blind.logs(id);
    assert.ok(log.includes(`${notice('k1')}\n`), log);
    assert.ok(!log.includes(TEXT_PREFIX) && !log.includes('failing on purpose'), log);
  });

  it("a flow's sealed error opens and its sealed output's size is as opened; without the key, the notice", async () => {
    await client.configure('fail', { encrypt: true });
    const flow = await client.submitFlow({
      name: 'sealed outcomes',
      jobs: {
        ok: { function: 'echo', input: 'NODE-TOPSECRET-OUTCOME-OK' },
        bad: { function: 'fail', input: 'NODE-TOPSECRET-OUTCOME-BAD', attempts: 1 },
      },
    });
    const status = await client.waitFlow(flow.id, WAIT);
    const byName = (read) => Object.fromEntries(read.jobs.map((job) => [job.name, job]));
    const jobs = byName(status);
    assert.deepEqual([jobs.ok.state, jobs.bad.state], ['succeeded', 'failed']);
    assert.equal(jobs.ok.outputBytes, 'NODE-TOPSECRET-OUTCOME-OK'.length);
    assert.equal(jobs.ok.error, null);
    assert.match(jobs.bad.error, /failed on purpose: NODE-TOPSECRET-OUTCOME-BAD/);
    // Read again, it is opened again from what is stored, not twice.
    assert.deepEqual(byName(await client.flow(flow.id)), jobs);
    const stored = await admin.hstrlen('wg:{echo}:output', flow.jobs.ok.split(':')[1]);
    assert.equal(stored, 'NODE-TOPSECRET-OUTCOME-OK'.length + MAGIC.length + 1 + 'k1'.length + 12 + 16);
    const seen = byName(await blind.flow(flow.id));
    assert.equal(seen.bad.error, notice('k1'));
    assert.equal(seen.ok.outputBytes, stored);
  });

  it('a checkpoint is sealed in Redis, opened by the client, and resumed from by the worker', async () => {
    await client.configure('resume', { encrypt: true });
    // `resume 10` fails on purpose after 5 steps, saving its position after each.
    const { id } = await client.enqueue('resume', '10', { attempts: 1 });
    await assert.rejects(client.wait(id, WAIT), JobFailedError);
    assert.deepEqual(await client.checkpoint(id), Buffer.from('5'));
    const raw = await blind.checkpoint(id);
    assert.equal(sealedWith(raw), 'k1');
    assert.equal(await client.retry(id), true);
    assert.equal((await client.wait(id, WAIT)).output.toString(), 'resumed from 5');
  });

  it('holds no plaintext of any input, output, error or log in Redis', async () => {
    const values = await dump(redis.url);
    for (const secret of ['NODE-TOPSECRET', 'failing on purpose']) {
      assert.ok(!holds(values, secret), `${secret} is in Redis in clear`);
    }
    assert.ok(holds(values, MAGIC), 'no envelope in Redis at all');
  });

  it('a ciphertext moved to another job does not open', async () => {
    const { id: first } = await client.enqueue('echo', 'NODE-TOPSECRET-FIRST', { delayMs: 3600000 });
    const { id: later } = await client.enqueue('echo', 'NODE-TOPSECRET-LATER', { delayMs: 3600000 });
    const number = (id) => id.split(':')[1];
    const sealed = await admin.hgetBuffer('wg:{echo}:input', number(first));
    await admin.hset('wg:{echo}:input', number(later), sealed);
    assert.equal(
      await refusal(() => client.input(later)),
      `encrypted data of ${later} (input) does not open with key "k1": it was changed, or belongs to another job`,
    );
    assert.equal((await client.input(first)).toString(), 'NODE-TOPSECRET-FIRST');
    await client.cancel(first);
    await client.cancel(later);
  });
});
