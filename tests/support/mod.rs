//! Test support: a private `redis-server` per test, plugin directories made of the
//! components built from `plugins/`, a worker node run in-process or as the real binary,
//! and bounded polling. Every process a test starts ends with it, also when it fails: each
//! is dropped with its guard ([`process::ProcessGroup`] kills long-running ones with
//! everything they started; `redis-server`s, which start nothing that outlives them, are
//! stopped by [`RedisServer`]'s drop).

#![allow(dead_code)]

pub mod browser;
pub mod clients;
pub mod clock;
pub mod gearmand;
pub mod gearmonkey;
pub mod library;
pub mod process;
pub mod proxy;
pub mod worqr;

use std::future::Future;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use wasmgear_client::Client;
use wasmgear_client::redis_server::RedisServer;
use wasmgear_proto::FunctionName;
use wasmgear_runtime::RuntimeConfig;
use wasmgear_worker::plugins::PluginRegistry;
use wasmgear_worker::{WorkerBuilder, WorkerConfig};

/// The `wasmgear` binary built by cargo for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_wasmgear");

/// How long a worker process may take to start serving: it compiles every plugin first
/// (a JavaScript component takes seconds alone), on a machine other tests keep busy. A
/// bound for a hung worker, not a speed claim.
pub const WORKER_START: Duration = Duration::from_secs(120);

/// A `redis-server` of this test's own on a free port; its log is printed if the test fails.
pub struct TestRedis {
    server: RedisServer,
    _dir: tempfile::TempDir,
}

impl TestRedis {
    /// Starts a fresh, empty server.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a fresh, empty server with more command-line options (a password, TLS, ...).
    pub fn start_with(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let server = RedisServer::start(dir.path(), 0, args).expect("start redis-server");
        TestRedis { server, _dir: dir }
    }

    /// Starts a fresh server whose options need a second port (a TLS port): `args(port)`
    /// builds them. Returns the server and that port.
    pub fn start_with_port(args: impl Fn(u16) -> Vec<String>) -> (Self, u16) {
        let dir = tempfile::tempdir().expect("temp dir");
        let (server, port) = start_with_second_port(dir.path(), args);
        (TestRedis { server, _dir: dir }, port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// Its URL.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Kills the server (SIGKILL), as a crash would; what it holds is what its append-only
    /// file holds, if it was started with one.
    pub fn kill(&self) {
        self.server.kill();
    }

    /// Starts the killed server again on the same port and data, and waits until it answers.
    pub fn restart(&self) {
        self.server.ensure_running().expect("restart redis-server");
    }

    /// A producer client for it.
    pub async fn client(&self) -> Client {
        Client::connect(&self.url()).await.expect("connect client")
    }

    /// Waits until `n` clients subscribe to `channel` (a worker listening for work, a
    /// client waiting for events).
    pub async fn until_subscribed(&self, channel: &str, n: u64) {
        eventually(
            Duration::from_secs(30),
            &format!("{n} subscribers of {channel}"),
            || async {
                let mut conn = self.raw_try().await?;
                let (_, count): (String, u64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(channel)
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                (count == n).then_some(())
            },
        )
        .await;
    }

    /// Waits until `n` pattern subscriptions are open.
    pub async fn until_psubscribed(&self, n: u64) {
        eventually(
            Duration::from_secs(30),
            &format!("{n} pattern subscriptions"),
            || async {
                let mut conn = self.raw_try().await?;
                let count: u64 = redis::cmd("PUBSUB")
                    .arg("NUMPAT")
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                (count == n).then_some(())
            },
        )
        .await;
    }

    /// A plain connection, or `None` while the server does not answer.
    pub async fn raw_try(&self) -> Option<redis::aio::MultiplexedConnection> {
        redis::Client::open(self.url())
            .ok()?
            .get_multiplexed_async_connection()
            .await
            .ok()
    }

    /// A plain connection, for looking at Redis itself.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis")
    }

    /// Job `seq` of `function` as the library's `get` answers it: the record as JSON (what
    /// clients read, whatever layout `jobs` keeps it in), or `None` when there is no such
    /// job. The library must be loaded (a client has connected).
    pub async fn record_json(&self, function: &FunctionName, seq: u64) -> Option<String> {
        let keys = wasmgear_client::queue_keys("get", function).unwrap();
        let reply: Option<(String, Option<Vec<u8>>)> = redis::cmd("FCALL")
            .arg("wg2_get")
            .arg(keys.len())
            .arg(&keys)
            .arg(function.as_str())
            .arg(seq)
            .query_async(&mut self.raw().await)
            .await
            .expect("FCALL get");
        reply.map(|(record, _)| record)
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- redis-server log (port {}) ---\n{}",
                self.server.port(),
                self.server.log_tail(8000)
            );
        }
    }
}

/// Starts a `redis-server` in `dir` whose options `args(port)` need a second free port; a
/// port someone else took between the choice and the server's bind is replaced by another.
fn start_with_second_port(
    dir: &std::path::Path,
    args: impl Fn(u16) -> Vec<String>,
) -> (RedisServer, u16) {
    let mut last_error = None;
    for _ in 0..5 {
        let port = wasmgear_client::redis_server::free_port();
        let args = args(port);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match RedisServer::start(dir, 0, &args) {
            Ok(server) => return (server, port),
            Err(error) => last_error = Some(error),
        }
    }
    panic!("start redis-server: {}", last_error.expect("tried"))
}

/// A loopback port that is bound but not listening, held for as long as this lives: a
/// connection to it is refused, and no server can take it meanwhile (unlike a port that
/// was free a moment ago).
pub struct ClosedPort {
    _socket: tokio::net::TcpSocket,
    port: u16,
}

impl ClosedPort {
    /// Binds a fresh port.
    pub fn new() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        socket
            .bind(([127, 0, 0, 1], 0).into())
            .expect("bind a loopback port");
        let port = socket.local_addr().expect("its address").port();
        ClosedPort {
            _socket: socket,
            port,
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// A local Redis Cluster of three masters, started by the test; its logs are printed if it fails.
pub struct TestCluster {
    nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl TestCluster {
    /// Starts three `redis-server --cluster-enabled yes` and joins them with
    /// `redis-cli --cluster create`, then waits until every node reports `cluster_state:ok`.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes = Vec::new();
        for i in 0..3 {
            // The cluster bus gets a free port of its own (port + 10000 may not exist).
            let (node, _bus_port) =
                start_with_second_port(&dir.path().join(format!("node{i}")), |bus_port| {
                    let args = ["--cluster-enabled", "yes", "--cluster-config-file"];
                    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                    args.extend(["nodes.conf".into(), "--cluster-port".into()]);
                    args.push(bus_port.to_string());
                    args
                });
            nodes.push(node);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .arg("--cluster-yes")
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            created.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = TestCluster { nodes, _dir: dir };
        for node in &cluster.nodes {
            eventually_sync(Duration::from_secs(30), "cluster_state:ok", || {
                redis_cli(node.port(), &["cluster", "info"]).contains("cluster_state:ok")
            });
        }
        cluster
    }

    /// The URL of one node: the seed clients start from.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// The URL of each node (each a primary).
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// How many keys each node holds.
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| redis_cli(n.port(), &["dbsize"]).trim().parse().unwrap_or(0))
            .collect()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for node in &self.nodes {
                eprintln!(
                    "--- cluster node {} log ---\n{}",
                    node.port(),
                    node.log_tail(4000)
                );
            }
        }
    }
}

/// What `redis-cli -p PORT ARGS` prints.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A function name known to be valid.
pub fn function(name: &str) -> FunctionName {
    FunctionName::new(name).expect("valid function name")
}

/// The path of a built plugin by function name.
pub fn artifact(name: &str) -> &'static str {
    wasmgear_test_artifacts::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, path)| *path)
        .unwrap_or_else(|| panic!("no plugin {name} was built from plugins/"))
}

/// A temporary plugin directory holding copies of the named built plugins.
pub fn plugin_dir(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for name in names {
        std::fs::copy(artifact(name), dir.path().join(format!("{name}.wasm")))
            .expect("copy plugin");
    }
    dir
}

/// A plugin directory in which the artifact `name` serves each of `functions` (one copy of
/// the file per function).
pub fn plugin_copies(name: &str, functions: &[String]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for function in functions {
        std::fs::copy(artifact(name), dir.path().join(format!("{function}.wasm")))
            .expect("copy plugin");
    }
    dir
}

/// A worker node running in this process on the library API.
pub struct TestWorker {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    /// The worker's plugin registry.
    pub registry: Arc<PluginRegistry>,
    _plugins: tempfile::TempDir,
}

/// Knobs for [`TestWorker::start_with`].
#[derive(Clone)]
pub struct TestWorkerOptions {
    pub config: WorkerConfig,
    pub retry_backoff: Duration,
    pub runtime: RuntimeConfig,
    /// Watch the plugin directory (hot reload).
    pub watch: bool,
}

impl Default for TestWorkerOptions {
    fn default() -> Self {
        TestWorkerOptions {
            config: WorkerConfig {
                concurrency: 4,
                ..WorkerConfig::default()
            },
            retry_backoff: Duration::from_millis(50),
            runtime: RuntimeConfig {
                max_instances: 8,
                ..RuntimeConfig::default()
            },
            watch: false,
        }
    }
}

impl TestWorker {
    /// Starts a worker serving the named plugins against `redis`.
    pub async fn start(redis: &TestRedis, plugins: &[&str]) -> Self {
        Self::start_with(redis, plugins, TestWorkerOptions::default()).await
    }

    /// Starts a worker with explicit options.
    pub async fn start_with(
        redis: &TestRedis,
        plugins: &[&str],
        options: TestWorkerOptions,
    ) -> Self {
        Self::start_on(&redis.url(), plugin_dir(plugins), options).await
    }

    /// Starts a worker on the Redis (or cluster) at `url`, serving the plugins in `dir`.
    pub async fn start_on(url: &str, dir: tempfile::TempDir, options: TestWorkerOptions) -> Self {
        let worker = WorkerBuilder::new(dir.path())
            .id("test-worker")
            .runtime(options.runtime)
            .config(options.config)
            .retry_backoff(options.retry_backoff, options.retry_backoff * 4)
            .watch(options.watch)
            .build(url)
            .await
            .expect("start the worker");
        assert!(
            worker.problems().is_empty(),
            "plugins refused: {:?}",
            worker.problems()
        );
        let registry = worker.registry().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(worker.run(async {
            let _ = stopped.await;
        }));
        TestWorker {
            stop: Some(stop),
            task: Some(task),
            registry,
            _plugins: dir,
        }
    }

    /// Asks the worker to shut down and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("worker stopped within 60 s")
                .expect("worker task did not panic");
        }
    }
}

impl Drop for TestWorker {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Runs the `wasmgear` binary to completion with `args` and `env`.
pub fn wasmgear(args: &[&str], env: &[(&str, &str)]) -> Output {
    wasmgear_with_stdin(args, env, b"")
}

/// Runs the `wasmgear` binary with `stdin` fed to it.
pub fn wasmgear_with_stdin(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = command(args, env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wasmgear");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("wait for wasmgear")
}

fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("WASMGEAR_REDIS_URL")
        .env_remove("WASMGEAR_PLUGINS");
    command.env("RUST_LOG", "info");
    // Local state (the compile cache, an embedded Redis) stays out of the source tree; a
    // test that needs its own home passes WASMGEAR_HOME in `env`.
    command.env(
        "WASMGEAR_HOME",
        std::env::temp_dir().join("wasmgear-tests-home"),
    );
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// A `wasmgear worker` process in a process group of its own, killed on drop with what it
/// started (an embedded Redis); its log is printed if the test fails.
pub struct WorkerProcess {
    child: process::ProcessGroup,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl WorkerProcess {
    /// Starts `wasmgear worker ARGS` with `env`, logging to a file.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all_args = vec!["worker"];
        all_args.extend_from_slice(args);
        WorkerProcess::spawn_command(&all_args, env)
    }

    /// Starts `wasmgear ARGS` (any long-running command: `serve`...) with `env`, logging
    /// to a file.
    pub fn spawn_command(all_args: &[&str], env: &[(&str, &str)]) -> Self {
        let log_dir = tempfile::tempdir().expect("temp dir");
        let log = log_dir.path().join("worker.log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = process::ProcessGroup::spawn(
            command(all_args, env)
                .stdin(Stdio::null())
                .stdout(file.try_clone().expect("log file"))
                .stderr(file),
        )
        .expect("spawn wasmgear worker");
        WorkerProcess {
            child,
            log,
            _log_dir: log_dir,
        }
    }

    /// Starts `wasmgear worker --plugins PLUGINS EXTRA...` against `redis` and waits until
    /// it serves.
    pub fn serving(redis: &TestRedis, plugins: &std::path::Path, extra: &[&str]) -> Self {
        let plugins = plugins.to_str().expect("a UTF-8 path");
        let url = redis.url();
        let mut args = vec!["--plugins", plugins];
        args.extend_from_slice(extra);
        let worker = WorkerProcess::spawn(&args, &[("WASMGEAR_REDIS_URL", url.as_str())]);
        eventually_sync(WORKER_START, "the worker to start", || {
            worker.log().contains("worker started")
        });
        worker
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (e.g. "TERM", "KILL") to it.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits up to `timeout` for it to exit; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.child().try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.child.kill();
        if std::thread::panicking() {
            eprintln!("--- worker log ---\n{}", self.log());
        }
    }
}

/// Polls `check` every 20 ms until it returns `Some`, failing the test after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls a plain condition like [`eventually`], from synchronous code.
pub fn eventually_sync(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Text of a process' stdout.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Text of a process' stderr.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The JSON a successful command printed on stdout (panics, showing stderr, otherwise).
pub fn json(output: &Output) -> serde_json::Value {
    assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
    serde_json::from_str(&stdout(output)).unwrap_or_else(|e| panic!("{e}: {}", stdout(output)))
}

/// How many times the server has run `command` (inside scripts too: INFO commandstats).
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|fields| fields.split(',').find_map(|f| f.strip_prefix("calls=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
