//! The one `bindgen!` of `wit/`: Rust types and traits for the `wasmgear:job` worlds (`parent`,
//! which includes `job`).
//!
//! Imports are plain (synchronous) host functions that only hand data to channels and never
//! block, but for `jobs` (child jobs), which waits on the queue asynchronously. The export is called asynchronously so that a job waiting on WASI I/O
//! (a sleep, a socket) yields its thread to other jobs.

// The generated items carry the WIT's own comments, where it has them.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    world: "parent",
    path: "../../wit",
    // Enqueueing and waiting for child jobs reach the queue: they are async on the host
    // (to the guest they still block).
    imports: {
        "wasmgear:job/jobs.enqueue": async,
        "wasmgear:job/jobs.wait": async,
    },
    exports: { default: async },
});

/// The host's view of a job component: the `parent` world, which includes `job` (a
/// component built against `job` alone instantiates the same).
pub use self::Parent as Job;
/// A job component linked and ready to instantiate.
pub use self::ParentPre as JobPre;

pub use self::wasmgear::job::types::JobInfo as WitJobInfo;
pub use exports::wasmgear::job::handler::JobError;
