//! Child jobs: a job that enqueues more jobs and waits for them (fan-out, fan-in).
//!
//! Denied unless the plugin's manifest grants it:
//!
//! ```toml
//! [jobs]
//! enqueue = ["thumbnail"]   # the functions this plugin's jobs may enqueue
//! max_children = 100        # per job (the default)
//! ```
//!
//! A child is named within its parent by a key (when none is given, its function and input,
//! counted among the parent's children alike in both): a retried parent gets the same
//! children back instead of enqueueing them twice, whatever the order of its calls. Cancelling the parent cancels its unfinished children.

use std::time::Duration;

use crate::__bindings::wasmgear::job::jobs;

/// How a child job is to be run; the defaults are the queue's and the serving plugin's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChildOptions {
    /// Names the child within its parent (see the module's documentation).
    pub key: Option<String>,
    /// Higher runs first (-1000..1000).
    pub priority: Option<i32>,
    /// Attempts in all.
    pub max_attempts: Option<u32>,
    /// How long one attempt may run.
    pub timeout: Option<Duration>,
}

/// How a child job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded, with this output.
    Succeeded(Vec<u8>),
    /// It failed for good, with this message.
    Failed(String),
    /// It was cancelled.
    Cancelled,
}

/// Enqueues a job of `function` with `input` as a child of the running job; returns its id
/// (`FUNCTION:N`), or why it was refused (not granted, over the cap, a bad option).
///
/// ```no_run
/// use std::time::Duration;
/// use wasmgear_guest::children::{self, ChildOptions, Outcome};
///
/// let id = children::enqueue("thumbnail", b"photo.jpg", &ChildOptions::default())?;
/// match children::wait(&id, Duration::from_secs(60))? {
///     Outcome::Succeeded(output) => { let _ = output; }
///     Outcome::Failed(message) => return Err(message),
///     Outcome::Cancelled => return Err("cancelled".into()),
/// }
/// # Ok::<(), String>(())
/// ```
pub fn enqueue(function: &str, input: &[u8], options: &ChildOptions) -> Result<String, String> {
    jobs::enqueue(
        function,
        input,
        &jobs::ChildOptions {
            key: options.key.clone(),
            priority: options.priority,
            max_attempts: options.max_attempts,
            timeout_ms: options.timeout.map(|t| t.as_millis() as u64),
        },
    )
}

/// Waits up to `timeout` for job `id` (a child, or any job) to end; an error says why
/// waiting failed (the time ran out: the job goes on).
pub fn wait(id: &str, timeout: Duration) -> Result<Outcome, String> {
    let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    Ok(match jobs::wait(id, millis)? {
        jobs::Outcome::Succeeded(output) => Outcome::Succeeded(output),
        jobs::Outcome::Failed(message) => Outcome::Failed(message),
        jobs::Outcome::Cancelled => Outcome::Cancelled,
    })
}
