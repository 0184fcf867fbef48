'use strict';

/**
 * What the integration tests run against: a real redis-server on a free port and a real
 * `wasmgear worker` serving real plugins. Every wait here is for a condition, bounded.
 */

const { spawn, execFile } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const Redis = require('ioredis');

const REPO = path.resolve(__dirname, '..', '..', '..');
const BIN = process.env.WASMGEAR_BIN || path.join(REPO, 'target', 'debug', 'wasmgear');

/** The directory of the built example plugins (WASMGEAR_PLUGINS, else the debug build). */
function pluginsDir() {
  if (process.env.WASMGEAR_PLUGINS) return process.env.WASMGEAR_PLUGINS;
  const base = path.join(REPO, 'target', 'plugins', 'wasm32-wasip2');
  const debug = path.join(base, 'debug');
  if (fs.existsSync(path.join(debug, 'echo.wasm'))) return debug;
  // Only a release build of the plugins: use it rather than fail.
  return path.join(base, 'release');
}

/** A TCP port nothing listens on right now. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** Polls `check` (async, truthy when done) every `everyMs` until `timeoutMs`; throws `what`. */
async function until(what, check, { timeoutMs = 30000, everyMs = 50 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (${last.message})` : ''}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** A child process whose output is kept, to wait on and to show when a test fails. */
function launch(command, args, options = {}) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], ...options });
  const output = { text: '' };
  const keep = (chunk) => {
    output.text += chunk.toString();
    if (output.text.length > 1 << 20) output.text = output.text.slice(-(1 << 19));
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  // Should the test process end without its `after` hooks, its servers end with it.
  const reap = () => child.kill('SIGKILL');
  process.on('exit', reap);
  const exited = new Promise((resolve) =>
    child.on('exit', (code, signal) => {
      process.off('exit', reap);
      resolve({ code, signal });
    }),
  );
  return { child, output, exited };
}

async function stop(proc) {
  if (!proc || proc.child.exitCode !== null || proc.child.signalCode !== null) return;
  proc.child.kill('SIGTERM');
  const timer = setTimeout(() => proc.child.kill('SIGKILL'), 10000);
  await proc.exited;
  clearTimeout(timer);
}

/** Waits until the server at `url` (started as `proc`) answers PING; throws at once if it exits. */
async function answersPing(url, proc, what) {
  let exited = false;
  await until(`${what} to answer PING`, async () => {
    if (proc.child.exitCode !== null || proc.child.signalCode !== null) {
      exited = true;
      return true;
    }
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => {});
    try {
      await probe.connect();
      return (await probe.ping()) === 'PONG';
    } finally {
      probe.disconnect();
    }
  });
  if (exited) throw new Error(`${what} exited: ${proc.output.text}`);
}

/** Starts redis-server on a free port, answering PING. */
async function startRedis(
  extra = [],
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-node-redis-')),
  port = undefined,
) {
  port = port ?? (await freePort());
  const proc = launch('redis-server', [
    '--port', String(port),
    '--bind', '127.0.0.1',
    '--save', '',
    '--appendonly', 'no',
    '--dir', dir,
    ...extra,
  ]);
  const url = `redis://127.0.0.1:${port}`;
  try {
    await answersPing(url, proc, `redis-server on port ${port}`);
  } catch (error) {
    await stop(proc);
    throw error;
  }
  return {
    url,
    port,
    dir,
    /** Resolves when the server has exited (e.g. after SHUTDOWN), keeping its directory. */
    exited: proc.exited,
    async stop() {
      await stop(proc);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs `command args...` on a connection of its own to `url` (no retries); resolves its reply. */
async function ask(url, ...command) {
  // No CLIENT SETINFO: a least-privilege user may not, and its refusal would be in the ACL log.
  const redis = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    disableClientInfo: true,
  });
  redis.on('error', () => {});
  try {
    await redis.connect();
    return await redis.call(...command);
  } finally {
    redis.disconnect();
  }
}

/** A field of the server at `url`'s `INFO section` (`connected_slaves`...), as text, or undefined. */
async function infoField(url, section, field) {
  const text = String(await ask(url, 'INFO', section));
  const line = text.split(/\r?\n/).find((l) => l.startsWith(`${field}:`));
  return line === undefined ? undefined : line.slice(field.length + 1).trim();
}

/** Waits until the server at `url` counts `n` connected replicas (INFO replication). */
async function replicasConnected(url, n, timeoutMs = 20000) {
  await until(
    `${url} to show connected_slaves:${n}`,
    async () => (await infoField(url, 'replication', 'connected_slaves')) === String(n),
    { timeoutMs, everyMs: 50 },
  );
}

/**
 * Whether the replicas of the server at `url` confirm every write made on it so far: a
 * write, then `WAIT n 100` on the same connection (WAIT counts the replicas that have
 * acknowledged the connection's last write, and so everything before it).
 */
async function caughtUp(url, n = 1) {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  redis.on('error', () => {});
  try {
    await redis.connect();
    const [[e1], [e2, replicas]] = await redis.pipeline().incr('test:replication-check').call('WAIT', n, 100).exec();
    if (e1 || e2) throw e1 || e2;
    return Number(replicas) >= n;
  } finally {
    redis.disconnect();
  }
}

/**
 * Starts a replica of the redis-server on `primaryPort` (`--replicaof`, and the `extra`
 * arguments), and waits until it is in sync (`master_link_status:up`).
 */
async function startReplica(primaryPort, extra = []) {
  const replica = await startRedis(['--replicaof', '127.0.0.1', String(primaryPort), ...extra]);
  try {
    await until(
      `the replica on port ${replica.port} to be in sync`,
      async () => (await infoField(replica.url, 'replication', 'master_link_status')) === 'up',
      { timeoutMs: 20000, everyMs: 50 },
    );
  } catch (error) {
    await replica.stop();
    throw error;
  }
  return replica;
}

/**
 * Starts a Redis Sentinel (`redis-server CONF --sentinel`, the configuration in a writable
 * file of its own directory) on a free port, watching the primary on `primaryPort` as
 * `service` with a quorum of 1, answering PING. `password`: the sentinel's own
 * (`requirepass`); `primaryPassword`: the one it gives the nodes (`auth-pass`).
 */
async function startSentinel(primaryPort, service, { password, primaryPassword } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-node-sentinel-'));
  const port = await freePort();
  const conf = path.join(dir, 'sentinel.conf');
  fs.writeFileSync(
    conf,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${service} 127.0.0.1 ${primaryPort} 1`,
      `sentinel down-after-milliseconds ${service} 1000`,
      `sentinel failover-timeout ${service} 5000`,
      ...(primaryPassword === undefined ? [] : [`sentinel auth-pass ${service} ${JSON.stringify(primaryPassword)}`]),
      ...(password === undefined ? [] : [`requirepass ${JSON.stringify(password)}`]),
      '',
    ].join('\n'),
  );
  const proc = launch('redis-server', [conf, '--sentinel']);
  const url = password === undefined ? `redis://127.0.0.1:${port}` : `redis://:${password}@127.0.0.1:${port}`;
  try {
    await answersPing(url, proc, `the sentinel on port ${port}`);
  } catch (error) {
    await stop(proc);
    fs.rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url,
    port,
    output: proc.output,
    async stop() {
      await stop(proc);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs a command to its end; resolves {code, stdout, stderr}. */
function run(command, args, options = {}) {
  return new Promise((resolve) => {
    execFile(command, args, { env: { ...process.env, NO_COLOR: '1' }, ...options }, (error, stdout, stderr) => {
      resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** Starts a Redis Cluster of `size` primaries (no replicas) on free ports, its slots all served. */
async function startCluster(size = 3) {
  const nodes = [];
  const stopAll = async () => {
    for (const node of nodes) await node.stop();
  };
  try {
    for (let i = 0; i < size; i += 1) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-node-cluster-'));
      nodes.push(await startRedis(['--cluster-enabled', 'yes', '--cluster-config-file', path.join(dir, 'nodes.conf')], dir));
    }
    const created = await run('redis-cli', [
      '--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`),
      '--cluster-replicas', '0', '--cluster-yes',
    ]);
    if (created.code !== 0) throw new Error(`redis-cli --cluster create failed: ${created.stdout}${created.stderr}`);
    for (const node of nodes) {
      await until(`cluster node ${node.port} to be ok`, async () => {
        const info = await run('redis-cli', ['-p', String(node.port), 'CLUSTER', 'INFO']);
        return info.stdout.includes('cluster_state:ok');
      }, { timeoutMs: 30000, everyMs: 100 });
    }
  } catch (error) {
    await stopAll();
    throw error;
  }
  return { nodes, url: nodes[0].url, stop: stopAll };
}

/**
 * Starts redis-server speaking TLS only, with a certificate for 127.0.0.1 signed by a
 * certificate authority made for the test (`ca`, PEM).
 */
async function startTlsRedis() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-node-tls-'));
  const file = (name) => path.join(dir, name);
  fs.writeFileSync(file('san.ext'), 'subjectAltName=IP:127.0.0.1\n');
  const steps = [
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', file('ca.key'), '-out', file('ca.crt'), '-days', '2', '-subj', '/CN=wasmgear test CA'],
    ['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', file('server.key'), '-out', file('server.csr'), '-subj', '/CN=127.0.0.1'],
    ['x509', '-req', '-in', file('server.csr'), '-CA', file('ca.crt'), '-CAkey', file('ca.key'), '-CAcreateserial', '-out', file('server.crt'), '-days', '2', '-extfile', file('san.ext')],
  ];
  for (const args of steps) {
    const result = await run('openssl', args);
    if (result.code !== 0) throw new Error(`openssl ${args[0]} failed: ${result.stderr}`);
  }
  const port = await freePort();
  const proc = launch('redis-server', [
    '--port', '0',
    '--tls-port', String(port),
    '--bind', '127.0.0.1',
    '--save', '',
    '--appendonly', 'no',
    '--dir', dir,
    '--tls-cert-file', file('server.crt'),
    '--tls-key-file', file('server.key'),
    '--tls-ca-cert-file', file('ca.crt'),
    '--tls-auth-clients', 'no',
  ]);
  const ca = fs.readFileSync(file('ca.crt'));
  const url = `rediss://127.0.0.1:${port}`;
  await until(`redis-server with TLS on port ${port} to answer PING`, async () => {
    if (proc.child.exitCode !== null) throw new Error(`redis-server exited: ${proc.output.text}`);
    const probe = new Redis(url, { tls: { ca }, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => {});
    try {
      await probe.connect();
      return (await probe.ping()) === 'PONG';
    } finally {
      probe.disconnect();
    }
  });
  return {
    url,
    port,
    ca,
    async stop() {
      await stop(proc);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Starts `wasmgear worker` with copies of `plugins` (names without .wasm; `NAME=PLUGIN`
 * serves a copy of PLUGIN as function NAME) until it says so; `manifests` maps a plugin's
 * name to the text of its manifest (`NAME.toml` beside it); `env`, variables added to its
 * environment (`OTEL_*` to export its spans).
 */
async function startWorker(url, plugins, concurrency = 4, manifests = {}, env = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-node-plugins-'));
  const source = pluginsDir();
  if (!fs.existsSync(BIN)) {
    throw new Error(`no wasmgear binary at ${BIN}: build it (cargo build) or set WASMGEAR_BIN`);
  }
  const copies = plugins.map((entry) => {
    const [name, plugin = name] = entry.split('=');
    return { name, plugin };
  });
  for (const { plugin } of copies) {
    if (!fs.existsSync(path.join(source, `${plugin}.wasm`))) {
      throw new Error(`no plugin ${plugin}.wasm in ${source}: build the example plugins or set WASMGEAR_PLUGINS`);
    }
  }
  for (const { name, plugin } of copies) {
    fs.copyFileSync(path.join(source, `${plugin}.wasm`), path.join(dir, `${name}.wasm`));
  }
  for (const [name, manifest] of Object.entries(manifests)) {
    fs.writeFileSync(path.join(dir, `${name}.toml`), manifest);
  }
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmgear-node-home-'));
  const proc = launch(
    BIN,
    ['worker', '--redis', url, '--plugins', dir, '--concurrency', String(concurrency)],
    { env: { ...process.env, WASMGEAR_HOME: home, NO_COLOR: '1', ...env } },
  );
  await until(
    'the worker to say "worker started"',
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`the worker exited: ${proc.output.text}`);
      return proc.output.text.includes('worker started');
    },
    { timeoutMs: 120000, everyMs: 100 },
  );
  return {
    output: proc.output,
    async stop() {
      await stop(proc);
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmSync(home, { recursive: true, force: true });
    },
  };
}

/** The OTLP receiver of the tests (WASMGEAR_OTLP_RECEIVER, else the debug build's). */
const OTLP_RECEIVER = process.env.WASMGEAR_OTLP_RECEIVER || path.join(REPO, 'target', 'debug', 'otlp-receiver');

/**
 * Starts the real OTLP receiver (crates/testkit's `otlp-receiver`): it prints `http PORT grpc
 * PORT` first, keeps the spans it receives over OTLP/HTTP and gRPC, and lists them as JSON at
 * `GET /spans` on the HTTP port, until its standard input closes. Resolves `{endpoint (the
 * OTLP/HTTP base URL), grpcPort, spans() (the list, each {transport, service, trace_id,
 * span_id, parent_span_id, name, kind, attributes, events, links, error}), stop()}`.
 */
async function startOtlpReceiver() {
  if (!fs.existsSync(OTLP_RECEIVER)) {
    throw new Error(`no OTLP receiver at ${OTLP_RECEIVER}: build it (cargo build -p wasmgear-testkit) or set WASMGEAR_OTLP_RECEIVER`);
  }
  const child = spawn(OTLP_RECEIVER, [], { stdio: ['pipe', 'pipe', 'pipe'] });
  const reap = () => child.kill('SIGKILL');
  process.on('exit', reap);
  const exited = new Promise((resolve) =>
    child.on('exit', (code, signal) => {
      process.off('exit', reap);
      resolve({ code, signal });
    }),
  );
  let text = '';
  let errors = '';
  child.stderr.on('data', (chunk) => {
    errors += chunk.toString();
  });
  const stopIt = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.stdin.end();
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  let ports;
  try {
    ports = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the OTLP receiver said nothing within 30 s: ${errors}`)), 30000);
      child.stdout.on('data', (chunk) => {
        text += chunk.toString();
        const line = /^http ([0-9]+) grpc ([0-9]+)\r?\n/.exec(text);
        if (line) {
          clearTimeout(timer);
          resolve({ http: Number(line[1]), grpc: Number(line[2]) });
        }
      });
      child.on('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
      child.on('exit', () => {
        clearTimeout(timer);
        reject(new Error(`the OTLP receiver exited: ${text}${errors}`));
      });
    });
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  const endpoint = `http://127.0.0.1:${ports.http}`;
  return {
    endpoint,
    grpcPort: ports.grpc,
    async spans() {
      const response = await fetch(`${endpoint}/spans`);
      if (!response.ok) throw new Error(`GET /spans answered ${response.status}`);
      return response.json();
    },
    stop: stopIt,
  };
}

/** Runs the wasmgear CLI; resolves {code, stdout, stderr}. */
function cli(args) {
  return run(BIN, args);
}

/**
 * Makes the Redis user `name` (password `pw-NAME`) of `role` on the server at `url` with the
 * `ACL SETUSER` line `wasmgear acl ROLE --user NAME` prints (as tests/all/redis_acl.rs
 * does); resolves its URL.
 */
async function makeUser(url, role, name) {
  const result = await cli(['acl', role, '--user', name]);
  if (result.code !== 0) throw new Error(`wasmgear acl ${role} exited ${result.code}: ${result.stderr}`);
  const words = result.stdout.replace('>PASSWORD', `>pw-${name}`).trim().split(/\s+/);
  if (words[0] !== 'ACL' || words[1] !== 'SETUSER') throw new Error(`wasmgear acl printed ${result.stdout}`);
  await ask(url, ...words);
  const { port } = new URL(url);
  return `redis://${name}:pw-${name}@127.0.0.1:${port}`;
}

/** What Redis' ACL log (at `url`, read as its user) says `user` was refused: `REASON OBJECT` each. */
async function refusals(url, user) {
  const entries = await ask(url, 'ACL', 'LOG', '1000');
  const found = [];
  for (const entry of entries) {
    const fields = {};
    for (let i = 0; i + 1 < entry.length; i += 2) fields[String(entry[i])] = String(entry[i + 1]);
    if (fields.username === user) found.push(`${fields.reason} ${fields.object}`);
  }
  return found;
}

module.exports = {
  REPO,
  BIN,
  pluginsDir,
  freePort,
  until,
  ask,
  infoField,
  replicasConnected,
  caughtUp,
  startRedis,
  startReplica,
  startSentinel,
  startTlsRedis,
  startCluster,
  startWorker,
  startOtlpReceiver,
  cli,
  makeUser,
  refusals,
};
