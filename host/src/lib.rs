//! wasmgear: a job queue whose workers run every job in a fresh, sandboxed WebAssembly
//! component.
//!
//! # Layout
//! - [`job`]: the shared vocabulary (function names, job ids, progress, outcomes, error
//!   classes); depends on nothing else here.
//! - [`queue`]: wasmgear's Redis protocol (Lua scripts, keys, producer and worker APIs);
//!   knows nothing about WebAssembly.
//! - [`runtime`]: wasmtime (engine, bindings, host imports, plugins, one job in one
//!   store); knows nothing about Redis.
//! - [`plugins`]: the plugin directory and the registry of loaded plugins.
//! - [`worker`]: the worker node, the only room that joins queue and runtime through the
//!   [`worker::JobSource`] trait.
//! - [`redis_server`]: a private, supervised `redis-server` child (embedded default, tests).
//! - [`units`]: durations and times as people write them (CLI and manifests).
//! - [`authoring`]: tools for plugin authors (project templates, C bindings, componentize);
//!   only reads and writes files.
//! - [`cli`]: the `wasmgear` command line, one file per subcommand.

pub mod authoring;
pub mod cli;
pub mod job;
pub mod plugins;
pub mod queue;
pub mod redis_server;
pub mod runtime;
pub mod units;
pub mod worker;
