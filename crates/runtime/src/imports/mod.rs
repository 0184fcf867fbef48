//! The host side of every WIT interface a job imports: one file per interface.

mod batch_jobs;
mod cancel;
mod checkpoint;
mod config;
mod dependencies;
mod jobs;
mod log;
mod progress;

/// `wasmgear:job/types` only defines types; the host has nothing to implement for it.
impl crate::bindings::wasmgear::job::types::Host for crate::run::StoreData {}
