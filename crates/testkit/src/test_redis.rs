//! [`TestRedis`]: a `redis-server` of the test's own on a free port, in a temporary
//! directory, stopped when dropped and its log printed if the test failed; and what tests
//! read of a Redis besides the queue's API (subscriber counts, a job's stored record,
//! command statistics).

use std::path::Path;
use std::time::Duration;

use wasmgear_client::Client;
use wasmgear_proto::FunctionName;
use wasmgear_redis_server::RedisServer;

use crate::wait::eventually;

/// How long a test waits for subscribers to appear.
const SUBSCRIBED_WITHIN: Duration = Duration::from_secs(30);

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
            SUBSCRIBED_WITHIN,
            &format!("{n} subscribers of {channel}"),
            || async {
                let mut conn = self.raw_try().await?;
                let (_, count): (String, u64) = ::redis::cmd("PUBSUB")
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
            SUBSCRIBED_WITHIN,
            &format!("{n} pattern subscriptions"),
            || async {
                let mut conn = self.raw_try().await?;
                let count: u64 = ::redis::cmd("PUBSUB")
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
    pub async fn raw_try(&self) -> Option<::redis::aio::MultiplexedConnection> {
        ::redis::Client::open(self.url())
            .ok()?
            .get_multiplexed_async_connection()
            .await
            .ok()
    }

    /// A plain connection, for looking at Redis itself.
    pub async fn raw(&self) -> ::redis::aio::MultiplexedConnection {
        ::redis::Client::open(self.url())
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
        let reply: Option<(String, Option<Vec<u8>>)> = ::redis::cmd("FCALL")
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
pub(crate) fn start_with_second_port(
    dir: &Path,
    args: impl Fn(u16) -> Vec<String>,
) -> (RedisServer, u16) {
    let mut last_error = None;
    for _ in 0..5 {
        let port = wasmgear_redis_server::free_port();
        let args = args(port);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match RedisServer::start(dir, 0, &args) {
            Ok(server) => return (server, port),
            Err(error) => last_error = Some(error),
        }
    }
    panic!("start redis-server: {}", last_error.expect("tried"))
}

/// How many times the server has run `command` (inside scripts too: INFO commandstats).
pub async fn command_calls(conn: &mut ::redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = ::redis::cmd("INFO")
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
