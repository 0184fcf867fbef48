//! Job sources for the queues teams already run: a wasmgear worker pointed at one of them
//! runs its jobs in Wasm plugins, and the producers never know. Each protocol is one more
//! [`wasmgear_worker::JobSource`]; nothing else in the worker learns about it.
//!
//! - [`gearmonkey`]: GearMonkey's lists and hashes, with a lease added.
//! - [`rwq`]: MeVitae's redis-work-queue: the items under one key prefix.
//! - [`multi`]: several sources served by one worker.
//! - [`spec`]: the `--source` specs that name them.

pub mod gearmonkey;
pub mod multi;
pub mod rwq;
pub mod spec;

pub use multi::{AnySource, Sources};
pub use rwq::{WorkQueue, WorkQueueKeys};

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
