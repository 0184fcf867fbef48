//! wasmgear's test harnesses, for the integration tests (`tests/all`) and the benchmarks
//! (`host/benches`) alike, as redis-rs has `redis-test`: the real parts a test runs against,
//! started on free ports and stopped with the test. A dev-dependency only: no library crate
//! of ours depends on it.
//!
//! Every process a test starts ends with it, also when it fails: each is dropped with its
//! guard ([`process::ProcessGroup`] kills long-running ones with everything they started;
//! `redis-server`s, which start nothing that outlives them, are stopped by
//! [`wasmgear_redis_server::RedisServer`]'s drop), and its log is printed when the test
//! panics. Nothing here sleeps to synchronise: waits poll a condition, bounded
//! ([`eventually`]).
//!
//! # Layout
//!
//! - [`test_redis`]: [`TestRedis`], a `redis-server` of the test's own, and what tests read of it.
//! - [`cluster`]: [`TestCluster`], three masters joined into a Redis Cluster.
//! - [`sentinel`]: [`sentinel::TestReplicaSet`], a primary, its replicas and Redis Sentinels.
//! - [`ports`]: [`ClosedPort`], a port that refuses connections, and [`free_port`].
//! - [`clock`]: [`clock::ClockedRedis`], a `redis-server` whose wall clock a test moves.
//! - [`gearmand`]: [`gearmand::Gearmand`], a real Gearman job server and its tools.
//! - [`proxy`]: [`proxy::Proxy`], a TCP proxy a test can cut or have lose a reply.
//! - [`process`]: [`process::ProcessGroup`], a child killed with everything it started.
//! - [`plugins`]: the components built from `plugins/` ([`artifact`]) and plugin
//!   directories made of them ([`plugin_dir`], [`plugin_copies`]).
//! - [`worker`]: [`TestWorker`], a worker node in this process on the library API.
//! - [`worker_process`]: [`WorkerProcess`], `wasmgear worker` (or another long-running
//!   command) as the real binary.
//! - [`metrics`]: a worker's `/metrics`, parsed as Prometheus parses it.
//! - [`cli`]: the `wasmgear` binary run to completion ([`wasmgear`]) and its output.
//! - [`wait`]: bounded polling, [`eventually`] and [`eventually_sync`].
//! - [`last_words`]: [`last_words::LastWords`], a failing test's reason repeated after its logs.

pub mod cli;
pub mod clock;
pub mod cluster;
pub mod gearmand;
pub mod http_peer;
pub mod last_words;
pub mod metrics;
pub mod otlp;
pub mod plugins;
pub mod ports;
pub mod process;
pub mod proxy;
pub mod sentinel;
pub mod test_redis;
pub mod wait;
pub mod worker;
pub mod worker_process;

pub use cli::{bin, json, stderr, stdout, wasmgear, wasmgear_with_stdin};
pub use cluster::TestCluster;
pub use otlp::{OtlpReceiver, ReceivedSpan};
pub use plugins::{artifact, function, plugin_copies, plugin_dir};
pub use ports::{ClosedPort, free_port};
pub use test_redis::{TestRedis, command_calls};
pub use wait::{eventually, eventually_sync};
pub use worker::{TestWorker, TestWorkerOptions};
pub use worker_process::{READY_LINE, WORKER_START, WorkerProcess, WorkerProcessBuilder};
