//! A running job's checkpoint (`wasmgear:job/checkpoint`): the worker provides a
//! [`JobCheckpoints`] that keeps it with the job (the runtime never talks to Redis); the
//! host import bounds every save by the plugin's limit before it is handed over, and
//! answers `load` from what this attempt saved before it asks.

use crate::run::ChildFuture;

/// Where a running job's checkpoints are kept. Errors are sentences the guest sees.
pub trait JobCheckpoints: Send + Sync {
    /// The checkpoint an earlier attempt of the job left, if any.
    fn load(&self) -> ChildFuture<Result<Option<Vec<u8>>, String>>;
    /// Keeps `data` (within the plugin's limit) as the job's checkpoint. Must not block:
    /// the latest one is written out later, and always before the attempt's result.
    fn save(&self, data: Vec<u8>) -> Result<(), String>;
}
