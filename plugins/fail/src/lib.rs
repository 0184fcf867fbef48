//! `fail`: a handler that always returns an error, so the tests can see a job error reach the
//! client and the queue's retry logic at work.
//!
//! - input `retry` → [`JobError::retry`]`("asked to retry")`, on every attempt, the last one
//!   included: whether the job runs again is the worker's decision, not the handler's;
//! - anything else → [`JobError::fail`]`("failed on purpose: {input}")`.
//!
//! Surrounding whitespace (a trailing newline from `echo`) is ignored; input that is not UTF-8
//! is shown lossily in the message.

use wasmgear_guest::{Job, JobError, warn};

/// Fails, as a retry or for good depending on `input`.
fn fail(job: &Job, input: Vec<u8>) -> Result<(), JobError> {
    let input = String::from_utf8_lossy(input.trim_ascii());
    if input == "retry" {
        warn!(
            "asking to retry on attempt {} of {}{}",
            job.attempt,
            job.max_attempts,
            if job.is_last_attempt() {
                " (the last)"
            } else {
                ""
            }
        );
        Err(JobError::retry("asked to retry"))
    } else {
        warn!(
            "failing on purpose on attempt {} of {}",
            job.attempt, job.max_attempts
        );
        Err(JobError::fail(format!("failed on purpose: {input}")))
    }
}

wasmgear_guest::job!(fail);
