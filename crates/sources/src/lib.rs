//! Job sources for the queues teams already run: a wasmgear worker pointed at one of them
//! runs its jobs in Wasm plugins, and the producers never know. Each protocol is one more
//! [`wasmgear_worker::JobSource`]; nothing else in the worker learns about it.
//!
//! - [`gearmonkey`]: GearMonkey's lists and hashes, with a lease added.
//! - [`rwq`]: MeVitae's redis-work-queue: the items under one key prefix.
//! - [`multi`]: several sources served by one worker.
//! - [`spec`]: the `--source` specs that name them.

pub mod gearmonkey;
pub mod multi;
pub mod rwq;
pub mod spec;

pub use multi::{AnySource, Sources};
pub use rwq::{WorkQueue, WorkQueueConfig, WorkQueueKeys};

pub use gearmonkey::{ConnectError, GearMonkey, GearMonkeyConfig, GearMonkeyKeys};
pub use spec::{Protocol, SourceSpec, SpecError};
