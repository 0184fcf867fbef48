//! What a running job reads of its dependencies (`wasmgear:job/dependencies`): the worker
//! provides a [`JobDependencies`] for it (the runtime never talks to Redis), and the host
//! import bounds every read before it asks.

use crate::run::ChildFuture;

/// The most dependencies one `page` call answers.
pub const MAX_PAGE: u32 = 1000;

/// The most bytes of an output one `output` call answers.
pub const MAX_OUTPUT_PIECE: u32 = 1024 * 1024;

/// How a dependency stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DependencyState {
    /// It succeeded: its output can be read.
    Succeeded,
    /// It failed for good.
    Failed,
    /// It was cancelled.
    Cancelled,
    /// It has not ended yet.
    Unfinished,
    /// It is not kept: it never existed, or it was forgotten after its retention.
    Missing,
}

/// One dependency of a running job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    /// Its id (`FUNCTION:N`).
    pub id: String,
    /// Its function.
    pub function: String,
    /// How it stands.
    pub state: DependencyState,
    /// The size of its output in bytes: 0 unless it succeeded.
    pub output_size: u64,
    /// The message it failed or was cancelled with.
    pub error: Option<String>,
}

/// The queue behind a running job's dependencies. Errors are sentences the guest sees.
pub trait JobDependencies: Send + Sync {
    /// How many dependencies the job has.
    fn count(&self) -> ChildFuture<Result<u32, String>>;
    /// Up to `max` (at most [`MAX_PAGE`]) dependencies from position `start`, in the order of
    /// the job's `after` list.
    fn page(&self, start: u32, max: u32) -> ChildFuture<Result<Vec<Dependency>, String>>;
    /// Up to `max` (at most [`MAX_OUTPUT_PIECE`]) bytes of the output of the dependency at
    /// `position`, from byte `offset`.
    fn output(&self, position: u32, offset: u64, max: u32) -> ChildFuture<Result<Vec<u8>, String>>;
}
