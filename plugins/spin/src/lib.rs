//! `spin`: burns CPU in a tight loop and never asks whether it was cancelled; the tests use it
//! to prove that the worker's deadline and cancel grace period stop a job that ignores them.
//!
//! Input is UTF-8 text: `"MS"` spins for `MS` milliseconds and returns `spun for MS ms`;
//! `"forever"` never returns. Input of another shape fails the job for good.

use std::time::{Duration, Instant};

use wasmgear_guest::{Job, JobError};

/// How long to spin: `None` for ever.
fn parse(input: &str) -> Result<Option<Duration>, JobError> {
    match input.trim() {
        "forever" => Ok(None),
        ms => ms
            .parse()
            .map(|ms| Some(Duration::from_millis(ms)))
            .map_err(|_| {
                JobError::fail(format!("spin expects \"MS\" or \"forever\", got {input:?}"))
            }),
    }
}

/// Spins for the time given by `input`, without a single cancellation check.
fn spin(_job: &Job, input: String) -> Result<String, JobError> {
    let limit = parse(&input)?;
    let started = Instant::now();
    let mut counter: u64 = 0;
    loop {
        // Work the optimiser cannot remove, with a clock check now and then.
        counter = std::hint::black_box(counter.wrapping_mul(6364136223846793005).wrapping_add(1));
        if counter % 4096 == 0
            && let Some(limit) = limit
            && started.elapsed() >= limit
        {
            return Ok(format!("spun for {} ms", limit.as_millis()));
        }
    }
}

wasmgear_guest::job!(spin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_milliseconds_or_forever() {
        assert_eq!(parse("250").unwrap(), Some(Duration::from_millis(250)));
        assert_eq!(parse(" forever\n").unwrap(), None);
        assert!(parse("soon").is_err());
    }
}
