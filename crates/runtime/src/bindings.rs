//! The one `bindgen!` of `wit/`: Rust types and traits for the `wasmgear:job` world.
//!
//! Imports are plain (synchronous) host functions: they only hand data to channels and
//! never block. The export is called asynchronously so that a job waiting on WASI I/O
//! (a sleep, a socket) yields its thread to other jobs.

// The generated items carry the WIT's own comments, where it has them.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    world: "job",
    path: "../../wit",
    exports: { default: async },
});

pub use self::wasmgear::job::types::JobInfo as WitJobInfo;
pub use exports::wasmgear::job::handler::JobError;
