//! The worker node: leases jobs from a [`JobSource`], runs each in the [`Runtime`](wasmgear_runtime::Runtime), keeps
//! its lease alive, forwards its progress, and reports how it ended.
//!
//! The only room that knows both the queue and the runtime. Shutdown is a parameter:
//! when it resolves the node stops leasing, lets running jobs finish for a grace period,
//! then cancels the rest and hands them back to the source.
//!
//! By role: `node` is the loop that leases and starts jobs, `attempt` one job's run in its
//! slot (lease renewal, progress, its report), `batches` a batch plugin's jobs gathered and
//! run in one call, `upkeep` the advertisement, housekeeping and
//! cancels; `builder` assembles a node, `plugins` and `deployed` keep what it serves.

mod attempt;
mod batches;
pub mod builder;
mod checkpoints;
mod children;
mod dependencies;
pub mod deployed;
pub mod metrics;
mod node;
pub mod plugins;
pub mod scheduler;
mod spans;
mod upkeep;

use std::time::Duration;

use wasmgear_proto::FunctionName;

pub use attempt::{MAX_ATTEMPT_LOG_BYTES, PROGRESS_INTERVAL};
pub use builder::{BuildError, LoadedWorker, Worker, WorkerBuilder};
pub use metrics::Metrics;
pub use node::{AHEAD_MAX, HOLD_AHEAD_MAX, Observe, READY_LINE, run, run_observed};
pub use upkeep::{ADVERTISE_EVERY, ADVERTISE_TTL};
pub use wasmgear_source::{AnySource, DynJobSource, JobSource, SourceError};

/// Jobs run at once when nothing else is said.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// The most lease calls on their way at once.
const MAX_LEASE_CALLS: usize = 2;

/// How long a lease lasts without a heartbeat when nothing else is said.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// How often an idle worker looks for work even without a wake-up event.
pub const DEFAULT_IDLE_POLL: Duration = Duration::from_secs(1);

/// How long running jobs may go on after shutdown starts, when nothing else is said.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// How a worker node behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The most jobs running at once.
    pub concurrency: usize,
    /// How long a lease lasts; heartbeats renew it every third of that.
    pub lease_ttl: Duration,
    /// The safety-net poll interval of an idle worker.
    pub idle_poll: Duration,
    /// How long running jobs may finish after shutdown starts before they are cancelled
    /// and handed back.
    pub shutdown_grace: Duration,
    /// The functions to serve, in this order; empty: every plugin in the registry.
    pub functions: Vec<FunctionName>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: DEFAULT_CONCURRENCY,
            lease_ttl: DEFAULT_LEASE_TTL,
            idle_poll: DEFAULT_IDLE_POLL,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            functions: Vec::new(),
        }
    }
}

/// A new worker id, `HOST-PID-RANDOM`: unique among the workers of one queue.
pub fn new_worker_id() -> String {
    let random = wasmgear_proto::sync::random_hex(3);
    format!("{}-{}-{random}", host_name(), std::process::id())
}

/// This machine's host name, as the worker list shows it.
fn host_name() -> String {
    gethostname::gethostname()
        .into_string()
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into())
}
