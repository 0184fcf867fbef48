'use strict';

// The pieces that need no server: option checks and their wire form, ids, messages.

const { describe, it } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { jobOptions, inputBytes, retryArgs, LIMITS } = require('../lib/options');
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

  it('sends the deadline to start by after every other option, and checks it', () => {
    assert.deepEqual(
      jobOptions({ uniq: 'k', throttle: { limit: 2, intervalMs: 1000 }, expiresInMs: 3000 }).named,
      ['uniq', 'k', 'throttle', '2', 'throttle_ms', '1000', 'expires_in', '3000'],
    );
    const at = new Date(Date.UTC(2030, 0, 1));
    assert.deepEqual(jobOptions({ priority: 1, expiresAt: at }).named, ['priority', '1', 'expires_at', '1893456000000']);
    assert.deepEqual(jobOptions({ expiresAt: 1893456000500 }).named, ['expires_at', '1893456000500']);
    assert.deepEqual(jobOptions({ expiresInMs: null, expiresAt: undefined }).named, []);
    for (const [options, message] of [
      [{ expiresInMs: 0 }, /expiresInMs 0 is out of range/],
      [{ expiresInMs: 1.5 }, /expiresInMs 1.5 must be a whole number/],
      [{ expiresInMs: 1, expiresAt: at }, /not both/],
      [{ expiresAt: new Date(NaN) }, /expiresAt must be a valid Date/],
      [{ expiresAt: -1 }, /expiresAt .* is not after 1970/],
    ]) {
      assert.throws(() => jobOptions(options), message);
    }
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

  it('sends the failure policies of dependencies beside after, and checks them', () => {
    const { named, after } = jobOptions({
      after: ['a:1', 'b:02', 'c:3'],
      onFailure: { 'b:2': 'ignore', 'c:3': 'continue', 'a:1': 'cancel' },
    });
    assert.deepEqual(named, [
      'after', 'a:1', 'after', 'b:2', 'after', 'c:3', 'after_ignore', 'b:2', 'after_continue', 'c:3',
    ]);
    assert.deepEqual(after.map((d) => d.onFailure), ['cancel', 'ignore', 'continue']);
    assert.deepEqual(jobOptions({ after: ['a:1'] }).after[0].onFailure, 'cancel');
    const cases = [
      [{ after: ['a:1'], onFailure: { 'a:2': 'ignore' } }, /onFailure names a:2, which is not a dependency \(add it to after\)/],
      [{ onFailure: { 'a:1': 'ignore' } }, /onFailure names a:1, which is not a dependency/],
      [{ after: ['a:1'], onFailure: { 'a:1': 'skip' } }, /onFailure "skip" of a:1 is none of cancel, ignore, continue/],
      [{ after: ['a:1'], onFailure: { a: 'ignore' } }, /invalid dependency \(option onFailure\) "a"/],
      [{ after: ['a:1'], onFailure: ['a:1'] }, /onFailure must be an object/],
    ];
    for (const [options, message] of cases) {
      assert.throws(() => jobOptions(options), (error) => {
        assert.ok(error instanceof BadInputError);
        assert.match(error.message, message);
        return true;
      });
    }
  });

  it("sends retry's fresh as the last argument; refuses a fresh not true or false and other options", () => {
    assert.deepEqual(retryArgs(undefined), []);
    assert.deepEqual(retryArgs(null), []);
    assert.deepEqual(retryArgs({}), []);
    assert.deepEqual(retryArgs({ fresh: false }), []);
    assert.deepEqual(retryArgs({ fresh: undefined }), []);
    assert.deepEqual(retryArgs({ fresh: true }), ['fresh']);
    const cases = [
      [{ fresh: 'yes' }, /^invalid retry option: fresh "yes" must be true or false$/],
      [{ fresh: 1 }, /fresh 1 must be true or false/],
      [{ fresh: null }, /fresh null must be true or false/],
      [{ fresh: true, attempts: 2 }, /unknown option "attempts" \(known: fresh\)/],
      [true, /the options must be an object, not true/],
      ['fresh', /the options must be an object, not "fresh"/],
      [['fresh'], /the options must be an object/],
    ];
    for (const [options, message] of cases) {
      assert.throws(() => retryArgs(options), (error) => {
        assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
        assert.match(error.message, message);
        return true;
      });
    }
  });

  it('takes inputs as bytes', () => {
    assert.deepEqual(inputBytes('hé', 10), Buffer.from('hé'));
    assert.deepEqual(inputBytes(new Uint8Array([1, 2]), 10), Buffer.from([1, 2]));
    assert.deepEqual(inputBytes(undefined, 10), Buffer.alloc(0));
    assert.throws(() => inputBytes(42, 10), /give a Buffer or a string/);
    assert.throws(() => inputBytes('x'.repeat(11), 10), /11 bytes are larger than the limit of 10/);
  });
});

describe('trace contexts', () => {
  const { traceContext, withTrace, ofSpanContext } = require('../lib/tracing');
  const PARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const FORM =
    'is not a W3C traceparent: give 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, in lower case, the ids not all zeros';

  it('keeps a valid traceparent as version 00, its tracestate trimmed (blank: none)', () => {
    assert.deepEqual(traceContext(PARENT, 'rojo=00f067aa0ba902b7'), { traceparent: PARENT, tracestate: 'rojo=00f067aa0ba902b7' });
    assert.deepEqual(traceContext(` \t${PARENT} `, ' \t'), { traceparent: PARENT, tracestate: undefined });
    assert.deepEqual(traceContext(PARENT.replace(/-01$/, '-00'), undefined).traceparent, PARENT.replace(/-01$/, '-00'));
    // A later version: its first four fields, as version 00.
    const later = 'cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-comes-next';
    assert.equal(traceContext(later).traceparent, '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09');
    const widest = `k=${'v'.repeat(LIMITS.MAX_TRACESTATE_BYTES - 2)}`;
    assert.equal(traceContext(PARENT, widest).tracestate, widest);
  });

  it("refuses what is not one with the Rust client's sentences", () => {
    for (const bad of [
      '',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7',
      '00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01',
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
      'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more',
      'cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x',
      '00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é',
      '0-04bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    ]) {
      assert.throws(() => traceContext(bad), (error) => {
        assert.ok(error instanceof BadInputError, bad);
        assert.equal(error.exitCode, 2);
        assert.equal(error.message, `invalid job option: traceparent ${JSON.stringify(bad)} ${FORM}`);
        return true;
      });
    }
    // The value as given (blanks and all), its first 80 characters.
    const long = ` ${PARENT}-${'é'.repeat(100)}`;
    assert.throws(() => traceContext(long), { message: `invalid job option: traceparent ${JSON.stringify(long.slice(0, 80))} ${FORM}` });
    for (const bad of [`k=${'v'.repeat(LIMITS.MAX_TRACESTATE_BYTES - 1)}`, 'k=v\nx', 'k=\u007f', 'k=é']) {
      assert.throws(() => traceContext(PARENT, bad), {
        name: 'BadInputError',
        message:
          'invalid job option: tracestate is not a W3C tracestate: give at most 512 bytes of printable ASCII (key=value members separated by commas)',
      });
    }
  });

  it('sends the options after the deadline; a tracestate only with a traceparent', () => {
    assert.deepEqual(jobOptions({ traceparent: PARENT, tracestate: 'a=b', expiresInMs: 5, priority: 1 }).named, [
      'priority', '1', 'expires_in', '5', 'trace', PARENT, 'tracestate', 'a=b',
    ]);
    assert.deepEqual(jobOptions({ traceparent: PARENT, tracestate: ' ' }).named, ['trace', PARENT]);
    assert.deepEqual(jobOptions({ traceparent: null, tracestate: undefined }).named, []);
    assert.throws(() => jobOptions({ tracestate: 'a=b' }), {
      message: 'invalid job option: tracestate goes with traceparent: give traceparent too',
    });
    assert.throws(() => jobOptions({ traceparent: 7 }), { message: 'invalid job option: traceparent 7 must be a string' });
    assert.throws(() => jobOptions({ traceId: 'x' }), /unknown option "traceId"/);
  });

  it("gives a job the client's context unless it has its own, before the options that place it", () => {
    const context = { traceparent: PARENT, tracestate: 's=1' };
    assert.deepEqual(withTrace(['tag', 'trace'], null), ['tag', 'trace']);
    assert.deepEqual(withTrace(['tag', 'trace'], context), ['tag', 'trace', 'trace', PARENT, 'tracestate', 's=1']);
    assert.deepEqual(withTrace(['after', 'a:1', 'number', '3', 'flow', '7'], { traceparent: PARENT }), [
      'after', 'a:1', 'trace', PARENT, 'number', '3', 'flow', '7',
    ]);
    const own = ['trace', 'x', 'number', '3', 'batch', 'b'];
    assert.deepEqual(withTrace(own, context), own);
  });

  it('reads an OpenTelemetry span context: the sampled flag, its tracestate; none when it is not one', () => {
    const state = { serialize: () => 'a=1,b=2' };
    const spanContext = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 3, traceState: state };
    assert.deepEqual(ofSpanContext(spanContext), { traceparent: PARENT, tracestate: 'a=1,b=2' });
    assert.deepEqual(ofSpanContext({ ...spanContext, traceFlags: 0, traceState: undefined }), {
      traceparent: PARENT.replace(/-01$/, '-00'),
      tracestate: undefined,
    });
    assert.equal(ofSpanContext({ ...spanContext, spanId: '0000000000000000' }), null);
    assert.equal(ofSpanContext({ ...spanContext, traceState: { serialize: () => 'x'.repeat(600) } }), null);
    assert.equal(ofSpanContext(undefined), null);
  });
});

describe('groups', () => {
  const {
    settingsArgs,
    groupArgs,
    groupsArgs,
    readConfig,
    groupConfig,
    groupsOverview,
  } = require('../lib/settings');
  const { prepareFlow } = require('../lib/flow');
  const { batchJobs } = require('../lib/batch');

  /** The message of the BadInputError `f` throws. */
  const refusal = (f) => {
    try {
      f();
    } catch (error) {
      assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
      assert.ok(!(error instanceof ConflictError));
      return error.message;
    }
    assert.fail('accepted');
  };

  it('sends the group after the Rust client\'s other options; in flows and batches too', () => {
    const { named } = jobOptions({
      group: 'acme', onFailure: { 'a:1': 'ignore' }, after: ['a:1'], tags: ['t'], uniq: 'u', priority: 1,
    });
    assert.deepEqual(named, [
      'priority', '1', 'uniq', 'u', 'tag', 't', 'after', 'a:1', 'after_ignore', 'a:1', 'group', 'acme',
    ]);
    const widest = Array.from({ length: 94 }, (_, i) => String.fromCharCode(0x21 + i))
      .filter((c) => !'"\\|'.includes(c)).join('').repeat(3).slice(0, 200);
    assert.deepEqual(jobOptions({ group: widest }).named, ['group', widest]);
    assert.deepEqual(jobOptions({ group: null }).named, []);
    const flow = prepareFlow({ name: 'f', jobs: { a: { function: 'echo', group: 't1', tags: ['x'] } } });
    assert.deepEqual(flow.named, [['tag', 'x', 'group', 't1']]);
    assert.deepEqual(batchJobs([{ function: 'echo', options: { group: 't2' } }])[0].named, ['group', 't2']);
  });

  it('refuses a bad group key, naming it', () => {
    const cases = [
      ['a b', 'group "a b" holds " ": a group key is printable ASCII without spaces, \'"\', \'\\\' or \'|\''],
      ['', 'group "" must be 1 to 200 bytes long'],
      ['x'.repeat(201), 'must be 1 to 200 bytes long'],
      ['a"b', 'holds "\\""'],
      ['a|b', 'holds "|"'],
      ['a\\b', 'holds "\\\\"'],
      ['é', 'holds "é"'],
      ['tab\t', 'holds "\\t"'],
      [5, 'group 5 must be a string'],
    ];
    for (const [group, message] of cases) {
      const text = refusal(() => jobOptions({ group }));
      assert.ok(text.startsWith('invalid job option: group '), text);
      assert.ok(text.includes(message), `${text} lacks ${message}`);
      assert.ok(refusal(() => groupArgs(group, {})).startsWith('invalid group setting: group '));
      assert.ok(refusal(() => groupsArgs({ group })).startsWith('invalid groups option: group '));
    }
    assert.match(
      refusal(() => prepareFlow({ name: 'f', jobs: { a: { function: 'echo', group: 'a b' } } })),
      /^invalid job option: job "a": group "a b" holds " "/,
    );
    assert.match(
      refusal(() => prepareFlow({ name: 'f', jobs: { a: { function: 'echo', group: 7 } } })),
      /the flow does not read: jobs\.a\.group: must be a string/,
    );
    assert.match(
      refusal(() => batchJobs([{ function: 'echo' }, { function: 'echo', options: { group: '' } }])),
      /^job 2 of the batch: invalid job option: group "" must be 1 to 200 bytes long/,
    );
  });

  it("writes a function's and a group's settings as configure and configure_group take them", () => {
    assert.deepEqual(settingsArgs({}), []);
    assert.deepEqual(settingsArgs(undefined), []);
    assert.deepEqual(
      settingsArgs({
        paused: true,
        concurrency: null,
        rateLimit: { limit: 5, intervalMs: 2000 },
        keepFinished: 10,
        groupConcurrency: 2,
        groupRateLimit: null,
      }),
      [
        'paused', '1', 'concurrency', '', 'rate_limit', '5', 'rate_interval_ms', '2000', 'keep_finished', '10',
        'group_concurrency', '2', 'group_rate_limit', '', 'group_rate_interval_ms', '',
      ],
    );
    assert.deepEqual(settingsArgs({ paused: false, groupRateLimit: { limit: 1, intervalMs: 1 } }), [
      'paused', '', 'group_rate_limit', '1', 'group_rate_interval_ms', '1',
    ]);
    assert.deepEqual(settingsArgs({ minReplicas: 2, keepFinished: 5 }), ['keep_finished', '5', 'min_replicas', '2']);
    assert.deepEqual(settingsArgs({ minReplicas: LIMITS.MAX_MIN_REPLICAS }), ['min_replicas', '16']);
    assert.deepEqual(settingsArgs({ minReplicas: null }), ['min_replicas', '']);
    assert.deepEqual(settingsArgs({ encrypt: true }), ['encrypt', '1']);
    assert.deepEqual(settingsArgs({ encrypt: false }), ['encrypt', '']);
    assert.deepEqual(groupArgs('g', { concurrency: 1, rateLimit: null, paused: false }), [
      'g', 'paused', '', 'concurrency', '1', 'rate_limit', '', 'rate_interval_ms', '',
    ]);
    assert.deepEqual(groupArgs('g'), ['g']);
    assert.deepEqual(groupsArgs(), ['20', '']);
    assert.deepEqual(groupsArgs({ limit: 1000, group: 'g' }), ['1000', 'g']);
    const cases = [
      [() => settingsArgs({ concurrency: 0 }), /^invalid setting: a concurrency cap of 0 would stop the queue/],
      [() => settingsArgs({ keepFinished: 0 }), /keep at least 1 finished job/],
      [() => settingsArgs({ groupConcurrency: 0 }), /a group concurrency of 0 would stop every group/],
      [() => settingsArgs({ groupConcurrency: 1.5 }), /groupConcurrency 1.5 must be a whole number/],
      [() => settingsArgs({ groupConcurrency: 2 ** 53 }), /must be a whole number in 1\.\.=9007199254740991/],
      [() => settingsArgs({ groupRateLimit: { limit: 0, intervalMs: 1000 } }), /at least 1 job per interval of at least 1ms/],
      [() => settingsArgs({ groupRateLimit: { limit: 1, intervalMs: 0 } }), /at least 1 job per interval of at least 1ms/],
      [() => settingsArgs({ groupRateLimit: { limit: 1, intervalMs: -5 } }), /groupRateLimit.intervalMs -5 is out of range/],
      [() => settingsArgs({ groupRateLimit: 5 }), /groupRateLimit 5 must be \{limit, intervalMs\}/],
      [() => settingsArgs({ group_concurrency: 1 }), /unknown setting "group_concurrency"/],
      [() => settingsArgs('x'), /the settings must be an object/],
      [() => settingsArgs({ paused: 1 }), /paused 1 must be true or false/],
      [() => settingsArgs({ minReplicas: 0 }), /^invalid setting: minReplicas 0 must be 1 to 16 \(or null to ask for none\)$/],
      [() => settingsArgs({ minReplicas: 17 }), /minReplicas 17 must be 1 to 16/],
      [() => settingsArgs({ minReplicas: 1.5 }), /minReplicas 1.5 must be 1 to 16/],
      [() => settingsArgs({ minReplicas: '2' }), /minReplicas "2" must be 1 to 16/],
      [() => settingsArgs({ min_replicas: 2 }), /unknown setting "min_replicas"/],
      [() => settingsArgs({ encrypt: 1 }), /^invalid setting: encrypt 1 must be true or false$/],
      [() => groupArgs('g', { concurrency: 0 }), /^invalid group setting: a concurrency of 0 would stop group "g"; pause it instead$/],
      [() => groupArgs('g', { keepFinished: 3 }), /unknown setting "keepFinished"/],
      [() => groupsArgs({ limit: 0 }), /^invalid groups option: list 1 to 1000 groups, not 0$/],
      [() => groupsArgs({ limit: 1001 }), /list 1 to 1000 groups, not 1001/],
      [() => groupsArgs({ most: 3 }), /unknown option "most"/],
    ];
    for (const [f, message] of cases) assert.match(refusal(f), message);
  });

  it('reads the settings and the groups as the queue answers them', () => {
    assert.deepEqual(readConfig({}), {
      paused: false,
      concurrency: null,
      rateLimit: null,
      keepFinished: null,
      groupConcurrency: null,
      groupRateLimit: null,
      minReplicas: null,
      encrypt: false,
    });
    assert.deepEqual(
      readConfig([
        'paused', '1', 'group_concurrency', '2', 'group_rate_limit', '5', 'group_rate_interval_ms', '2000', 'rate_limit', '3',
        'min_replicas', '2', 'encrypt', '1',
      ]),
      {
        paused: true,
        concurrency: null,
        rateLimit: null,
        keepFinished: null,
        groupConcurrency: 2,
        groupRateLimit: { limit: 5, intervalMs: 2000 },
        minReplicas: 2,
        encrypt: true,
      },
    );
    assert.deepEqual(groupConfig(''), { concurrency: null, rateLimit: null, paused: false });
    assert.deepEqual(groupConfig('|||'), { concurrency: null, rateLimit: null, paused: false });
    assert.deepEqual(groupConfig('1|10|60000|1'), { concurrency: 1, rateLimit: { limit: 10, intervalMs: 60000 }, paused: true });
    assert.deepEqual(groupConfig('|5||'), { concurrency: null, rateLimit: null, paused: false }, 'a rate without its interval is none');
    assert.deepEqual(groupsOverview([3, 1, 2, [['big', 5, 1, '|2|1000|', 1700000000000], ['a', 1, 0, '', 0]]]), {
      groups: 3,
      truncated: true,
      ungroupedReady: 2,
      listed: [
        { group: 'big', ready: 5, running: 1, config: { concurrency: null, rateLimit: { limit: 2, intervalMs: 1000 }, paused: false }, rateLimitedUntil: new Date(1700000000000) },
        { group: 'a', ready: 1, running: 0, config: { concurrency: null, rateLimit: null, paused: false }, rateLimitedUntil: null },
      ],
    });
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
    assert.equal(enqueue.keys.length, 35);
    assert.equal(enqueue.keys[24], 'wg:{f}:reserved');
    assert.equal(enqueue.keys.at(-2), 'wg:{f}:expiring');
    assert.equal(enqueue.keys.at(-1), 'wg:{f}:checkpoints');
    // A job's checkpoint is read as its record is: read-only, on the function's keys.
    const checkpoint = protocol.callOn('checkpoint_get', 'f');
    assert.equal(checkpoint.command, 'FCALL_RO');
    assert.equal(checkpoint.name, 'wg2_checkpoint_get');
    assert.deepEqual(checkpoint.keys, ['wg:{f}:jobs', 'wg:{f}:checkpoints', 'wg:{f}:stats', 'wg:{f}:events']);
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

  it("reads a watched job's finish event as the Job get would give; null when it carries not all", () => {
    const { jobFrom, jobOfFinish } = require('../lib/job');
    // As the library publishes it (cjson: an empty list may come as {}).
    const record =
      '{"state":"succeeded","priority":0,"attempt":1,"max_attempts":3,"timeout_ms":1000,' +
      '"retention_ms":5000,"created_ms":1700000000000,"finished_ms":1700000000009,"tags":{},"after":{},' +
      '"history":[{"attempt":1,"worker":"w1","started_ms":1700000000001,"ended_ms":1700000000009,"outcome":"succeeded"}]}';
    const [event] = parseMessage(
      `{"event":"finish","id":"echo:7","state":"succeeded","record":${record},"output":"{\\"n\\":1}\\t\\r\\n"}`,
    );
    const job = jobOfFinish('echo:7', event);
    assert.deepEqual(job, jobFrom('echo:7', JSON.parse(record), Buffer.from('{"n":1}\t\r\n')));
    assert.deepEqual(job.tags, []);
    assert.equal(job.final, true);
    assert.equal(job.history[0].worker, 'w1');
    // An empty output is an output.
    assert.deepEqual(jobOfFinish('echo:7', { ...event, output: '' }).output, Buffer.alloc(0));
    // A failed job has no output.
    const failed = { event: 'finish', id: 'echo:7', state: 'failed', record: { state: 'failed', error: { class: 'x', message: 'y' } } };
    assert.equal(jobOfFinish('echo:7', failed).output, null);
    assert.deepEqual(jobOfFinish('echo:7', failed).error, { class: 'x', message: 'y' });
    // The output is omitted (read it), no record (a plain event), or not a record.
    const { output, ...withoutOutput } = event;
    assert.equal(output, '{"n":1}\t\r\n');
    assert.equal(jobOfFinish('echo:7', { ...withoutOutput, output_omitted: true }), null);
    assert.equal(jobOfFinish('echo:7', { event: 'finish', id: 'echo:7', state: 'succeeded' }), null);
    for (const bad of [null, 'text', 7, [1]]) {
      assert.equal(jobOfFinish('echo:7', { ...event, record: bad }), null, JSON.stringify(bad));
    }
  });

  it("reads a record's checkpoint as its size and when it was saved; null when it keeps none", () => {
    const { jobFrom, jobOfFinish } = require('../lib/job');
    const record = { state: 'failed', checkpoint: { bytes: 1, ms: 1700000000005 } };
    assert.deepEqual(jobFrom('resume:3', record, null).checkpoint, { bytes: 1, savedAt: new Date(1700000000005) });
    // A watched job's finish event carries it in its record.
    const finish = { event: 'finish', id: 'resume:3', state: 'failed', record };
    assert.deepEqual(jobOfFinish('resume:3', finish).checkpoint, { bytes: 1, savedAt: new Date(1700000000005) });
    for (const none of [undefined, null, {}, [], 'x', { bytes: 1 }, { ms: 1700000000005 }]) {
      assert.equal(jobFrom('resume:3', { state: 'failed', checkpoint: none }, null).checkpoint, null, JSON.stringify(none));
    }
    // The event of a saved checkpoint is read as any other, with its size.
    assert.deepEqual(parseMessage('{"event":"checkpoint","id":"resume:3","bytes":1}'), [
      { event: 'checkpoint', id: 'resume:3', bytes: 1 },
    ]);
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
      'addToBatch', 'batch', 'batchStatus', 'cancel', 'cancelFlow', 'checkpoint', 'close', 'closeBatch', 'config',
      'configure', 'configureGroup', 'constructor', 'enqueue', 'enqueueMany', 'events', 'flow', 'groups',
      'input', 'isCluster', 'logs', 'openBatch', 'queues', 'retry', 'retryFlow', 'status', 'submitFlow', 'wait',
      'waitFlow',
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
    const AbortError = Object.getPrototypeOf(MaxRetriesPerRequestError);
    for (const error of [new Error('Connection is closed.'), new Error('Command timed out'),
      new MaxRetriesPerRequestError(2), new AbortError('Command aborted due to connection close'),
      coded('ECONNRESET'), coded('ETIMEDOUT'),
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

describe('flow documents', () => {
  const {
    prepareFlow,
    checkFlow,
    readFlowDocument,
    placedOptions,
    writePlan,
    flowRecord,
    flowId,
    parseFlowRecord,
    flowStatus,
    compactJson,
  } = require('../lib/flow');

  /** tests/all/flows.rs `diamond_document()`: what every producer submits alike. */
  const diamond = () => ({
    name: 'diamond',
    jobs: {
      d: { function: 'join', after: ['c', { job: 'b', on_failure: 'ignore' }] },
      c: { function: 'reverse', input_json: { n: 2 }, after: ['a'] },
      b: { function: 'reverse', input: 'bb1', after: ['a'] },
      a: { function: 'reverse', input: 'aa0' },
    },
  });

  /** The refusal of `document`, as its message (throws if it is accepted). */
  const refusal = (document, maxInputBytes) => {
    try {
      prepareFlow(document, maxInputBytes);
    } catch (error) {
      assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
      assert.equal(error.exitCode, 2);
      return error.message;
    }
    assert.fail(`accepted ${JSON.stringify(document)}`);
  };

  it('reads the diamond: jobs by name, inputs, edges with their policies, dependencies first', () => {
    const { flow, order, named } = prepareFlow(diamond());
    assert.equal(flow.name, 'diamond');
    assert.deepEqual(flow.jobs.map((j) => [j.name, j.function]), [
      ['a', 'reverse'], ['b', 'reverse'], ['c', 'reverse'], ['d', 'join'],
    ]);
    assert.deepEqual(flow.jobs.map((j) => j.input.toString()), ['aa0', 'bb1', '{"n":2}', '']);
    assert.deepEqual(flow.jobs[3].after, [{ job: 'c', onFailure: 'cancel' }, { job: 'b', onFailure: 'ignore' }]);
    assert.deepEqual(order, [0, 1, 2, 3]);
    assert.deepEqual(named, [[], [], [], []]);
    // The same from its JSON text.
    assert.deepEqual(prepareFlow(JSON.stringify(diamond())).order, order);
  });

  it('orders every job after those it waits on, keeping the given order where it can', () => {
    const { flow, order } = prepareFlow({
      name: 'chain',
      jobs: {
        a: { function: 'f', after: ['z'] },
        b: { function: 'f' },
        m: { function: 'f', after: ['a', 'b'] },
        z: { function: 'f' },
      },
    });
    assert.deepEqual(order.map((i) => flow.jobs[i].name), ['b', 'z', 'a', 'm']);
  });

  it('refuses a bad graph with the Rust check\'s sentences', () => {
    const job = (fields = {}) => ({ function: 'reverse', ...fields });
    const big = { name: 'big', jobs: {} };
    for (let i = 0; i < 10001; i += 1) big.jobs[`j${i}`] = job();
    const deps = { name: 'deps', jobs: { a: job({ after: Array.from({ length: 10000 }, (_, i) => `x:${i + 1}`).concat('b') }), b: job() } };
    const cases = [
      [{ name: 'unknown', jobs: { a: job(), b: job({ function: 'join', after: ['nope'] }) } },
        'invalid job option: job "b" waits on "nope", which the flow does not have'],
      [{ name: 'cycle', jobs: { a: job({ after: ['c'] }), b: job({ function: 'join', after: ['a'] }), c: job({ after: ['b'] }) } },
        'invalid job option: the flow has a cycle: a → c → b → a (each waits on the next)'],
      [{ name: 'cycle', jobs: { x: job(), a: job({ after: ['x', 'b'] }), b: job({ after: [{ job: 'a', on_failure: 'continue' }] }) } },
        'invalid job option: the flow has a cycle: a → b → a (each waits on the next)'],
      [big, 'invalid job option: flow "big" has 10001 jobs, more than the 10000 a flow may have'],
      [{ name: 'uniq', jobs: { u: job({ uniq: 'k' }) } },
        'invalid job option: job "u": a flow\'s jobs are always new, so they take no uniq'],
      [{ name: 'once', jobs: { u: job({ once: 'k' }) } }, 'so they take no once'],
      [{ name: 'parent', jobs: { u: job({ parent: 'a:1' }) } }, 'so they take no parent'],
      [{ name: 'tick', jobs: { u: job({ schedule: 's', tick: 5 }) } }, "so they take no a schedule's tick"],
      [{ name: 'self', jobs: { a: job({ after: ['a'] }) } }, 'invalid job option: job "a" waits on itself'],
      [{ name: 'twice', jobs: { a: job({ after: ['b', { job: 'b', on_failure: 'ignore' }] }), b: job() } },
        'invalid job option: job "a" waits on "b" twice'],
      [{ name: '', jobs: { a: job() } },
        'invalid job option: the flow\'s name "" must be 1 to 200 bytes without control characters'],
      [{ name: 'x'.repeat(201), jobs: { a: job() } }, 'must be 1 to 200 bytes without control characters'],
      [{ name: 'tab\there', jobs: { a: job() } }, 'must be 1 to 200 bytes without control characters'],
      [{ name: 'empty', jobs: {} }, 'invalid job option: flow "empty" has no jobs'],
      [{ name: 'names', jobs: { 'a b': job() } },
        'invalid job option: job name "a b" must be 1 to 200 letters, digits, \'_\', \'-\' or \'.\''],
      [{ name: 'names', jobs: { ['n'.repeat(201)]: job() } }, 'must be 1 to 200 letters, digits'],
      [deps, 'invalid job option: job "a" has 10001 dependencies, more than the limit of 10000'],
      [{ name: 'big-input', jobs: { a: job({ input: 'x'.repeat(11) }) } },
        'invalid job option: job "a": input of 11 bytes is larger than the limit of 10 bytes'],
      [{ name: 'options', jobs: { a: job({ retention_ms: 5 }) } },
        'invalid job option: job "a": retention_ms 5 is out of range 1s..=10 years'],
      [{ name: 'options', jobs: { a: job({ delay_ms: 5, at_ms: 6 }) } },
        'invalid job option: job "a": give delay_ms or at_ms (a time to run at), not both'],
      [{ name: 'options', jobs: { a: job({ at_ms: 9e15 }) } }, 'job "a": at_ms (the time to run at) is more than 10 years ahead'],
      [{ name: 'options', jobs: { a: job({ priority: 1001 }) } }, 'job "a": priority 1001 is out of range -1000..=1000'],
      [{ name: 'options', jobs: { a: job({ tags: [''] }) } }, 'job "a": tag "" must be 1 to 200 bytes long'],
      [{ name: 'policy', jobs: { a: job({ after: [{ job: 'b', on_failure: 'maybe' }] }), b: job() } },
        'invalid job option: job "a": on_failure "maybe" is none of cancel, ignore and continue'],
      [{ name: 'id', jobs: { a: job({ after: ['x:y'] }) } }, 'job "a": after: "x:y" is not a job id'],
      [{ name: 'fn', jobs: { a: job({ function: 'a b' }) } }, 'job "a": invalid function name "a b"'],
      [{ name: 'input', jobs: { a: job({ input: 'x', input_json: {} }) } },
        'job "a": give one of input, input_base64 and input_json, not several'],
      [{ name: 'input', jobs: { a: job({ input_base64: 'aGk' }) } }, 'job "a": input_base64 is not base64'],
      [{ name: 'read', jobs: { a: job({ delayMs: 5 }) } },
        'the flow does not read: jobs.a: unknown field "delayMs", expected one of function,'],
      [{ name: 'read', jobs: { a: job({ after: [{ job: 'b', onFailure: 'ignore' }] }), b: job() } },
        'the flow does not read: jobs.a.after[0]: unknown field "onFailure", expected one of job, on_failure'],
      [{ name: 'read', jobs: { a: job({ priority: 'high' }) } }, 'the flow does not read: jobs.a.priority:'],
      [{ name: 'read', jobs: { a: job({ timeout_ms: -1 }) } }, 'the flow does not read: jobs.a.timeout_ms:'],
      [{ name: 'read', jobs: { a: { input: 'x' } } }, 'the flow does not read: jobs.a: missing field "function"'],
      [{ jobs: {} }, 'the flow does not read: missing field "name"'],
      [{ name: 'x', jobs: [] }, 'the flow does not read: jobs: must be an object'],
      [{ name: 'x', jobs: {}, extra: 1 }, 'the flow does not read: unknown field "extra"'],
      ['{"name": ', 'the flow does not read: '],
      [null, 'the flow does not read: a flow is an object'],
    ];
    for (const [document, expected] of cases) {
      const message = refusal(document, 10);
      assert.ok(message.includes(expected), `${message}\n(expected ${expected})`);
    }
    // A job named twice can only come from a flow made by hand (a document's names are keys).
    const flow = readFlowDocument({ name: 'twice', jobs: { a: job() } });
    flow.jobs.push({ ...flow.jobs[0] });
    assert.throws(() => checkFlow(flow, 10), { message: 'invalid job option: job "a" is named twice' });
  });

  it('sends each job with its edges, its reserved number and the flow, and records the flow as Rust does', () => {
    const { flow, order, named } = prepareFlow({
      name: 'placed',
      jobs: {
        a: { function: 'reverse', priority: 3, delay_ms: 10, after: ['other:9', { job: 'other:8', on_failure: 'continue' }] },
        b: { function: 'join', after: ['a', { job: 'c', on_failure: 'ignore' }] },
        c: { function: 'fail', tags: ['t'] },
      },
    });
    const ids = ['reverse:5', 'join:1', 'fail:12'];
    const position = new Map(flow.jobs.map((job, i) => [job.name, i]));
    assert.deepEqual(placedOptions(flow, 0, named[0], ids, position, 7), [
      'priority', '3', 'delay', '10', 'after', 'other:9', 'after', 'other:8', 'after_continue', 'other:8',
      'number', '5', 'flow', '7',
    ]);
    assert.deepEqual(placedOptions(flow, 1, named[1], ids, position, 7), [
      'after', 'reverse:5', 'after', 'fail:12', 'after_ignore', 'fail:12', 'number', '1', 'flow', '7',
    ]);
    assert.deepEqual(placedOptions(flow, 2, named[2], ids, position, 7), ['tag', 't', 'number', '12', 'flow', '7']);
    assert.deepEqual(order, [0, 2, 1]);
    assert.equal(
      flowRecord(flow, order, ids),
      '{"name":"placed","jobs":[{"name":"a","id":"reverse:5"},{"name":"c","id":"fail:12"},' +
        '{"name":"b","id":"join:1","after":[{"job":"a","on_failure":"cancel"},{"job":"c","on_failure":"ignore"}]}]}',
    );
  });

  it('writes a dependent\'s function before its dependencies\' and names the dependents on them, as Rust', () => {
    /** A checked flow of jobs `[name, function, after]` (ids `FUNCTION:POSITION+1`), and its plan. */
    const plan = (jobs) => {
      const { flow } = prepareFlow({
        name: 'order',
        jobs: Object.fromEntries(jobs.map(([name, fn, after]) => [name, { function: fn, after }])),
      });
      const ids = flow.jobs.map((job, i) => `${job.function}:${i + 1}`);
      const position = new Map(flow.jobs.map((job, i) => [job.name, i]));
      const byName = (list) => Object.fromEntries(flow.jobs.map((job, i) => [job.name, list[i]]));
      return { ids: byName(ids), ...writePlan(flow, ids, position), byName };
    };
    // crates/client/src/flow/ops.rs, dependents_functions_are_written_first: functions with
    // no edge between them go together.
    const etl = plan([
      ['fetch', 'fetch'],
      ['other', 'other'],
      ['transform', 'transform', ['fetch']],
      ['load', 'load', ['transform', 'fetch']],
    ]);
    assert.deepEqual(etl.layers, [['load', 'other'], ['transform'], ['fetch']]);
    assert.deepEqual(etl.byName(etl.dependents), {
      fetch: [etl.ids.load, etl.ids.transform],
      load: [],
      other: [],
      transform: [etl.ids.load],
    });
    assert.equal(etl.preset.size, 3);
    // functions_waiting_on_each_other_are_written_one_at_a_time: `a` before `b` (by bytes),
    // so b1 names a2, and a1 → b1 is left to link.
    const pingPong = plan([
      ['a1', 'a'],
      ['b1', 'b', ['a1']],
      ['a2', 'a', ['b1']],
      ['c', 'c', ['a2']],
    ]);
    assert.deepEqual(pingPong.layers, [['c'], ['a'], ['b']]);
    assert.deepEqual(pingPong.byName(pingPong.dependents), { a1: [], a2: [pingPong.ids.c], b1: [pingPong.ids.a2], c: [] });
    assert.deepEqual(
      [...pingPong.preset].sort(),
      [`${pingPong.ids.a2} ${pingPong.ids.b1}`, `${pingPong.ids.c} ${pingPong.ids.a2}`].sort(),
    );
    // The dependents go as the repeating option `dependent`, before the number.
    const { flow, named } = prepareFlow({ name: 'fan-in', jobs: { a: { function: 'f' }, z: { function: 'g', after: ['a'] } } });
    const position = new Map(flow.jobs.map((job, i) => [job.name, i]));
    assert.deepEqual(placedOptions(flow, 0, named[0], ['f:1', 'g:1'], position, 3, ['g:1', 'h:2']), [
      'dependent', 'g:1', 'dependent', 'h:2', 'number', '1', 'flow', '3',
    ]);
  });

  it('writes input_json as serde_json does: compact, object keys in byte order', () => {
    assert.equal(compactJson({ b: 1, a: [{ d: 1, c: 'é' }, null], 10: true, 9: 2 }), '{"10":true,"9":2,"a":[{"c":"é","d":1},null],"b":1}');
    assert.equal(compactJson('text'), '"text"');
    const { flow } = prepareFlow({ name: 'x', jobs: { a: { function: 'f', input_base64: ' aGk= ' }, b: { function: 'f', input: Buffer.from([0, 255]) } } });
    assert.deepEqual(flow.jobs.map((j) => j.input), [Buffer.from('hi'), Buffer.from([0, 255])]);
  });

  it('reads a flow id, a record and the status made of it', () => {
    assert.equal(flowId(7), '7');
    assert.equal(flowId('007'), '7');
    for (const bad of [0, -1, 1.5, '', 'x', '0', null, '18446744073709551616']) {
      assert.throws(() => flowId(bad), (error) => error instanceof BadInputError && /invalid flow id/.test(error.message), String(bad));
    }
    const raw = '1700000000000|{"name":"d","jobs":[{"name":"a","id":"reverse:1"},{"name":"b","id":"reverse:2","after":[{"job":"a","on_failure":"cancel"}]},' +
      '{"name":"c","id":"fail:1","after":[{"job":"a"}]},{"name":"d","id":"join:1","after":[{"job":"b","on_failure":"ignore"},{"job":"c","on_failure":"continue"}]}]}';
    const record = parseFlowRecord('3', raw);
    assert.equal(record.createdMs, 1700000000000);
    assert.deepEqual(record.jobs[2].after, [{ job: 'a', onFailure: 'cancel' }]);
    const status = flowStatus('3', record, [
      ['succeeded', 3, null], ['missing', 0, null], ['failed', 0, 'failed on purpose'], ['waiting', 0, null],
    ]);
    assert.equal(status.id, 3);
    assert.equal(status.name, 'd');
    assert.deepEqual(status.createdAt, new Date(1700000000000));
    assert.deepEqual(status.counts, { waiting: 1, succeeded: 1, failed: 1, missing: 1 });
    assert.deepEqual(Object.keys(status.counts), ['waiting', 'succeeded', 'failed', 'missing']);
    assert.deepEqual(status.sinks, ['d']);
    assert.equal(status.ended, false);
    assert.deepEqual(status.jobs[0], { name: 'a', id: 'reverse:1', after: [], state: 'succeeded', outputBytes: 3, error: null });
    assert.equal(status.jobs[2].error, 'failed on purpose');
    const done = flowStatus('3', record, record.jobs.map(() => ['cancelled', 0, 'stop']));
    assert.equal(done.ended, true);
    const expired = flowStatus('3', record, [
      ['expired', 0, 'late'], ['cancelled', 0, 'x'], ['succeeded', 0, null], ['failed', 0, 'y'],
    ]);
    assert.equal(expired.ended, true);
    assert.deepEqual(Object.keys(expired.counts), ['succeeded', 'failed', 'cancelled', 'expired']);
    for (const corrupt of ['no bar', 'x|{}', '1|{"name":"d"}', '1|{"name":"d","jobs":[{"name":"a","id":"nope"}]}']) {
      assert.throws(() => parseFlowRecord('3', corrupt), /flow 3 has a corrupt record/, corrupt);
    }
  });
});

describe('batches', () => {
  const {
    BATCHES_DUE_KEY,
    batchKeys,
    batchId,
    batchDefinition,
    batchJobs,
    parseBatch,
    callbackInput,
  } = require('../lib/batch');

  /** The refusal of `call` (throws if it is accepted): its message. */
  const refusal = (call, what = BadInputError) => {
    try {
      call();
    } catch (error) {
      assert.ok(error instanceof what, `${error.name}: ${error.message}`);
      assert.equal(error.exitCode, 2);
      return error.message;
    }
    assert.fail('accepted');
  };

  it("keys: the Rust client's BatchKeys, in the order the batch functions take them", () => {
    assert.deepEqual(batchKeys('ab12'), ['wg:{batch:ab12}:state', 'wg:{batch:ab12}:members', 'wg:{batch:ab12}:ended']);
    assert.equal(BATCHES_DUE_KEY, 'wg:{batches}:due');
    assert.equal(batchId('0123456789abcdefABCDEF0123456789'), '0123456789abcdefABCDEF0123456789');
    for (const bad of ['', 'xyz', 'ab-12', 'a'.repeat(33), 12, null, undefined, 'batch ab']) {
      assert.match(refusal(() => batchId(bad)), /^invalid batch id .*: a batch id is 1 to 32 hex digits$/, String(bad));
    }
  });

  it("writes the definition as the Rust client's BatchSpec: name, callbacks, data's keys in byte order", () => {
    assert.equal(batchDefinition(undefined), '{"name":""}');
    assert.equal(batchDefinition({ name: 'n', onSuccess: null, onComplete: undefined }), '{"name":"n"}');
    assert.equal(
      batchDefinition({
        onComplete: { function: 'on_done' },
        name: 'nightly',
        onSuccess: { data: { note: 'x', b: [1, { d: 2, c: null }] }, function: 'on_ok' },
      }),
      '{"name":"nightly","on_success":{"function":"on_ok","data":{"b":[1,{"c":null,"d":2}],"note":"x"}},' +
        '"on_complete":{"function":"on_done"}}',
    );
    assert.equal(batchDefinition({ onComplete: { function: 'f', data: null } }), '{"name":"","on_complete":{"function":"f"}}');
    const cases = [
      [[], /^invalid batch option: the options must be an object/],
      ['name', /^invalid batch option: the options must be an object/],
      [{ on_success: { function: 'f' } }, /unknown option "on_success" \(known: name, onSuccess, onComplete\)/],
      [{ name: 7 }, /name must be a string/],
      [{ onSuccess: 'f' }, /onSuccess must be an object \{function, data\?\}/],
      [{ onComplete: {} }, /^invalid batch option: onComplete: invalid function name undefined/],
      [{ onComplete: { function: 'bad name' } }, /onComplete: invalid function name "bad name"/],
      [{ onSuccess: { function: 'f', input: 'x' } }, /onSuccess: unknown field "input" \(known: function, data\)/],
      [{ onSuccess: { function: 'f', data: 1n } }, /onSuccess: data does not write as JSON/],
      [{ name: 'x'.repeat(65536) }, /definition .* is 65547 bytes of JSON, more than the 65536 it may have/],
    ];
    for (const [options, message] of cases) {
      assert.match(refusal(() => batchDefinition(options)), message, String(message));
    }
  });

  it('checks every job before anything is written, naming it; options as enqueue sends them', () => {
    const jobs = batchJobs([
      { function: 'echo', input: 'a' },
      { function: 'fail', input: Buffer.from([0, 1]), options: { attempts: 1, priority: 'high', after: ['echo:3'] } },
      { function: 'echo' },
    ]);
    assert.deepEqual(jobs.map((j) => j.fn), ['echo', 'fail', 'echo']);
    assert.deepEqual(jobs.map((j) => j.input), [Buffer.from('a'), Buffer.from([0, 1]), Buffer.alloc(0)]);
    assert.deepEqual(jobs[1].named, ['priority', '10', 'attempts', '1', 'after', 'echo:3']);
    assert.deepEqual(jobs[1].after.map((d) => [d.id, d.onFailure]), [['echo:3', 'cancel']]);
    assert.deepEqual(batchJobs([]), []);
    const cases = [
      [undefined, /^invalid batch jobs: give an array of \{function, input, options\} objects$/],
      [{ function: 'echo' }, /give an array/],
      [['echo'], /^invalid batch jobs: job 1 is not an object/],
      [[{ function: 'echo' }, { function: 'echo', priority: 3 }], /job 2: unknown field "priority" .*options such as priority go in options/],
      [[{ function: 'bad name' }], /^job 1 of the batch: invalid function name "bad name"/],
      [[{ function: 'echo', input: 5 }], /^job 1 of the batch: invalid input: give a Buffer or a string/],
      [[{ function: 'echo' }, { function: 'echo', options: { priority: 5000 } }], /^job 2 of the batch: invalid job option: priority 5000 is out of range/],
      [[{ function: 'echo', options: { uniq: 'k' } }], /^job 1 of the batch: invalid job option: a batch's jobs are always new, so they take no uniq$/],
      [[{ function: 'echo', options: { prio: 1 } }], /job 1 of the batch: invalid job option: unknown option "prio"/],
      [[{ function: 'echo', options: 'x' }], /job 1 of the batch: invalid job option: the options must be an object/],
    ];
    for (const [given, message] of cases) assert.match(refusal(() => batchJobs(given)), message, JSON.stringify(given));
    assert.match(refusal(() => batchJobs([{ function: 'echo', input: 'toolong' }], 3)), /7 bytes are larger than the limit of 3 bytes/);
    const far = new Date(Date.now() + LIMITS.MAX_DURATION_MS + 86400000);
    assert.match(refusal(() => batchJobs([{ function: 'echo', options: { at: far } }]), ConflictError), /^job 1 of the batch: .*more than 10 years ahead/);
    const many = new Array(LIMITS.MAX_BATCH_JOBS + 1).fill({ function: 'echo' });
    assert.equal(LIMITS.MAX_BATCH_JOBS, 100000);
    assert.match(refusal(() => batchJobs(many)), /100001 jobs are more than the 100000 a batch may have/);
  });

  it("reads a batch's status from batch_get, and writes a callback's input as the Rust client does", () => {
    assert.equal(parseBatch('ab', [[], [], []]), null);
    const def = '{"name":"nightly","on_success":{"function":"on_ok","data":{"note":"x"}},"on_complete":{"function":"on_done"}}';
    const reply = [
      ['def', def, 'open', '0', 'total', '5', 'succeeded', '2', 'failed', '1', 'cancelled', '1',
        'created_ms', '1700000000000', 'added_ms', '1700000000001', 'closed_ms', '1700000000002', 'complete', 'due'],
      ['fail:3', 'failed', 'echo:9', 'cancelled'],
      [],
    ];
    const { status, definition } = parseBatch('ab', reply);
    assert.deepEqual(status, {
      id: 'ab',
      name: 'nightly',
      open: false,
      total: 5,
      pending: 1,
      succeeded: 2,
      failed: 1,
      cancelled: 1,
      failedIds: ['fail:3'],
      cancelledIds: ['echo:9'],
      onSuccess: null,
      onComplete: 'due',
      createdAt: new Date(1700000000000),
      endedAt: null,
    });
    assert.deepEqual(definition.on_success, { function: 'on_ok', data: { note: 'x' } });
    assert.equal(
      callbackInput(status, 'success', definition.on_success).toString(),
      '{"batch":"ab","callback":"success","cancelled":1,"cancelled_ids":["echo:9"],"data":{"note":"x"},' +
        '"failed":1,"failed_ids":["fail:3"],"name":"nightly","succeeded":2,"total":5}',
    );
    assert.match(callbackInput(status, 'complete', definition.on_complete).toString(), /"data":null/);
    const ended = parseBatch('ab', [['def', 'not json', 'open', '1', 'ended_ms', '5', 'success', 'on_ok:1'], [], []]).status;
    assert.deepEqual([ended.name, ended.open, ended.total, ended.endedAt, ended.onSuccess], ['', true, 0, new Date(5), 'on_ok:1']);
  });
});

describe('Redis Sentinel URLs', () => {
  const { parseSentinelUrl, DEFAULT_SENTINEL_PORT } = require('../lib/sentinel');
  const { redact } = require('../lib/client');
  const { Client } = require('..');

  const EXPECTED =
    '(expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE' +
    '[?db=N&sentinel_user=U&sentinel_password=P], or rediss+sentinel:// for TLS)';

  it('reads the sentinels, the service, the database, TLS and both sets of credentials', () => {
    assert.equal(parseSentinelUrl('redis://127.0.0.1:6379'), null);
    assert.equal(DEFAULT_SENTINEL_PORT, 26379);
    assert.deepEqual(parseSentinelUrl('redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2,[::1]:5000/jobs?db=2'), {
      sentinels: [
        { host: '10.0.0.1', port: 26379 },
        { host: '10.0.0.2', port: 26379 },
        { host: '::1', port: 5000 },
      ],
      service: 'jobs',
      db: 2,
      tls: false,
      username: undefined,
      password: 's3cret',
      sentinelUsername: undefined,
      sentinelPassword: undefined,
    });
    const tls = parseSentinelUrl('rediss+sentinel://app:p%3Ass@h:1/s/?sentinel_user=watch&sentinel_password=p%40ss%20word+2');
    assert.equal(tls.tls, true);
    assert.equal(tls.service, 's');
    assert.deepEqual([tls.username, tls.password], ['app', 'p:ss']);
    assert.deepEqual([tls.sentinelUsername, tls.sentinelPassword], ['watch', 'p@ss word 2']);
    assert.deepEqual(parseSentinelUrl('redis+sentinel://[::1]/s').sentinels, [{ host: '::1', port: 26379 }]);
  });

  it('refuses a URL that does not parse, saying why as the Rust client does, passwords hidden', () => {
    for (const [url, reason] of [
      ['redis+sentinel://h:1', 'the path must be the name the sentinels know the set by (/SERVICE, as in `sentinel monitor SERVICE HOST PORT QUORUM`)'],
      ['redis+sentinel://h:1/', 'the path must be the name the sentinels know the set by (/SERVICE'],
      ['redis+sentinel://h:1/a/b', 'the path must be the name the sentinels know the set by (/SERVICE'],
      ['redis+sentinel://h:x/s', '"h:x" is not a sentinel address (HOST:PORT)'],
      ['redis+sentinel://h:0/s', '"h:0" is not a sentinel address (HOST:PORT)'],
      ['redis+sentinel://h:65536/s', '"h:65536" is not a sentinel address (HOST:PORT)'],
      ['redis+sentinel://h:1,,h:2/s', '"" is not a sentinel address (HOST:PORT)'],
      ['redis+sentinel:///s', '"" is not a sentinel address (HOST:PORT)'],
      ['redis+sentinel://[::1/s', '"[::1" is not a sentinel address (HOST:PORT)'],
      ['redis+sentinel://h:1/s?db=-1', 'db must be a whole number >= 0, not "-1"'],
      ['redis+sentinel://h:1/s?db=x', 'db must be a whole number >= 0, not "x"'],
      ['redis+sentinel://h:1/s?master=x', 'unknown parameter "master" (known: db, sentinel_user, sentinel_password)'],
    ]) {
      assert.throws(() => parseSentinelUrl(url), (error) => {
        assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
        assert.equal(error.exitCode, 2);
        assert.ok(error.message.startsWith(`invalid Redis Sentinel URL ${JSON.stringify(url)}: ${reason}`), error.message);
        assert.ok(error.message.endsWith(EXPECTED), error.message);
        return true;
      }, url);
    }
    assert.throws(
      () => parseSentinelUrl('redis+sentinel://app:pw@h:1/s?sentinel_password=zz&db=-2'),
      (error) => {
        assert.equal(
          error.message,
          'invalid Redis Sentinel URL "redis+sentinel://app:***@h:1/s?sentinel_password=***&db=-2": ' +
            `db must be a whole number >= 0, not "-2" ${EXPECTED}`,
        );
        return true;
      },
    );
  });

  it('hides the passwords wherever the URL is shown', () => {
    assert.equal(
      redact('redis+sentinel://:pw@h1:1,h2:2/jobs?db=1&sentinel_password=x'),
      'redis+sentinel://:***@h1:1,h2:2/jobs?db=1&sentinel_password=***',
    );
    assert.equal(redact('rediss+sentinel://app:pw@h1/jobs'), 'rediss+sentinel://app:***@h1/jobs');
    assert.equal(redact('redis+sentinel://token@h1/jobs'), 'redis+sentinel://***@h1/jobs');
    assert.equal(redact('redis+sentinel://:p/w@h1/jobs'), 'redis+sentinel://:***@h1/jobs');
    assert.equal(redact('redis+sentinel://h1:1/jobs'), 'redis+sentinel://h1:1/jobs');
    assert.equal(redact('redis://:s3cret@host:1/2'), 'redis://:***@host:1/2');
    assert.equal(redact('redis://127.0.0.1:6379/0'), 'redis://127.0.0.1:6379/0');
  });

  it('Client.connect refuses a bad sentinel URL and options before connecting', async () => {
    // Nothing listens on port 1: refused before any connection is tried (BadInputError, not unreachable).
    await assert.rejects(Client.connect('redis+sentinel://:secret@127.0.0.1:1/svc?master=1'), (error) => {
      assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
      assert.match(error.message, /^invalid Redis Sentinel URL "redis\+sentinel:\/\/:\*\*\*@127\.0\.0\.1:1\/svc\?master=1": unknown parameter "master"/);
      assert.ok(!error.message.includes('secret'));
      return true;
    });
    await assert.rejects(
      Client.connect('redis+sentinel://127.0.0.1:1/svc', { cluster: true }),
      /^BadInputError: invalid connect option cluster: a redis\+sentinel:\/\/ URL names a replicated set, not a Redis Cluster$/,
    );
    await assert.rejects(
      Client.connect('redis+sentinel://127.0.0.1:1/svc', { tls: {} }),
      /invalid connect option tls: it needs a rediss:\/\/ \(or rediss\+sentinel:\/\/\) URL/,
    );
    await assert.rejects(Client.connect('redis+sentinal://127.0.0.1:1/svc'), /invalid Redis URL .*redis\+sentinel:\/\//);
  });
});

describe('replicas (minReplicas)', () => {
  const { minReplicasOf, enqueueSetting, enqueueWhat, invokeConfirmed, CONFIRM_ATTEMPTS } = require('../lib/replication');
  const { Client, NotReplicatedError, WasmgearError } = require('..');

  it('checks minReplicas (0..16) and its timeout (>= 1 ms, under the command timeout) before connecting', async () => {
    assert.deepEqual({ ...minReplicasOf(undefined, undefined) }, { count: 0, timeoutMs: LIMITS.MIN_REPLICAS_TIMEOUT_MS });
    assert.equal(LIMITS.MIN_REPLICAS_TIMEOUT_MS, 1000);
    assert.equal(LIMITS.MAX_MIN_REPLICAS, 16);
    assert.deepEqual({ ...minReplicasOf(16, 1) }, { count: 16, timeoutMs: 1 });
    // The default, under a shorter command timeout: just under it.
    assert.deepEqual({ ...minReplicasOf(1, undefined, 100) }, { count: 1, timeoutMs: 99 });
    assert.deepEqual({ ...minReplicasOf(0, null, 1) }, { count: 0, timeoutMs: 1 });
    for (const [opts, message] of [
      [{ minReplicas: 17 }, /^invalid connect option minReplicas: 17 is not a whole number 0 to 16 /],
      [{ minReplicas: -1 }, /minReplicas: -1 is not a whole number 0 to 16/],
      [{ minReplicas: 1.5 }, /minReplicas: 1.5 is not a whole number 0 to 16/],
      [{ minReplicas: '1' }, /minReplicas: "1" is not a whole number 0 to 16/],
      [{ minReplicasTimeoutMs: 0 }, /^invalid connect option minReplicasTimeoutMs: 0 is not a whole number of ms >= 1 \(WAIT with 0 waits forever\)$/],
      [{ minReplicasTimeoutMs: 2.5 }, /minReplicasTimeoutMs: 2.5 is not a whole number of ms >= 1/],
      [{ minReplicasTimeoutMs: 10000 }, /minReplicasTimeoutMs: 10000 ms is not less than the command timeout \(10000 ms\)/],
      [{ minReplicasTimeoutMs: 600, commandTimeoutMs: 500 }, /600 ms is not less than the command timeout \(500 ms\)/],
      [{ minReplica: 1 }, /unknown connect option "minReplica" \(known: .*minReplicas, minReplicasTimeoutMs, encryptionKeyFile, encryptAll\)/],
    ]) {
      // Nothing listens on port 1: refused before any connection is tried.
      await assert.rejects(Client.connect('redis://127.0.0.1:1', opts), (error) => {
        assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
        assert.match(error.message, message);
        return true;
      }, JSON.stringify(opts));
    }
  });

  it('reads the function setting from the enqueue reply, and names the write', () => {
    assert.equal(enqueueSetting([[1], '1', [], 2]), 2);
    assert.equal(enqueueSetting([[1], '1', [], 0]), 0);
    assert.equal(enqueueSetting([[1], '1', []]), 0, 'a library without the setting');
    assert.equal(enqueueWhat('echo', 1), 'the enqueue of a job of echo');
    assert.equal(enqueueWhat('echo', 3), 'the enqueue of 3 jobs of echo');
  });

  /**
   * A write whose WAITs answer `answers` in turn and whose function asks for `setting`:
   * what `invokeConfirmed` made of it, and the sends (`plain`, or the replicas a WAIT asked for).
   */
  const confirm = async (count, setting, answers) => {
    const sends = [];
    const reply = ['numbers', 'created', [], setting];
    const result = invokeConfirmed(
      () => 'the enqueue of a job of f',
      { count, timeoutMs: 200 },
      async () => {
        sends.push('plain');
        return reply;
      },
      async (wanted, timeoutMs) => {
        assert.equal(timeoutMs, 200);
        sends.push(wanted);
        return [reply, answers.shift()];
      },
      enqueueSetting,
    ).then((value) => ({ value }), (error) => ({ error }));
    return { ...(await result), sends };
  };

  it('sends the write with its WAIT, again while the replicas fall short, 3 sends in all', async () => {
    assert.equal(CONFIRM_ATTEMPTS, 3);
    // Nothing asked: one plain send.
    assert.deepEqual((await confirm(0, 0, [])).sends, ['plain']);
    // Confirmed at once.
    const once = await confirm(1, 0, [1]);
    assert.deepEqual([once.sends, once.value[3]], [[1], 0]);
    // Short once, then confirmed: the same call sent again.
    assert.deepEqual((await confirm(2, 0, [1, 2])).sends, [2, 2]);
    // The function asks for more than the client: sent again, asking for that.
    assert.deepEqual((await confirm(1, 2, [1, 2])).sends, [1, 2]);
    // The client asks for none, the function for 1: sent again with its WAIT.
    assert.deepEqual((await confirm(0, 1, [1])).sends, ['plain', 1]);
    // Short every time: NotReplicatedError after 3 sends.
    const short = await confirm(2, 0, [1, 0, 1]);
    assert.deepEqual(short.sends, [2, 2, 2]);
    assert.ok(short.error instanceof NotReplicatedError);
    assert.ok(short.error instanceof WasmgearError);
    assert.equal(short.error.exitCode, 6);
    assert.deepEqual(
      [short.error.what, short.error.wanted, short.error.confirmed, short.error.timeoutMs],
      ['the enqueue of a job of f', 2, 1, 200],
    );
    assert.equal(
      short.error.message,
      'the enqueue of a job of f was written to the Redis primary, but only 1 of the 2 replicas asked for ' +
        'confirmed it within 200 ms, even when sent again: if the primary fails now it may be lost. ' +
        'Check the replicas (INFO replication on the primary); the write is safe to send again ' +
        '(enqueue with a uniq key to be sure of one copy)',
    );
    // The function's setting alone, never met: the plain send counts among the 3.
    const unmet = await confirm(0, 1, [0, 0]);
    assert.deepEqual(unmet.sends, ['plain', 1, 1]);
    assert.deepEqual([unmet.error.wanted, unmet.error.confirmed], [1, 0]);
  });
});
