//! The one `bindgen!` of `wit/`: Rust types and traits for the `wasmgear:job` worlds
//! (`resumable`, which includes `dependent`, which includes `parent`, which includes `job`).
//!
//! Imports are plain (synchronous) host functions that only hand data to channels and never
//! block, but for `jobs` (child jobs), `dependencies` and `checkpoint.load`, which reach the queue
//! asynchronously. The export is called asynchronously so that a job waiting on WASI I/O
//! (a sleep, a socket) yields its thread to other jobs.

// The generated items carry the WIT's own comments, where it has them.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    world: "resumable",
    path: "../../wit",
    // Child jobs, dependencies and loading a checkpoint reach the queue: they are async on
    // the host (to the guest they still block).
    imports: {
        "wasmgear:job/jobs.enqueue": async,
        "wasmgear:job/jobs.wait": async,
        "wasmgear:job/dependencies.count": async,
        "wasmgear:job/dependencies.page": async,
        "wasmgear:job/dependencies.output": async,
        "wasmgear:job/checkpoint.load": async,
    },
    exports: { default: async },
});

/// The host's view of a job component: the `resumable` world, which includes `dependent`,
/// `parent` and `job` (a component built against any of them instantiates the same).
pub use self::Resumable as Job;
/// A job component linked and ready to instantiate.
pub use self::ResumablePre as JobPre;

pub use self::wasmgear::job::types::JobInfo as WitJobInfo;
pub use exports::wasmgear::job::handler::JobError;

/// The `batch` world (a batch plugin: `batch-handler` exported, `batch-jobs` imported),
/// sharing the interfaces it has in common with the job worlds (their host side is the same).
pub mod batch {
    #![allow(missing_docs)]
    wasmtime::component::bindgen!({
        world: "batch",
        path: "../../wit",
        with: {
            "wasmgear:job/types": crate::bindings::wasmgear::job::types,
            "wasmgear:job/log": crate::bindings::wasmgear::job::log,
            "wasmgear:job/cancel": crate::bindings::wasmgear::job::cancel,
            "wasmgear:job/config": crate::bindings::wasmgear::job::config,
        },
        exports: { default: async },
    });

    pub use self::exports::wasmgear::job::batch_handler::BatchJob as WitBatchJob;
}

/// A batch plugin's component linked and ready to instantiate.
pub use self::batch::BatchPre;
