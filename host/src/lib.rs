//! The `wasmgear` command line: argument parsing and printing over the library crates.
//!
//! The work is done in the crates below; each may depend only on those after it:
//! - `wasmgear-worker`: the worker node, the plugin directory, the `JobSource` trait.
//! - `wasmgear-authoring`: plugin authoring tools (templates, C bindings, componentize).
//! - `wasmgear-client`: the Redis protocol (producer, operator and worker sides); never
//!   compiles wasmtime.
//! - `wasmgear-runtime`: wasmtime, plugins, manifests, limits; never talks to Redis.
//! - `wasmgear-proto`: the shared vocabulary; no I/O.

pub mod cli;

/// The allocator of everything that links this crate (the binary, its tests and
/// benchmarks): mimalloc. A job allocates on one tokio thread and is often freed on the
/// other (its lease, its result, the instance's bookkeeping); glibc's malloc took a tenth of
/// the worker's CPU per job, mimalloc half that (README, "The release build").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
