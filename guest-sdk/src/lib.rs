//! Write wasmgear job handlers in Rust.
//!
//! A wasmgear worker runs every job in a fresh instance of a WebAssembly component. This crate
//! turns one plain Rust function into such a component: you write a handler that takes the
//! [`Job`] being run and its input, and returns its output or a [`JobError`]; the [`job!`] macro
//! does the rest. While it runs, the handler can report [`progress`], write to the worker's log
//! ([`info!`] and friends), ask whether it has been [`cancelled`], read the settings its
//! manifest grants ([`config`]), and save a [`checkpoint`] its next attempt resumes from.
//! A plugin that takes many jobs in one call (a [`batch`](mod@batch) plugin) exports a
//! batch handler with [`batch!`] instead.
//!
//! # A complete plugin
//!
//! `Cargo.toml`: the crate name is the name of the function clients enqueue jobs for.
//!
//! ```toml
//! [package]
//! name = "reverse"
//! version = "0.1.0"
//! edition = "2024"
//!
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! wasmgear-guest = { path = "../../guest-sdk" }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```
//! use wasmgear_guest::{Job, JobError, info};
//!
//! /// Reverses the text it is given.
//! fn reverse(job: &Job, input: String) -> Result<String, JobError> {
//!     info!("reversing {} bytes for job {}", input.len(), job.id);
//!     Ok(input.chars().rev().collect())
//! }
//!
//! wasmgear_guest::job!(reverse);
//! # fn main() {}
//! ```
//!
//! That is all: one function and one macro line. The handler's input and output types pick how
//! the job's bytes are read and written ([`FromInput`], [`IntoOutput`]): `Vec<u8>` takes them
//! as they are, `String` insists on UTF-8, `()` returns nothing, and with the `json` feature
//! `Json<T>` goes through serde.
//!
//! # Building
//!
//! Build the crate as a `cdylib` for WASI 0.2; the Rust toolchain then emits a component (not a
//! core module) that exports `wasmgear:job/handler`:
//!
//! ```text
//! rustup target add wasm32-wasip2     # once
//! cargo build --target wasm32-wasip2 --release
//! # -> target/wasm32-wasip2/release/reverse.wasm
//! ```
//!
//! The same crate also compiles for the host's own target, so `cargo test` can run a
//! handler's logic natively; only the calls that reach the worker ([`progress`], [`log`],
//! [`cancelled`] and the log macros) panic there, as no worker is present.
//!
//! # What the worker guarantees, and what it expects
//!
//! - **A fresh instance per job.** The worker instantiates the component, calls the handler
//!   exactly once, and throws the instance away. Statics, caches and anything else in memory
//!   start anew for every job: nothing survives from one job to the next.
//! - **Retry or fail.** Return [`JobError::retry`] for a transient failure (an upstream timeout,
//!   a busy resource): the queue runs the job again later, with backoff, while attempts remain
//!   ([`Job::attempt`], [`Job::is_last_attempt`]). Return [`JobError::fail`] for a permanent one
//!   (bad input, a bug): the job fails for good at once. The `?` operator turns any
//!   [`std::error::Error`] into a *fail*; write `.map_err(JobError::retry)?` where the error
//!   is worth another try.
//! - **Cancellation is cooperative.** A client may cancel a job, its lease may be lost, or the
//!   worker may shut down. Long handlers should check [`cancelled`] between steps and, once it
//!   says `true`, stop soon and return an error. A handler that keeps going is stopped by the
//!   worker after a grace period, as is one that runs past [`Job::timeout_ms`].
//! - **Panics trap.** A panic aborts the instance: the job ends without an output or an
//!   error of its own, and the worker decides what happens to it. The panic message is also
//!   written to the job's log at [`Level::Error`], so prefer returning a [`JobError`].
//! - **Sandboxed.** The handler may use the WASI 0.2 interfaces the standard library builds on
//!   (clocks, random, `std::thread::sleep`, stdio), but files, network and environment are
//!   denied unless the worker grants them.
//!
//! # Features
//!
//! - `json` (off by default): `Json<T>`, job input and output as JSON through
//!   `serde` and `serde_json`.
#![deny(missing_docs)]

mod error;
mod host;
mod io;
mod job;

pub mod batch;
pub mod checkpoint;
pub mod children;
pub mod dependencies;
pub use error::JobError;
pub use host::{Level, cancelled, config, log, progress, progress_msg};
#[cfg(feature = "json")]
pub use io::Json;
pub use io::{FromInput, IntoOutput};
pub use job::Job;

/// The raw bindings wit-bindgen generates for the `resumable` world of `wit/job.wit` (the
/// `job` world, child jobs, dependencies and checkpoints).
///
/// Public only because the macros of this crate expand to paths into it in the plugin's
/// crate. Not part of the API: use the items at the crate root instead.
#[doc(hidden)]
#[allow(missing_docs)]
pub mod __bindings {
    wit_bindgen::generate!({
        world: "resumable",
        path: "../wit",
        // `job!` expands to the generated `export!` in the plugin's crate, not in this one.
        pub_export_macro: true,
        default_bindings_module: "wasmgear_guest::__bindings",
    });
}

/// The raw bindings of the `batch` world (a batch plugin), sharing the interfaces it has in
/// common with [`__bindings`]. Not part of the API: use [`batch`](mod@batch) and [`batch!`] instead.
#[doc(hidden)]
#[allow(missing_docs)]
pub mod __batch_bindings {
    wit_bindgen::generate!({
        world: "batch",
        path: "../wit",
        with: {
            "wasmgear:job/types@0.1.0": crate::__bindings::wasmgear::job::types,
            "wasmgear:job/log@0.1.0": crate::__bindings::wasmgear::job::log,
            "wasmgear:job/cancel@0.1.0": crate::__bindings::wasmgear::job::cancel,
            "wasmgear:job/config@0.1.0": crate::__bindings::wasmgear::job::config,
        },
        pub_export_macro: true,
        export_macro_name: "__export_batch",
        default_bindings_module: "wasmgear_guest::__batch_bindings",
    });
}

/// What [`job!`] expands to calls into here. Not part of the API.
#[doc(hidden)]
pub mod __private {
    use crate::__bindings::wasmgear::job::types;
    use crate::{FromInput, IntoOutput, Job, JobError};

    pub use crate::__bindings::exports::wasmgear::job::handler::Guest;
    pub use types::{JobError as WitJobError, JobInfo};

    /// Runs one job through `handler`: converts the job's description and input, calls the
    /// handler, converts its output, and maps a [`JobError`] to the WIT `job-error`.
    pub fn run<I, O, F>(handler: F, info: JobInfo, input: Vec<u8>) -> Result<Vec<u8>, WitJobError>
    where
        F: FnOnce(&Job, I) -> Result<O, JobError>,
        I: FromInput,
        O: IntoOutput,
    {
        #[cfg(target_arch = "wasm32")]
        crate::host::log_panics();

        let job = Job::from_wit(info);
        I::from_input(input)
            .and_then(|input| handler(&job, input))
            .and_then(IntoOutput::into_output)
            .map_err(JobError::into_wit)
    }

    pub use crate::__batch_bindings::exports::wasmgear::job::batch_handler::{
        BatchJob as WitBatchJob, Guest as BatchGuest,
    };

    /// Runs a batch through `handler`: gives it the batch's jobs and maps its results to
    /// the WIT's (a handler that returns another number of results than it was given jobs
    /// fails the whole batch at the worker, which says so).
    pub fn run_batch<F>(handler: F, jobs: Vec<WitBatchJob>) -> Vec<Result<Vec<u8>, WitJobError>>
    where
        F: FnOnce(Vec<crate::batch::BatchJob>) -> Vec<Result<Vec<u8>, JobError>>,
    {
        #[cfg(target_arch = "wasm32")]
        crate::host::log_panics();

        let jobs = jobs
            .into_iter()
            .enumerate()
            .map(|(index, job)| {
                crate::batch::BatchJob::new(
                    Job::from_wit(job.job),
                    job.input,
                    u32::try_from(index).unwrap_or(u32::MAX),
                )
            })
            .collect();
        handler(jobs)
            .into_iter()
            .map(|result| result.map_err(JobError::into_wit))
            .collect()
    }
}

/// Exports a batch handler as this component's entry point: the one entry point of a batch
/// plugin (see [`batch`](mod@crate::batch)).
///
/// Write `wasmgear_guest::batch!(handler);` once, at the top level of the plugin's
/// `lib.rs`, where `handler` is a function of the shape
///
/// ```text
/// fn handler(jobs: Vec<BatchJob>) -> Vec<Result<Vec<u8>, JobError>>
/// ```
///
/// returning one result per job, in order. [`batch::each`] runs a one-job function over
/// the batch. A crate uses either `batch!` or [`job!`], once.
#[macro_export]
macro_rules! batch {
    ($handler:expr $(,)?) => {
        const _: () = {
            struct __WasmgearBatchHandler;

            impl $crate::__private::BatchGuest for __WasmgearBatchHandler {
                fn run_batch(
                    jobs: ::std::vec::Vec<$crate::__private::WitBatchJob>,
                ) -> ::std::vec::Vec<
                    ::std::result::Result<::std::vec::Vec<u8>, $crate::__private::WitJobError>,
                > {
                    $crate::__private::run_batch($handler, jobs)
                }
            }

    $crate::__batch_bindings::__export_batch!(__WasmgearBatchHandler with_types_in $crate::__batch_bindings);
        };
    };
}

/// Exports a handler function as this component's job handler: the one entry point of a
/// plugin.
///
/// Write `wasmgear_guest::job!(handler);` once, at the top level of the plugin's `lib.rs`,
/// where `handler` is a function (or closure) of the shape
///
/// ```text
/// fn handler(job: &Job, input: I) -> Result<O, JobError>
/// ```
///
/// with any input type `I` that implements [`FromInput`] and any output type `O` that
/// implements [`IntoOutput`]. The macro defines a hidden type that implements the component's
/// `handler` export by decoding the input into an `I`, calling `handler`, and encoding its
/// `O`; an input that does not decode fails the job without calling the handler.
///
/// A crate may use `job!` only once: a component exports exactly one handler.
///
/// # Examples
///
/// Bytes in, bytes out:
///
/// ```
/// use wasmgear_guest::{Job, JobError};
///
/// fn echo(_job: &Job, input: Vec<u8>) -> Result<Vec<u8>, JobError> {
///     Ok(input)
/// }
///
/// wasmgear_guest::job!(echo);
/// # fn main() {}
/// ```
///
/// Text in, nothing out, retrying a transient failure:
///
/// ```no_run
/// use wasmgear_guest::{Job, JobError, warn};
///
/// fn notify(job: &Job, address: String) -> Result<(), JobError> {
///     if address.is_empty() {
///         return Err(JobError::fail("no address to notify"));
///     }
///     if job.attempt < 2 {
///         warn!("mail server busy on attempt {}", job.attempt);
///         return Err(JobError::retry("mail server busy"));
///     }
///     Ok(())
/// }
///
/// wasmgear_guest::job!(notify);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! job {
    ($handler:expr $(,)?) => {
        const _: () = {
            struct __WasmgearJobHandler;

            impl $crate::__private::Guest for __WasmgearJobHandler {
                fn run(
                    job: $crate::__private::JobInfo,
                    input: ::std::vec::Vec<u8>,
                ) -> ::std::result::Result<::std::vec::Vec<u8>, $crate::__private::WitJobError>
                {
                    $crate::__private::run($handler, job, input)
                }
            }

    $crate::__bindings::export!(__WasmgearJobHandler with_types_in $crate::__bindings);
        };
    };
}

#[cfg(test)]
mod tests {
    use super::__private::{JobInfo, WitJobError, run};
    use super::*;

    fn info() -> JobInfo {
        JobInfo {
            id: "test:1".to_string(),
            function: "test".to_string(),
            attempt: 2,
            max_attempts: 3,
            enqueued_at_ms: 1_700_000_000_000,
            timeout_ms: 30_000,
        }
    }

    #[test]
    fn run_passes_the_job_and_input_to_the_handler() {
        let output = run(
            |job: &Job, input: String| -> Result<String, JobError> {
                assert_eq!(job.id, "test:1");
                assert_eq!(job.function, "test");
                assert_eq!((job.attempt, job.max_attempts), (2, 3));
                assert_eq!(job.enqueued_at_ms, 1_700_000_000_000);
                assert_eq!(job.timeout_ms, 30_000);
                Ok(input.to_uppercase())
            },
            info(),
            b"abc".to_vec(),
        );
        assert_eq!(output.unwrap(), b"ABC");
    }

    #[test]
    fn run_maps_errors_to_the_wit_variant() {
        let retry = run(
            |_: &Job, _: Vec<u8>| -> Result<(), JobError> { Err(JobError::retry("busy")) },
            info(),
            Vec::new(),
        );
        assert!(matches!(retry, Err(WitJobError::Retry(m)) if m == "busy"));

        let fail = run(
            |_: &Job, _: Vec<u8>| -> Result<(), JobError> { Err(JobError::fail("broken")) },
            info(),
            Vec::new(),
        );
        assert!(matches!(fail, Err(WitJobError::Fail(m)) if m == "broken"));
    }

    #[test]
    fn run_fails_undecodable_input_without_calling_the_handler() {
        let result = run(
            |_: &Job, _: String| -> Result<(), JobError> { panic!("handler called") },
            info(),
            vec![0xff],
        );
        let Err(WitJobError::Fail(message)) = result else {
            panic!("expected a fail, got {result:?}");
        };
        assert!(message.contains("not valid UTF-8"), "{message}");
    }

    fn double(_: &Job, input: Vec<u8>) -> Result<Vec<u8>, JobError> {
        Ok(input.repeat(2))
    }

    #[test]
    fn run_accepts_a_plain_function() {
        assert_eq!(run(double, info(), b"ab".to_vec()).unwrap(), b"abab");
    }
}
