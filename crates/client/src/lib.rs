//! wasmgear's Redis protocol: enqueueing, leasing and finishing jobs.
//!
//! What a producer, an operator or a worker needs over Redis, and nothing of WebAssembly:
//! this crate never compiles wasmtime. Every state change is one call of a Redis Function
//! (the library built from `lua/`, see [`library`]), each touching only keys of one function
//! (see [`wasmgear_proto::keys`]), so the protocol works on one Redis server and on Redis
//! Cluster alike. `PROTOCOL.md` describes it for other clients.
//!
//! - [`Client`]: the producer side (enqueue, status, wait).
//! - [`WorkerQueue`]: the consumer side (lease, heartbeat, progress, complete, fail).

pub mod acl;
pub mod admin;
pub mod audit;
pub mod batch;
pub mod checkpoints;
pub mod children;
pub mod client;
pub mod connection;
pub mod dependencies;
pub mod deploy;
pub mod flow;
pub mod groups;
mod handoff;
mod links;
mod opening;
pub mod options;
pub mod propagation;
pub mod replication;
pub mod rotation;
pub mod schedule;
mod scripts;
pub mod sentinel;
pub use scripts::{library, manifest, queue_keys};
pub mod subscriber;
mod watch;
pub mod worker_queue;

pub use admin::{DailyStats, FailureGroup, FunctionConfig, QueueOverview, Setting, TimeStats};
pub use batch::{BatchSpec, BatchStatus, Callback};
pub use client::{CancelOutcome, Client, Enqueued, Service};
pub use flow::{Flow, FlowEdge, FlowJob, FlowJobStatus, FlowStatus, FlowSummary, SubmittedFlow};
pub use groups::{GroupConfig, GroupInfo, GroupSetting, GroupsOverview};
pub use opening::KeptOutput;
pub use options::{EnqueueOptions, Priority, RetryOptions, Tick};
pub use replication::MinReplicas;
pub use worker_queue::WorkerQueue;

pub use wasmgear_proto::model::{JobRecord, JobState, JobStatus};
pub use wasmgear_proto::{FunctionName, JobId, OnFailure, Progress, TraceContext};

use wasmgear_proto::NameError;

/// What can go wrong talking to the queue.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Redis could not be reached or answered with an error.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis could not be reached, or what answered is not Redis.
    #[error("cannot reach Redis at {url}: {reason}")]
    Unreachable {
        /// The URL, password redacted.
        url: String,
        /// What went wrong, and what to do.
        reason: String,
    },
    /// The server cannot run wasmgear's Functions library: Redis older than 7.0, or a user
    /// the ACL does not allow `FUNCTION LOAD` or `FCALL`.
    #[error("the Redis at {url} cannot run wasmgear's function library: {reason}")]
    Library {
        /// The URL, password redacted.
        url: String,
        /// What the server said, and what to do.
        reason: String,
    },
    /// The Redis URL does not parse.
    #[error(
        "invalid Redis URL {url:?}: {source} (expected redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss:// for TLS)"
    )]
    BadUrl {
        /// The URL given.
        url: String,
        /// Why it was refused.
        source: redis::RedisError,
    },
    /// A `redis+sentinel://` URL does not parse.
    #[error(
        "invalid Redis Sentinel URL {url:?}: {reason} (expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[?db=N&sentinel_user=U&sentinel_password=P], or rediss+sentinel:// for TLS)"
    )]
    BadSentinelUrl {
        /// The URL given, passwords redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A write asked to be confirmed by replicas (`min_replicas`), and fewer did in time.
    #[error(
        "{what} was written to the Redis primary, but only {confirmed} of the {wanted} replicas asked for confirmed it within {timeout_ms} ms, even when sent again: if the primary fails now it may be lost. Check the replicas (INFO replication on the primary); the write is safe to send again (enqueue with a uniq key to be sure of one copy)"
    )]
    NotReplicated {
        /// The write.
        what: String,
        /// How many replicas were asked for.
        wanted: u32,
        /// How many confirmed it.
        confirmed: u32,
        /// How long they were waited for, ms.
        timeout_ms: u64,
    },
    /// A function name or job id does not parse.
    #[error(transparent)]
    Name(#[from] NameError),
    /// A job option is out of range.
    #[error("invalid job option: {0}")]
    BadOption(String),
    /// Encrypted job data cannot be written or read here: the function stores only
    /// encrypted input and this client has no key, or a key is missing or wrong.
    #[error("{0}")]
    Encryption(String),
    /// No job has this id (it never existed, or its retention is over).
    #[error("no job {0}: it never existed or its result has expired")]
    NoSuchJob(JobId),
    /// No function of this name is known: nothing was ever enqueued for it, configured, or
    /// served.
    #[error(
        "no function {0}: nothing was ever enqueued for it and no worker serves it (`wasmgear queues` lists the functions)"
    )]
    NoSuchFunction(FunctionName),
    /// No flow has this id (it was never submitted, or it was forgotten with its jobs).
    #[error("no flow {0}: it was never submitted, or its jobs' retention is over")]
    NoSuchFlow(u64),
    /// No batch has this id (it was never opened, or it was forgotten).
    #[error("no batch {0}: it was never opened, or it was forgotten")]
    NoSuchBatch(String),
    /// A flow's stored record could not be read.
    #[error("flow {id} has a corrupt record: {reason}")]
    CorruptFlow {
        /// The flow.
        id: u64,
        /// What was wrong with it.
        reason: String,
    },
    /// A stored record could not be read.
    #[error("job {id} has a corrupt record: {reason}")]
    Corrupt {
        /// The job.
        id: JobId,
        /// What was wrong with it.
        reason: String,
    },
    /// Waiting for a flow ran out of time.
    #[error("gave up waiting for flow {0} after the timeout")]
    FlowWaitTimedOut(u64),
    /// Waiting for a job ran out of time.
    #[error("gave up waiting for job {0} after the timeout")]
    WaitTimedOut(JobId),
    /// The deployed-plugin store refused a change (a version that serves another function,
    /// nothing to roll back to...); nothing was changed.
    #[error("{0}")]
    DeployRefused(String),
    /// No schedule has this name.
    #[error("no schedule {0} (`wasmgear schedule list` shows them)")]
    NoSuchSchedule(String),
    /// No deployed version has this name (it was never deployed, or no longer kept).
    #[error("{0}")]
    NoSuchVersion(String),
    /// The queue's state refuses a well-formed request, and nothing was changed: a time to
    /// run at that the queue's clock has passed, a dependency that is gone, failed or
    /// cancelled, a job that is not in a state the operation applies to.
    #[error("{0}")]
    Conflict(String),
    /// A child job was refused because its parent may have no new child: its cancel was
    /// asked for, it is not running, or it has the most children one job may have.
    #[error("job {0} may have no new child: {1}")]
    ParentGone(JobId, String),
    /// A deploy could not finish: its version's chunks were being collected the whole time
    /// it waited, or a collector took it for an interrupted deploy each time it tried.
    /// Nothing was recorded; deploying again is safe.
    #[error("{0} (nothing was recorded: deploy it again)")]
    DeployInterrupted(String),
    /// A deployed version's stored chunks do not make the component that was deployed.
    #[error(
        "deployed version {version} is corrupt in Redis: {reason} (deploy the file again to repair it)"
    )]
    CorruptVersion {
        /// The version.
        version: String,
        /// What does not match.
        reason: String,
    },
}

/// What kind of failure a [`QueueError`] is, shared by every front end (the CLI's exit
/// codes, the HTTP API's error classes and statuses, the other languages' exceptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Bad input (a name, an option, a URL): nothing was changed.
    BadInput,
    /// No such job or function.
    NotFound,
    /// A well-formed request the queue's state refuses: nothing was changed.
    Conflict,
    /// Redis cannot be reached, or is not Redis.
    Unreachable,
    /// Waiting ran out of time; the job goes on.
    TimedOut,
    /// Anything else (an error Redis answered, a corrupt record, no Functions support).
    Failed,
}

impl ErrorClass {
    /// Its name in the HTTP API's errors (`bad_input`, `not_found`...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::BadInput => "bad_input",
            ErrorClass::NotFound => "not_found",
            ErrorClass::Conflict => "conflict",
            ErrorClass::Unreachable => "unreachable",
            ErrorClass::TimedOut => "timed_out",
            ErrorClass::Failed => "failed",
        }
    }

    /// The `wasmgear` CLI's exit code for it (a conflict is refused input to the CLI: 2).
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorClass::BadInput | ErrorClass::Conflict => 2,
            ErrorClass::NotFound => 5,
            ErrorClass::Unreachable => 6,
            ErrorClass::TimedOut => 4,
            ErrorClass::Failed => 1,
        }
    }
}

impl QueueError {
    /// What kind of failure this is.
    pub fn class(&self) -> ErrorClass {
        match self {
            QueueError::BadUrl { .. }
            | QueueError::BadSentinelUrl { .. }
            | QueueError::BadOption(_)
            | QueueError::Encryption(_)
            | QueueError::Name(_)
            | QueueError::DeployRefused(_)
            | QueueError::ParentGone(..) => ErrorClass::BadInput,
            QueueError::NoSuchJob(_)
            | QueueError::NoSuchFunction(_)
            | QueueError::NoSuchVersion(_)
            | QueueError::NoSuchSchedule(_)
            | QueueError::NoSuchFlow(_)
            | QueueError::NoSuchBatch(_) => ErrorClass::NotFound,
            QueueError::Conflict(_) => ErrorClass::Conflict,
            QueueError::Unreachable { .. } | QueueError::NotReplicated { .. } => {
                ErrorClass::Unreachable
            }
            QueueError::Redis(e) if e.is_io_error() || e.is_connection_dropped() => {
                ErrorClass::Unreachable
            }
            QueueError::WaitTimedOut(_) | QueueError::FlowWaitTimedOut(_) => ErrorClass::TimedOut,
            QueueError::Redis(_)
            | QueueError::Corrupt { .. }
            | QueueError::CorruptFlow { .. }
            | QueueError::CorruptVersion { .. }
            | QueueError::DeployInterrupted(_)
            | QueueError::Library { .. } => ErrorClass::Failed,
        }
    }
}

/// The result type of this module.
pub type Result<T, E = QueueError> = std::result::Result<T, E>;
