//! Job sources for the queues teams already run: a wasmgear worker pointed at one of them
//! runs its jobs in Wasm plugins, and the producers never know. Each protocol is one more
//! [`wasmgear_source::JobSource`]; nothing else in the worker learns about it.
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
mod redis_source;
pub mod rwq;
pub mod spec;
pub mod worqr;

pub use gearman::Gearman;
pub use multi::{Sources, SourcesError};
pub use qless::{Qless, QlessKeys};
pub use rwq::{WorkQueue, WorkQueueKeys};
pub use spec::{ConnectOptions, SourceSpec, SpecError};
pub use wasmgear_source::AnySource;
pub use worqr::{Worqr, WorqrKeys};

pub use gearmonkey::{GearMonkey, GearMonkeyKeys};
pub use redis_source::ConnectError;

use std::time::Duration;

use wasmgear_proto::{Completion, JobFailure, JobState, Lease};

/// When a foreign source retries a failed job: the worker's `--retry-backoff`, doubling
/// with jitter ([`wasmgear_client::worker_queue::retry_delay`]), while the failure may pass and
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
            base: wasmgear_client::worker_queue::DEFAULT_BACKOFF_BASE,
            max: wasmgear_client::worker_queue::DEFAULT_BACKOFF_MAX,
        }
    }
}

impl RetryBackoff {
    /// The wait before the job of `lease` runs again after `failure`, or `None` when it
    /// ends for good (the failure is final, or its attempts are used up).
    pub fn retry_after(&self, lease: &Lease, failure: &JobFailure) -> Option<Duration> {
        let info = &lease.info;
        (failure.retryable && info.attempt < info.max_attempts)
            .then(|| wasmgear_client::worker_queue::retry_delay(self.base, self.max, info.attempt))
    }
}

/// What finishing a job came to: it is now in `state` when the lease was still held
/// (`done`), or the call came too late.
pub(crate) fn settled(done: bool, state: JobState) -> Completion {
    match done {
        true => Completion::Accepted(state),
        false => Completion::Stale,
    }
}
