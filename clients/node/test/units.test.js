'use strict';

// The pieces that need no server: option checks and their wire form, ids, messages.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { jobOptions, inputBytes, LIMITS } = require('../lib/options');
const { parseMessage, Mailbox } = require('../lib/subscriber');
const { parseJobId, checkFunction, BadInputError, ConflictError } = require('..');
const protocol = require('../lib/protocol');

describe('options', () => {
  it('sends only what differs from the defaults, in the Rust client\'s order', () => {
    assert.deepEqual(jobOptions(undefined), { named: [], after: [] });
    assert.deepEqual(jobOptions({ priority: 'normal', retentionMs: LIMITS.DEFAULT_RETENTION_MS }).named, []);
    const { named, after } = jobOptions(
      {
        after: ['b:2', 'a:01'],
        tags: ['x', 'y'],
        uniq: 'u',
        at: new Date(2000000000000),
        failedRetentionMs: 5000,
        retentionMs: 2000,
        timeoutMs: 7,
        attempts: 3,
        priority: 'high',
      },
      1999999999000,
    );
    assert.deepEqual(named, [
      'priority', '10', 'attempts', '3', 'timeout', '7', 'retention', '2000',
      'failed_retention', '5000', 'at', '2000000000000', 'uniq', 'u', 'tag', 'x', 'tag', 'y',
      'after', 'b:2', 'after', 'a:1',
    ]);
    assert.deepEqual(after.map((d) => d.fn), ['b', 'a']);
    assert.deepEqual(jobOptions({ delayMs: 5, priority: -3 }).named, ['priority', '-3', 'delay', '5']);
    assert.deepEqual(jobOptions({ priority: '-1000' }).named, ['priority', '-1000']);
  });

  it('names the option out of range', () => {
    const cases = [
      [{ priority: 1.5 }, /priority 1.5/],
      [{ attempts: '3' }, /attempts "3"/],
      [{ timeoutMs: 1.5 }, /timeoutMs 1.5 must be a whole number/],
      [{ failedRetentionMs: -1 }, /failedRetentionMs -1 is out of range/],
      [{ uniq: 'é'.repeat(101) }, /uniq .* must be 1 to 200 bytes/],
      [{ uniq: 'a\u0085b' }, /uniq .* contains a control character/],
      [{ tags: 'x' }, /tags must be an array/],
      [{ at: new Date(0) }, /not after 1970/],
      [{ at: new Date(NaN) }, /at must be a valid Date/],
      [[], /options must be an object/],
    ];
    for (const [options, message] of cases) {
      assert.throws(() => jobOptions(options), (error) => {
        assert.ok(error instanceof BadInputError);
        assert.equal(error.exitCode, 2);
        assert.match(error.message, message);
        return true;
      });
    }
    assert.ok(jobOptions({ uniq: 'é'.repeat(100) }).named.includes('é'.repeat(100)));
  });

  it('finds a time to run at too far ahead a conflict with the clock', () => {
    const far = new Date(Date.now() + 11 * 365 * 24 * 3600 * 1000);
    assert.throws(() => jobOptions({ at: far }), (error) => {
      assert.ok(error instanceof ConflictError, `${error.name}: ${error.message}`);
      assert.equal(error.exitCode, 2);
      assert.match(error.message, /more than 10 years ahead/);
      return true;
    });
    const near = new Date(Date.now() + 9 * 365 * 24 * 3600 * 1000);
    assert.deepEqual(jobOptions({ at: near }).named, ['at', String(near.getTime())]);
  });

  it('takes inputs as bytes', () => {
    assert.deepEqual(inputBytes('hé', 10), Buffer.from('hé'));
    assert.deepEqual(inputBytes(new Uint8Array([1, 2]), 10), Buffer.from([1, 2]));
    assert.deepEqual(inputBytes(undefined, 10), Buffer.alloc(0));
    assert.throws(() => inputBytes(42, 10), /give a Buffer or a string/);
    assert.throws(() => inputBytes('x'.repeat(11), 10), /11 bytes are larger than the limit of 10/);
  });
});

describe('names', () => {
  it('reads job ids and function names', () => {
    assert.deepEqual(parseJobId('a.b-c_D:42'), { id: 'a.b-c_D:42', function: 'a.b-c_D', number: 42 });
    for (const bad of ['a', 'a:', 'x:y:7', ':1', 'a:0', 'a:-1', 'a:1.5', 'a b:1', `${'f'.repeat(101)}:1`, 'a:18446744073709551616']) {
      assert.throws(() => parseJobId(bad), BadInputError, bad);
    }
    assert.equal(checkFunction('f'.repeat(100)), 'f'.repeat(100));
    assert.throws(() => checkFunction('é'), /invalid function name/);
  });
});

describe('protocol', () => {
  it('builds keys from the shipped manifest', () => {
    const call = protocol.callOn('get', 'echo');
    assert.equal(call.command, 'FCALL_RO');
    assert.equal(call.name, 'wg2_get');
    assert.deepEqual(call.keys, ['wg:{echo}:jobs', 'wg:{echo}:output', 'wg:{echo}:stats', 'wg:{echo}:events']);
    const enqueue = protocol.callOn('enqueue', 'f');
    assert.equal(enqueue.command, 'FCALL');
    assert.equal(enqueue.keys.length, 25);
    assert.equal(enqueue.keys.at(-1), 'wg:{f}:reserved');
    assert.equal(protocol.allEventsPattern(), 'wg:{*}:events');
    assert.equal(protocol.functionOfChannel('wg:{a.b}:events'), 'a.b');
    assert.equal(protocol.functionOfChannel('wg:{a}:work'), undefined);
    assert.match(protocol.load().library, /^#!lua name=wasmgear_v2/);
  });
});

describe('messages', () => {
  it('reads an event object, an array of events, and skips the rest', () => {
    assert.deepEqual(parseMessage('{"event":"create","id":"a:1"}'), [{ event: 'create', id: 'a:1' }]);
    assert.deepEqual(
      parseMessage('[{"event":"create","id":"a:1"},{"event":"create","id":"a:2"},7,{"no":"event"}]'),
      [{ event: 'create', id: 'a:1' }, { event: 'create', id: 'a:2' }],
    );
    assert.deepEqual(parseMessage('not json'), []);
    assert.deepEqual(parseMessage('null'), []);
  });

  it('hands items over in order, with a timeout', async () => {
    const box = new Mailbox();
    box.push(1);
    box.push(2);
    assert.equal(await box.next(10), 1);
    assert.equal(await box.next(10), 2);
    assert.equal(await box.next(10), null);
    const later = box.next(1000);
    box.push(3);
    assert.equal(await later, 3);
    const pending = box.next();
    box.close();
    assert.equal(await pending, null);
    box.push(4);
    assert.equal(await box.next(), null);
  });
});

describe('index.d.ts', () => {
  it('declares what index.js exports, and test-support/types-check.ts uses every declaration', () => {
    const read = (...parts) => fs.readFileSync(path.join(__dirname, '..', ...parts), 'utf8');
    const dts = read('index.d.ts');
    const check = read('test-support', 'types-check.ts');
    const declared = new Map(
      [...dts.matchAll(/^export (?:declare )?(class|const|function|type|interface) ([A-Za-z_$][\w$]*)/gm)]
        .map(([, kind, name]) => [name, kind]),
    );
    const values = Object.keys(require('..')).sort();
    const declaredValues = [...declared].filter(([, kind]) => !['type', 'interface'].includes(kind)).map(([name]) => name);
    assert.deepEqual([...new Set(declaredValues)].sort(), values);
    for (const name of declared.keys()) {
      assert.match(check, new RegExp(`\\b${name}\\b`), `types-check.ts does not use ${name}`);
    }
    // Each exported name is imported there (not only mentioned in a comment).
    const imported = [...check.matchAll(/^import (?:type )?\{([^}]*)\} from '\.\.';/gm)]
      .flatMap(([, names]) => names.split(',').map((n) => n.trim()).filter(Boolean));
    assert.deepEqual([...new Set(imported)].sort(), [...declared.keys()].sort());
  });
});

describe('limits', () => {
  it('are the shipped manifest\'s, every one, by its name in upper case', () => {
    const shipped = JSON.parse(fs.readFileSync(path.join(protocol.DIR, 'manifest.json'), 'utf8')).limits;
    assert.deepEqual(
      LIMITS,
      Object.fromEntries(Object.entries(shipped).map(([name, value]) => [name.toUpperCase(), value])),
    );
    assert.ok(Object.isFrozen(LIMITS));
  });

  it('checks follow the manifest: a package shipping other limits refuses by those', () => {
    // A copy of the package whose manifest says other numbers, loaded in a child process.
    const os = require('node:os');
    const { execFileSync } = require('node:child_process');
    const root = path.join(__dirname, '..');
    const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-limits-'));
    try {
      for (const entry of ['index.js', 'package.json', 'lib', 'protocol']) {
        fs.cpSync(path.join(root, entry), path.join(copy, entry), { recursive: true });
      }
      fs.symlinkSync(path.join(root, 'node_modules'), path.join(copy, 'node_modules'));
      const file = path.join(copy, 'protocol', 'manifest.json');
      const manifest = JSON.parse(fs.readFileSync(file, 'utf8'));
      Object.assign(manifest.limits, { max_tags: 1, max_priority: 5, max_function_name_len: 3 });
      fs.writeFileSync(file, JSON.stringify(manifest));
      const script = `
        const { checkFunction } = require('./index.js');
        const { jobOptions } = require('./lib/options');
        const refused = (f) => { try { f(); return false; } catch (e) { return e.name === 'BadInputError'; } };
        console.log(JSON.stringify([
          refused(() => jobOptions({ tags: ['a'] })), refused(() => jobOptions({ tags: ['a', 'b'] })),
          refused(() => jobOptions({ priority: 5 })), refused(() => jobOptions({ priority: 6 })),
          refused(() => checkFunction('abc')), refused(() => checkFunction('abcd')),
        ]));`;
      const out = execFileSync(process.execPath, ['-e', script], { cwd: copy, encoding: 'utf8' });
      assert.deepEqual(JSON.parse(out), [false, true, false, true, false, true]);
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  });
});

describe('Client internals', () => {
  const { Client } = require('..');

  it('only Client.connect makes a Client, and its prototype holds only the documented API', () => {
    assert.throws(() => new Client(), TypeError);
    assert.throws(() => new Client({ redis: null }), TypeError);
    const own = Object.getOwnPropertyNames(Client.prototype).sort();
    assert.deepEqual(own, [
      'cancel', 'close', 'constructor', 'enqueue', 'enqueueMany', 'events', 'isCluster', 'logs',
      'queues', 'retry', 'status', 'wait',
    ]);
  });
});

describe('which failures are sent again', () => {
  const Redis = require('ioredis');
  const { isTransient, translate } = require('../lib/client');
  const { MaxRetriesPerRequestError } = require('ioredis/built/errors');

  it('decides by error class and code, never by what a message says', () => {
    const reply = (text) => new Redis.ReplyError(text);
    const coded = (code) => Object.assign(new Error('whatever it says'), { code });
    // Passing trouble: ioredis' plain errors of a closed connection or a timed-out reply, its
    // error for retries it gave up, a socket error code, a reply saying the server is busy.
    for (const error of [new Error('Connection is closed.'), new Error('Command timed out'),
      new MaxRetriesPerRequestError(2), coded('ECONNRESET'), coded('ETIMEDOUT'),
      reply('LOADING Redis is loading the dataset'), reply('TRYAGAIN later'), reply('CLUSTERDOWN')]) {
      assert.equal(isTransient(error), true, `${error.constructor.name}: ${error.message}`);
    }
    // Answers and mistakes: a reply whose text looks like connection trouble is still a reply.
    for (const error of [reply('ERR Connection is closed by the script'), reply('ERR Command timed out'),
      reply('BADJOB job 1: no'), new TypeError('Connection is closed'), coded('ERR_INVALID_ARG_TYPE'),
      'Connection is closed', null]) {
      assert.equal(isTransient(error), false, String(error && error.message));
    }
  });

  it('gives refusals by their reply code', () => {
    const refused = translate(new Redis.ReplyError('BADJOB job 1: priority out of range'), 'redis://x');
    assert.equal(refused.name, 'BadInputError');
    assert.equal(refused.message, 'job 1: priority out of range');
    assert.equal(translate(new Redis.ReplyError('NOJOB echo:1'), 'redis://x').name, 'NotFoundError');
    assert.equal(translate(new Redis.ReplyError('ERR BADJOB in the text'), 'redis://x').name, 'WasmgearError');
  });
});
