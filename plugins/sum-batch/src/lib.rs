//! `sum-batch`: a batch plugin (the WIT world `batch`). Each job's input is whole numbers
//! separated by white space; its output is their sum and the size of the batch it ran in:
//! `6 (in a batch of 100)`. Empty input sums to 0 (the benchmarks' no-op job).
//!
//! Each job ends on its own: a word that is not a whole number fails that job for good
//! (`"x" is not a whole number`), and an input starting with `flaky` asks for a retry on
//! the job's first attempt (the numbers after it are summed on the next). An input
//! starting with `sleep MS` sleeps that many milliseconds first, on the job's first attempt
//! only (the tests' long batch). A job whose cancellation was asked for before its turn is
//! skipped (`batch::each`).
//!
//! Its manifest (`sum-batch.toml` beside the component) says how many jobs a call takes:
//! `batch = { max = 100, wait = "20ms" }`.

use wasmgear_guest::batch::{self, BatchJob};
use wasmgear_guest::{Job, JobError};

/// Sums one job's numbers; `size` is the batch's.
fn sum(job: &Job, input: String, size: usize) -> Result<String, JobError> {
    let mut words = input.split_whitespace().peekable();
    if words.peek() == Some(&"sleep") {
        words.next();
        let ms: u64 = words
            .next()
            .and_then(|ms| ms.parse().ok())
            .ok_or_else(|| JobError::fail("`sleep` takes the milliseconds to sleep"))?;
        if job.attempt == 1 {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
    if words.peek() == Some(&"flaky") {
        words.next();
        if job.attempt == 1 {
            return Err(JobError::retry("flaky on its first attempt"));
        }
    }
    let mut total = 0i64;
    for word in words {
        let n: i64 = word
            .parse()
            .map_err(|_| JobError::fail(format!("{word:?} is not a whole number")))?;
        total = total
            .checked_add(n)
            .ok_or_else(|| JobError::fail("the sum does not fit 64 bits"))?;
    }
    Ok(format!("{total} (in a batch of {size})"))
}

/// Sums each job of the batch.
fn sum_batch(jobs: Vec<BatchJob>) -> Vec<Result<Vec<u8>, JobError>> {
    let size = jobs.len();
    batch::each(jobs, |job: &Job, input: String| sum(job, input, size))
}

wasmgear_guest::batch!(sum_batch);
