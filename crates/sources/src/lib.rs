//! Job sources for the queues teams already run: a wasmgear worker pointed at one of them
//! runs its jobs in Wasm plugins, and the producers never know. Each protocol is one more
//! [`wasmgear_worker::JobSource`]; nothing else in the worker learns about it.
//!
//! - [`gearmonkey`]: GearMonkey's lists and hashes, with a lease added.
//! - [`rwq`]: MeVitae's redis-work-queue: the items under one key prefix.
//! - [`worqr`]: droplit's worqr: the tasks of one queue.
//! - [`qless`]: seomoz's qless: the jobs of some queues, a job's klass naming its function.
//! - [`gearman`]: Gearman: a worker of gearmand servers, over Gearman's binary protocol.
//! - [`multi`]: several sources served by one worker.
//! - [`spec`]: the `--source` specs that name them.

pub mod gearman;
pub mod gearmonkey;
pub mod multi;
pub mod qless;
pub mod rwq;
pub mod spec;
pub mod worqr;

pub use gearman::Gearman;
pub use multi::{AnySource, Sources};
pub use qless::{Qless, QlessKeys};
pub use rwq::{WorkQueue, WorkQueueKeys};
pub use worqr::{Worqr, WorqrKeys};

pub use gearmonkey::{ConnectError, GearMonkey, GearMonkeyKeys};

use std::time::Duration;

use wasmgear_proto::{JobFailure, Lease};

/// When a foreign source retries a failed job: the worker's `--retry-backoff`, doubling
/// with jitter ([`wasmgear_client::source::retry_delay`]), while the failure may pass and
/// attempts are left.
#[derive(Debug, Clone, Copy)]
pub struct RetryBackoff {
    /// The wait before the first retry.
    pub base: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff {
            base: wasmgear_client::source::DEFAULT_BACKOFF_BASE,
            max: wasmgear_client::source::DEFAULT_BACKOFF_MAX,
        }
    }
}

impl RetryBackoff {
    /// The wait before the job of `lease` runs again after `failure`, or `None` when it
    /// ends for good (the failure is final, or its attempts are used up).
    pub fn retry_after(&self, lease: &Lease, failure: &JobFailure) -> Option<Duration> {
        let info = &lease.info;
        (failure.retryable && info.attempt < info.max_attempts)
            .then(|| wasmgear_client::source::retry_delay(self.base, self.max, info.attempt))
    }
}
pub use spec::{Protocol, SourceSpec, SpecError};

/// A background task of a source, stopped with it.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `{tag}-` and 16 random hex digits (the clock's when the OS has no entropy source): names
/// a worker's session at a foreign queue.
pub(crate) fn random_hex(tag: &str) -> String {
    let mut random = [0u8; 8];
    let hex: String = match getrandom::fill(&mut random) {
        Ok(()) => random.iter().map(|b| format!("{b:02x}")).collect(),
        Err(_) => format!("{:016x}", wasmgear_proto::units::now_ms()),
    };
    format!("{tag}-{hex}")
}

/// Connects to the Redis at `url` for a protocol whose keys carry no hash tag: a Redis
/// Cluster is refused, as one queue's keys would lie on different nodes.
pub(crate) async fn connect_standalone(
    url: &str,
    protocol: &'static str,
) -> Result<(redis::Client, wasmgear_client::connection::Connection), ConnectError> {
    use wasmgear_client::connection::{self, Connection};
    let (client, conn) = connection::connect(url).await?;
    if matches!(conn, Connection::Cluster(_)) {
        return Err(ConnectError::Cluster {
            url: connection::redact(url),
            protocol,
        });
    }
    Ok((client, conn))
}
