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
