//! The WebAssembly runtime: compiles plugins and runs one job in one fresh instance.
//!
//! Knows nothing about Redis. A job comes in as [`JobInfo`](wasmgear_proto::JobInfo) and input
//! bytes and leaves as an [`Outcome`](wasmgear_proto::Outcome); what the guest reports while it
//! runs goes to the caller's [`JobHooks`].
//!
//! - [`engine`]: the shared `Engine` (pooling allocator, epoch ticker) and [`Runtime`].
//! - [`cancel`]: a request for a running job to stop ([`CancelSignal`]).
//! - [`bindings`]: the one `bindgen!` of `wit/`.
//! - [`cache`]: compiled components on disk, keyed by content and engine configuration.
//! - [`dependencies`]: what a running job reads of its dependencies, from the worker.
//! - [`checkpoint`]: where a running job's checkpoints are kept, by the worker.
//! - `imports`: the host side of each imported WIT interface.
//! - `http`: outgoing `wasi:http`, gated by the manifest's allow list.
//! - `output`: the job's log: `log` calls and captured stdout/stderr, bounded.
//! - [`manifest`]: `NAME.toml` beside a plugin: functions, limits, capabilities.
//! - [`plugin`]: a compiled, linked component ready to instantiate, with its limits.
//! - [`run`]: one job in one `Store`, traps and limits mapped to error classes.

pub mod bindings;
pub mod cache;
pub mod cancel;
pub mod checkpoint;
pub mod dependencies;
pub mod engine;
mod http;
mod imports;
pub mod manifest;
mod output;
pub mod plugin;
pub mod run;

pub use cache::{CompileCache, CompileSource};
pub use cancel::{CancelReason, CancelSignal};
pub use checkpoint::JobCheckpoints;
pub use dependencies::{Dependency, DependencyState, JobDependencies};
pub use engine::{Limits, Runtime, RuntimeConfig};
pub use manifest::{BatchSettings, Manifest, ManifestError};
pub use plugin::{InFlight, Plugin, PluginError};
pub use run::{BatchEntry, ChildFuture, ChildJobs, ChildOutcome, ChildRequest, JobHooks};
