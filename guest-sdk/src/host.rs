//! Calls from a running handler to the worker: progress reports, log lines, and the
//! cancellation check (the `progress`, `log` and `cancel` imports of `wit/job.wit`), with the
//! log macros built on them.
//!
//! Outside a worker (a native `cargo test`, say) there is no one to call: every function here
//! panics there.

use crate::__bindings::wasmgear::job::{
    cancel, config as wit_config, log as wit_log, progress as wit_progress,
};

/// Reports that `done` units of `total` are finished.
///
/// Clients waiting on the job see each report live, and a later status query sees the last
/// one. Pass `total` 0 when the amount of work is unknown. Reports that come faster than
/// clients can be told may be coalesced, but the last one always arrives and they always
/// arrive in order, so report as often as is natural. To say what is going on as well, use
/// [`progress_msg`].
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::{Job, JobError, progress};
///
/// fn checksum(_job: &Job, input: Vec<u8>) -> Result<Vec<u8>, JobError> {
///     let chunks = input.chunks(64 * 1024);
///     let total = chunks.len() as u64;
///     let mut sum = 0u8;
///     for (i, chunk) in chunks.enumerate() {
///         sum = chunk.iter().fold(sum, |s, b| s.wrapping_add(*b));
///         progress(i as u64 + 1, total);
///     }
///     Ok(vec![sum])
/// }
/// # checksum(&Job::new("c:1", "checksum"), vec![1, 2, 3]).unwrap();
/// ```
pub fn progress(done: u64, total: u64) {
    wit_progress::report(done, total, None);
}

/// Reports that `done` units of `total` are finished, with a short message saying what is
/// going on ("resizing page 3").
///
/// Otherwise like [`progress`].
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::progress_msg;
///
/// let pages = 12;
/// for page in 1..=pages {
///     // ... render the page ...
///     progress_msg(page, pages, &format!("rendered page {page} of {pages}"));
/// }
/// ```
pub fn progress_msg(done: u64, total: u64, message: &str) {
    wit_progress::report(done, total, Some(message));
}

/// Whether the job has been asked to stop: cancelled by a client, its lease lost, or the worker
/// shutting down.
///
/// Cancellation is cooperative: a handler that does long work should ask between steps and,
/// once this is `true`, stop soon and return an error (a [`JobError::fail`](crate::JobError)
/// is usual, as nobody waits for the job any more). One that keeps going is stopped by the
/// worker after a grace period. Asking is cheap.
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::{Job, JobError, cancelled};
///
/// fn crunch(_job: &Job, input: Vec<u8>) -> Result<Vec<u8>, JobError> {
///     let mut out = Vec::with_capacity(input.len());
///     for (i, byte) in input.iter().enumerate() {
///         if i % 4096 == 0 && cancelled() {
///             return Err(JobError::fail(format!("cancelled after {i} bytes")));
///         }
///         out.push(byte.rotate_left(3));
///     }
///     Ok(out)
/// }
/// # crunch(&Job::new("c:1", "crunch"), vec![1]).unwrap();
/// ```
pub fn cancelled() -> bool {
    cancel::cancelled()
}

/// The value of configuration key `key`, as the plugin's manifest grants it (the `[config]`
/// table of `NAME.toml` beside `NAME.wasm`), or `None` when the manifest does not set it.
///
/// Configuration is read-only and the same for every job of the plugin; use it for settings
/// that belong to the deployment rather than to one job (an endpoint, a quality level).
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::{Job, JobError, config};
///
/// fn compress(_job: &Job, input: Vec<u8>) -> Result<Vec<u8>, JobError> {
///     let level: u32 = config("level").and_then(|l| l.parse().ok()).unwrap_or(6);
///     // ... compress `input` at `level` ...
///     # let _ = level;
///     Ok(input)
/// }
/// ```
pub fn config(key: &str) -> Option<String> {
    wit_config::get(key)
}

/// How important a log line is, from the most detailed to the most severe.
///
/// The worker decides which levels it records; [`Level::Trace`] is usually off.
///
/// # Examples
///
/// ```
/// use wasmgear_guest::Level;
///
/// assert!(Level::Trace < Level::Debug);
/// assert!(Level::Warn < Level::Error);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing, off unless asked for.
    Trace,
    /// Detail that helps to debug a handler.
    Debug,
    /// Normal operation worth recording.
    Info,
    /// Something unexpected that the handler got over.
    Warn,
    /// Something failed.
    Error,
}

impl Level {
    fn to_wit(self) -> wit_log::Level {
        match self {
            Level::Trace => wit_log::Level::Trace,
            Level::Debug => wit_log::Level::Debug,
            Level::Info => wit_log::Level::Info,
            Level::Warn => wit_log::Level::Warn,
            Level::Error => wit_log::Level::Error,
        }
    }
}

/// Writes one line to the worker's log at `level`, tagged with the job's id.
///
/// The worker cuts long lines and rate-limits a flood of them; logging never fails and never
/// blocks the job. The macros [`trace!`](crate::trace), [`debug!`](crate::debug),
/// [`info!`](crate::info), [`warn!`](crate::warn) and [`error!`](crate::error) call this with a
/// `format!`ted message.
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::{Level, log};
///
/// let level = if cfg!(debug_assertions) { Level::Debug } else { Level::Info };
/// log(level, "starting");
/// ```
pub fn log(level: Level, message: &str) {
    wit_log::write(level.to_wit(), message);
}

/// Writes a [`Level::Trace`] line to the job's log: `trace!` takes the arguments of
/// [`format!`].
///
/// # Examples
///
/// ```no_run
/// let row = 17;
/// wasmgear_guest::trace!("parsed row {row}");
/// ```
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => {
        $crate::log($crate::Level::Trace, &::std::format!($($arg)+))
    };
}

/// Writes a [`Level::Debug`] line to the job's log: `debug!` takes the arguments of
/// [`format!`].
///
/// # Examples
///
/// ```no_run
/// let header = [0x89u8, b'P', b'N', b'G'];
/// wasmgear_guest::debug!("header bytes {header:02x?}");
/// ```
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => {
        $crate::log($crate::Level::Debug, &::std::format!($($arg)+))
    };
}

/// Writes a [`Level::Info`] line to the job's log: `info!` takes the arguments of
/// [`format!`].
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::info;
///
/// let (width, height) = (640, 480);
/// info!("resizing to {width}x{height}");
/// ```
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => {
        $crate::log($crate::Level::Info, &::std::format!($($arg)+))
    };
}

/// Writes a [`Level::Warn`] line to the job's log: `warn!` takes the arguments of
/// [`format!`].
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::warn;
///
/// let skipped = 3;
/// warn!("skipped {} malformed rows", skipped);
/// ```
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => {
        $crate::log($crate::Level::Warn, &::std::format!($($arg)+))
    };
}

/// Writes a [`Level::Error`] line to the job's log: `error!` takes the arguments of
/// [`format!`].
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::error;
///
/// let url = "https://example.com/feed";
/// error!("feed {url} answered 503");
/// ```
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => {
        $crate::log($crate::Level::Error, &::std::format!($($arg)+))
    };
}

/// Makes a panic also write its message to the job's log before the instance traps, so the
/// worker's log says why the job died. Keeps the previous hook (the standard one prints to
/// stderr). A handler that sets its own hook replaces this one.
#[cfg(target_arch = "wasm32")]
pub(crate) fn log_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // One line: "handler panicked at src/lib.rs:7:9: no input".
            let location = info
                .location()
                .map(|l| format!(" at {l}"))
                .unwrap_or_default();
            let message = info
                .payload_as_str()
                .unwrap_or("(a payload that is not a string)");
            log(
                Level::Error,
                &format!("handler panicked{location}: {message}"),
            );
            previous(info);
        }));
    });
}
