//! The vocabulary every wasmgear crate speaks: function names and job ids, the job record
//! and its states, progress, outcomes and error classes, the worker protocol's leases, and
//! the names of the Redis keys. No I/O: the client, the runtime and the worker all depend
//! on this crate, and it depends on none of them.
//!
//! - [`deploy`]: what the deployed-plugin store keeps about each version.
//! - [`event`]: the events published on each function's channel, typed.
//! - [`job`]: names, ids, progress, outcomes, error classes, leases.
//! - [`model`]: the job record as stored, its states, what `status` returns.
//! - [`keys`]: every Redis key name, each function's under one hash tag.
//! - [`limits`]: numbers the scripts and the Rust side share (jobs kept, log size, days).
//! - [`recent`]: a bounded set of names seen recently (lease tokens started).
//! - [`schedule`]: recurring jobs: when they tick, which tick to fire.
//! - [`trace`]: the W3C trace context a job carries from its producer to its worker.
//! - [`units`]: durations and times as people write them, and back.
//! - [`worker`]: what workers advertise in the worker list.

pub mod crypto;
pub mod deploy;
pub mod event;
pub mod job;
pub mod keys;
pub mod limits;
pub mod model;
pub mod recent;
pub mod schedule;
pub mod signing;
pub mod sync;
pub mod trace;
pub mod units;
pub mod worker;

pub use event::{Event, FunctionEvent};
pub use job::*;
pub use model::{JobRecord, JobState, JobStatus, OnFailure};
pub use trace::TraceContext;
pub use worker::{LiveWorker, WorkerAd};
