'use strict';

// Redis Sentinel: a primary, one replica and one sentinel (real processes on free ports).
// The client connects with redis+sentinel://, loads the library on the primary the
// sentinel names, enqueues and reads; after a failover (SENTINEL FAILOVER) the same client
// enqueues on the new primary, a wait begun before it hears the job's end there, and event
// streams subscribe there; a library missing on the new primary is loaded again. Sentinels
// that cannot be reached, or that do not know the service, give a clear error.

const { describe, it, before, after } = require('node:test');
const assert = require('node:assert/strict');
const Redis = require('ioredis');

const { Client, UnreachableError, BadInputError, JobCancelledError } = require('..');
const {
  startRedis,
  startReplica,
  startSentinel,
  replicasConnected,
  caughtUp,
  freePort,
  until,
  ask,
} = require('../test-support/harness');
const manifest = require('../protocol/manifest.json');

const SERVICE = 'svc';
const FN = 'sentinel-fn';

describe('wasmgear client behind Redis Sentinel', { timeout: 90000 }, () => {
  let primary;
  let replica;
  let sentinel;
  let client;
  let sentinelUrl;

  /** Whether the node at `url` holds job `id`. */
  const holds = async (url, id) => {
    const [fn, number] = id.split(':');
    return (await ask(url, 'HEXISTS', `wg:{${fn}}:jobs`, number)) === 1;
  };
  /** The subscribers of `FN`'s events channel on the node at `url`. */
  const subscribers = async (url) => Number((await ask(url, 'PUBSUB', 'NUMSUB', `wg:{${FN}}:events`))[1]);
  /** The port of the primary the sentinel names. */
  const namedPort = async () => Number((await ask(sentinel.url, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SERVICE))[1]);

  before(async () => {
    // Either may be the primary when the test ends: no full sync delayed for more replicas
    // (5 s by default), no shutdown waiting for the replicas to catch up (10 s).
    const quick = ['--repl-diskless-sync-delay', '0', '--shutdown-timeout', '0'];
    primary = await startRedis(quick);
    replica = await startReplica(primary.port, quick);
    await replicasConnected(primary.url, 1);
    sentinel = await startSentinel(primary.port, SERVICE);
    // The sentinel learns of the replica from the primary's INFO: a failover needs it.
    await until(
      'the sentinel to know the replica, in sync',
      async () => {
        const replicas = await ask(sentinel.url, 'SENTINEL', 'REPLICAS', SERVICE);
        return replicas.some((fields) => {
          const info = {};
          for (let i = 0; i + 1 < fields.length; i += 2) info[fields[i]] = fields[i + 1];
          return Number(info.port) === replica.port && info.flags === 'slave' && info['master-link-status'] === 'ok';
        });
      },
      { timeoutMs: 15000, everyMs: 100 },
    );
    sentinelUrl = `redis+sentinel://127.0.0.1:${sentinel.port}/${SERVICE}`;
  });

  after(async () => {
    if (client) await client.close();
    if (sentinel) await sentinel.stop();
    if (replica) await replica.stop();
    if (primary) await primary.stop();
  });

  it('connects through the sentinel, loads the library on the primary, enqueues and reads', async () => {
    client = await Client.connect(sentinelUrl);
    assert.equal(client.isCluster, false);
    assert.equal(await ask(primary.url, 'FCALL', 'wg2_version', '0'), manifest.version);
    const { id, created } = await client.enqueue(FN, 'before the failover');
    assert.equal(created, true);
    assert.equal((await client.status(id)).state, 'queued');
    assert.equal(await holds(primary.url, id), true);
  });

  it('follows the primary through a failover: enqueues, waits and hears events on the new one', async () => {
    // Nobody serves FN: the job waits until the test cancels it, after the failover.
    const first = await client.enqueue(FN, 'waited on across the failover');
    const waiting = client.wait(first.id, { timeoutMs: 30000 });
    waiting.catch(() => {});
    await until('the wait to subscribe on the primary', async () => (await subscribers(primary.url)) === 1, {
      timeoutMs: 10000,
    });

    // Everything written so far is on the replica that is promoted. Redis replicates
    // asynchronously: a failover forced before the replica has the waited job loses it, and
    // the wait then rightly ends with NotFoundError (minReplicas is the guard against that
    // in production; the replication tests cover it).
    await until('the replica to confirm the writes', () => caughtUp(primary.url), { timeoutMs: 10000 });
    assert.equal(await holds(replica.url, first.id), true, 'the waited job is on the replica');
    await until(
      'the sentinel to start the failover',
      async () => {
        try {
          return (await ask(sentinel.url, 'SENTINEL', 'FAILOVER', SERVICE)) === 'OK';
        } catch (error) {
          // The replica's state not known well enough yet (NOGOODSLAVE): ask again.
          if (/NOGOODSLAVE/.test(error.message)) return false;
          throw error;
        }
      },
      { timeoutMs: 10000, everyMs: 200 },
    );
    await until('the sentinel to name the replica', async () => (await namedPort()) === replica.port, {
      timeoutMs: 15000,
      everyMs: 100,
    });
    assert.equal(await ask(replica.url, 'ROLE').then((role) => role[0]), 'master');
    // Until the sentinel turns the old primary into a replica (some seconds after the
    // switch), it still takes writes, and loses them then: a client that wrote there in
    // the instant before it heard of the switch would lose that job (Redis replicates
    // asynchronously; minReplicas is the guard against it). Checked once it is a replica.
    await until('the old primary to be a replica', async () => (await ask(primary.url, 'ROLE'))[0] === 'slave', {
      timeoutMs: 20000,
      everyMs: 100,
    });

    // The same client, within a few seconds: only the first call after the switch may meet
    // the connection closed or the old primary turned replica (READONLY), and is sent again.
    const deadline = Date.now() + 10000;
    let second;
    for (;;) {
      try {
        second = await client.enqueue(FN, 'after the failover');
        break;
      } catch (error) {
        const passing = error instanceof UnreachableError || /READONLY/.test(error.message);
        if (!passing || Date.now() > deadline) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    assert.equal(second.created, true);
    assert.equal(await holds(replica.url, second.id), true, 'the job is on the new primary');
    assert.equal((await client.status(second.id)).state, 'queued');

    // The wait begun before the failover subscribes again on the new primary, and hears
    // the job's end there.
    await until('the wait to subscribe on the new primary', async () => (await subscribers(replica.url)) === 1, {
      timeoutMs: 15000,
    });
    const events = client.events(FN);
    assert.equal(await events.ready, true);
    const third = await client.enqueue(FN, 'heard');
    assert.deepEqual((await events.next()).value, { function: FN, event: 'create', id: third.id });
    events.close();
    assert.deepEqual(await client.cancel(first.id), { outcome: 'cancelled', state: 'cancelled' });
    await assert.rejects(waiting, (error) => {
      assert.ok(error instanceof JobCancelledError, `${error.name}: ${error.message}`);
      assert.equal(error.job.id, first.id);
      return true;
    });

    // A new primary without the library: the next call loads it there and is sent again.
    await ask(replica.url, 'FUNCTION', 'FLUSH');
    await assert.rejects(ask(replica.url, 'FCALL', 'wg2_version', '0'), /Function not found/);
    const fourth = await client.enqueue(FN, 'library loaded again');
    assert.equal(await holds(replica.url, fourth.id), true);
    assert.equal(await ask(replica.url, 'FCALL', 'wg2_version', '0'), manifest.version);
  });

  it('says what each sentinel answered when none names a primary; refuses a bad URL before connecting', async () => {
    const [a, b] = [await freePort(), await freePort()];
    await assert.rejects(Client.connect(`redis+sentinel://127.0.0.1:${a},127.0.0.1:${b}/${SERVICE}`), (error) => {
      assert.ok(error instanceof UnreachableError, `${error.name}: ${error.message}`);
      assert.equal(error.exitCode, 6);
      assert.match(
        error.message,
        new RegExp(
          `^cannot reach Redis at redis\\+sentinel://127\\.0\\.0\\.1:${a},127\\.0\\.0\\.1:${b}/svc: ` +
            `no sentinel named a primary that answers as one: sentinel 127\\.0\\.0\\.1:${a}: connection refused .*; ` +
            `sentinel 127\\.0\\.0\\.1:${b}: connection refused `,
        ),
      );
      return true;
    });
    await assert.rejects(Client.connect(`redis+sentinel://127.0.0.1:${sentinel.port}/elsewhere`), (error) => {
      assert.ok(error instanceof UnreachableError, `${error.name}: ${error.message}`);
      assert.match(
        error.message,
        /sentinel 127\.0\.0\.1:\d+ does not know the service "elsewhere" \(is it the name in `sentinel monitor`\?\)$/,
      );
      return true;
    });
    await assert.rejects(
      Client.connect(`redis+sentinel://:secret@127.0.0.1:${sentinel.port}/${SERVICE}?master=1`),
      (error) => {
        assert.ok(error instanceof BadInputError, `${error.name}: ${error.message}`);
        assert.match(error.message, /^invalid Redis Sentinel URL "redis\+sentinel:\/\/:\*\*\*@127\.0\.0\.1:\d+\/svc\?master=1": unknown parameter "master"/);
        assert.ok(!error.message.includes('secret'));
        return true;
      },
    );
  });
});

describe('Redis Sentinel with passwords', { timeout: 60000 }, () => {
  let primary;
  let sentinel;

  before(async () => {
    primary = await startRedis(['--shutdown-timeout', '0']);
    await ask(primary.url, 'CONFIG', 'SET', 'requirepass', 'node pw');
    sentinel = await startSentinel(primary.port, SERVICE, { password: 'watch-pw', primaryPassword: 'node pw' });
  });

  after(async () => {
    if (sentinel) await sentinel.stop();
    if (primary) await primary.stop();
  });

  it("takes the nodes' password from the URL, the sentinels' from sentinel_password, and the database", async () => {
    const at = `127.0.0.1:${sentinel.port}/${SERVICE}`;
    const client = await Client.connect(`redis+sentinel://:node%20pw@${at}?sentinel_password=watch%2Dpw&db=3`);
    try {
      const { id } = await client.enqueue(FN, 'in db 3');
      const [fn, number] = id.split(':');
      const node = `redis://:node%20pw@127.0.0.1:${primary.port}`;
      assert.equal(await ask(`${node}/3`, 'HEXISTS', `wg:{${fn}}:jobs`, number), 1);
      assert.equal(await ask(`${node}/0`, 'HEXISTS', `wg:{${fn}}:jobs`, number), 0);
    } finally {
      await client.close();
    }
    for (const [url, says] of [
      [`redis+sentinel://:node%20pw@${at}`, /sentinel 127\.0\.0\.1:\d+: it wants a password: give the nodes' in the URL \(USER:PASSWORD@\), the sentinels' as \?sentinel_password=\.\.\./],
      [`redis+sentinel://:node%20pw@${at}?sentinel_password=nope`, /sentinel 127\.0\.0\.1:\d+: the user or password was refused$/],
      [`redis+sentinel://${at}?sentinel_password=watch-pw`, /sentinel 127\.0\.0\.1:\d+ names 127\.0\.0\.1:\d+, but it wants a password/],
      [`redis+sentinel://:wrong@${at}?sentinel_password=watch-pw`, /names 127\.0\.0\.1:\d+, but the user or password was refused$/],
    ]) {
      await assert.rejects(Client.connect(url), (error) => {
        assert.ok(error instanceof UnreachableError, `${error.name}: ${error.message}`);
        assert.match(error.message, says);
        assert.ok(!/node%20pw|watch-pw|nope|wrong/.test(error.message), error.message);
        return true;
      }, url);
    }
  });
});
