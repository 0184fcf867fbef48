//! Batch plugins: one call takes many jobs of a function, e.g. to write a thousand rows in
//! one statement.
//!
//! A batch plugin exports `wasmgear:job/batch-handler` (the WIT world `batch`) instead of
//! the one-job `handler`: write a function from the batch's [`BatchJob`]s to one result per
//! job, in the same order, and export it with [`batch!`](crate::batch!). Its manifest says
//! how many jobs a call takes and how long the worker waits for a batch to fill:
//!
//! ```toml
//! batch = { max = 100, wait = "20ms" }
//! ```
//!
//! Each job succeeds, fails or asks for a retry on its own, with its own output, attempts
//! and history. The limits (timeout, memory) hold for the whole call, and the instance is
//! fresh per batch, not per job: jobs of one batch share its memory while the call runs.
//! [`each`] runs a per-job function over a batch, skipping (as cancelled) the jobs whose
//! cancellation was asked for before their turn.
//!
//! # Examples
//!
//! ```
//! use wasmgear_guest::batch::{self, BatchJob};
//! use wasmgear_guest::{Job, JobError};
//!
//! /// Adds up the numbers of each job's input.
//! fn sum(_job: &Job, input: String) -> Result<String, JobError> {
//!     let mut total = 0i64;
//!     for word in input.split_whitespace() {
//!         total += word.parse::<i64>().map_err(|_| JobError::fail(format!("{word:?} is not a number")))?;
//!     }
//!     Ok(total.to_string())
//! }
//!
//! fn sum_batch(jobs: Vec<BatchJob>) -> Vec<Result<Vec<u8>, JobError>> {
//!     batch::each(jobs, sum)
//! }
//!
//! wasmgear_guest::batch!(sum_batch);
//! # fn main() {}
//! ```

use crate::{FromInput, IntoOutput, Job, JobError};

/// One job of a batch: what a one-job handler would be given, and its place in the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchJob {
    /// The job.
    pub job: Job,
    /// Its input, byte for byte as the client enqueued it.
    pub input: Vec<u8>,
    /// Its place in the batch, from 0.
    pub index: u32,
}

impl BatchJob {
    /// A job of a batch at place `index`: the worker gives a batch its jobs; this is for
    /// tests that call a batch handler directly.
    pub fn new(job: Job, input: impl Into<Vec<u8>>, index: u32) -> BatchJob {
        BatchJob {
            job,
            input: input.into(),
            index,
        }
    }

    /// Whether this job has been asked to stop (a client cancelled it, or its lease was
    /// lost) while the batch runs: give it an error and go on with the others (the worker
    /// records it as cancelled). Panics outside a worker.
    pub fn cancelled(&self) -> bool {
        #[cfg(target_arch = "wasm32")]
        {
            crate::__batch_bindings::wasmgear::job::batch_jobs::cancelled(self.index)
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            panic!("BatchJob::cancelled asks the worker, and no worker runs this code")
        }
    }
}

/// Runs `handler` over each job of `jobs` in turn, as a one-job handler would run (its input
/// decoded into `I`, its `O` encoded), and collects one result per job, in order. A job whose
/// cancellation was asked for before its turn is not run: its result is an error saying so.
/// A job that does not decode fails alone.
///
/// # Examples
///
/// ```no_run
/// use wasmgear_guest::batch::{self, BatchJob};
/// use wasmgear_guest::{Job, JobError};
///
/// fn shout(jobs: Vec<BatchJob>) -> Vec<Result<Vec<u8>, JobError>> {
///     batch::each(jobs, |_job: &Job, text: String| Ok::<_, JobError>(text.to_uppercase()))
/// }
/// ```
pub fn each<I, O, F>(jobs: Vec<BatchJob>, handler: F) -> Vec<Result<Vec<u8>, JobError>>
where
    F: FnMut(&Job, I) -> Result<O, JobError>,
    I: FromInput,
    O: IntoOutput,
{
    each_unless(jobs, handler, BatchJob::cancelled)
}

/// [`each`], asking `stopped` whether a job is to be skipped (a test's stand-in for the
/// worker).
fn each_unless<I, O, F>(
    jobs: Vec<BatchJob>,
    mut handler: F,
    stopped: impl Fn(&BatchJob) -> bool,
) -> Vec<Result<Vec<u8>, JobError>>
where
    F: FnMut(&Job, I) -> Result<O, JobError>,
    I: FromInput,
    O: IntoOutput,
{
    jobs.into_iter()
        .map(|job| {
            if stopped(&job) {
                return Err(JobError::fail("cancelled before its turn in the batch"));
            }
            let BatchJob { job, input, .. } = job;
            I::from_input(input)
                .and_then(|input| handler(&job, input))
                .and_then(IntoOutput::into_output)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(inputs: &[&str]) -> Vec<BatchJob> {
        inputs
            .iter()
            .enumerate()
            .map(|(i, input)| BatchJob::new(Job::new(format!("t:{i}"), "t"), *input, i as u32))
            .collect()
    }

    #[test]
    fn each_runs_every_job_in_order_and_skips_the_cancelled() {
        let mut seen = Vec::new();
        let results = each_unless(
            jobs(&["a", "b", "c", "\u{0}bad"]),
            |job: &Job, text: String| {
                seen.push(job.id.clone());
                if text.starts_with('\0') {
                    return Err(JobError::retry("bad"));
                }
                Ok::<_, JobError>(text.to_uppercase())
            },
            |job| job.index == 1,
        );
        assert_eq!(seen, ["t:0", "t:2", "t:3"]);
        assert_eq!(results[0].as_ref().unwrap(), b"A");
        assert!(
            results[1]
                .as_ref()
                .unwrap_err()
                .message()
                .contains("cancelled")
        );
        assert_eq!(results[2].as_ref().unwrap(), b"C");
        assert!(results[3].as_ref().unwrap_err().is_retry());
    }

    #[test]
    fn a_job_that_does_not_decode_fails_alone() {
        let mut batch = jobs(&["ok"]);
        batch.push(BatchJob::new(Job::new("t:1", "t"), vec![0xff], 1));
        let results = each_unless(
            batch,
            |_: &Job, text: String| Ok::<_, JobError>(text),
            |_| false,
        );
        assert!(results[0].is_ok());
        assert!(results[1].as_ref().unwrap_err().message().contains("UTF-8"));
    }
}
