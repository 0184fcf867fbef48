//! The WebAssembly runtime: compiles plugins and runs one job in one fresh instance.
//!
//! Knows nothing about Redis. A job comes in as [`JobInfo`](crate::job::JobInfo) and input
//! bytes and leaves as an [`Outcome`](crate::job::Outcome); what the guest reports while it
//! runs goes to the caller's [`JobHooks`].
//!
//! - [`engine`]: the shared `Engine` (pooling allocator, epoch ticker) and [`Runtime`].
//! - [`bindings`]: the one `bindgen!` of `wit/`.
//! - `imports`: the host side of each imported WIT interface.
//! - `output`: the job's log: `log` calls and captured stdout/stderr, bounded.
//! - [`plugin`]: a compiled, linked component ready to instantiate.
//! - [`run`]: one job in one `Store`, traps and limits mapped to error classes.

pub mod bindings;
pub mod engine;
mod imports;
mod output;
pub mod plugin;
pub mod run;

pub use engine::{Limits, Runtime, RuntimeConfig};
pub use plugin::{Plugin, PluginError};
pub use run::JobHooks;
