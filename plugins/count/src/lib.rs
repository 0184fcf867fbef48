//! `count`: counts slowly, reporting progress and honouring cancellation; the tests use it for
//! everything that needs a job to take a while.
//!
//! Input is UTF-8 text, `"N"` or `"N MS"`: count `N` steps, pausing `MS` milliseconds before
//! each (100 ms when left out). Before every step it checks whether the job was cancelled and,
//! if so, fails with `cancelled after I of N steps`; after every step it reports progress
//! `(i, N, "step i of N")`. The output is the text `counted to N`. Input of another shape fails
//! the job for good with a message that quotes it.

use std::time::Duration;

use wasmgear_guest::{Job, JobError, cancelled, info, progress_msg};

/// The pause before each step when the input gives none, in milliseconds.
const DEFAULT_PAUSE_MS: u64 = 100;

/// What to count: `steps` steps, `pause` before each.
#[derive(Debug, PartialEq)]
struct Plan {
    steps: u64,
    pause: Duration,
}

/// Parses `"N"` or `"N MS"` (whitespace around and between is ignored).
fn parse(input: &str) -> Result<Plan, JobError> {
    let bad = || {
        JobError::fail(format!(
            "count expects \"N\" or \"N MS\" (steps, then the pause per step in milliseconds), \
             got {input:?}"
        ))
    };
    let mut words = input.split_whitespace();
    let steps = words.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let pause_ms = match words.next() {
        Some(ms) => ms.parse().map_err(|_| bad())?,
        None => DEFAULT_PAUSE_MS,
    };
    if words.next().is_some() {
        return Err(bad());
    }
    Ok(Plan {
        steps,
        pause: Duration::from_millis(pause_ms),
    })
}

/// Counts to the `N` of `input`, one step at a time.
fn count(job: &Job, input: String) -> Result<String, JobError> {
    let Plan { steps, pause } = parse(&input)?;
    info!(
        "job {}: counting to {steps}, {} ms per step",
        job.id,
        pause.as_millis()
    );
    for i in 1..=steps {
        if cancelled() {
            return Err(JobError::fail(format!(
                "cancelled after {} of {steps} steps",
                i - 1
            )));
        }
        std::thread::sleep(pause);
        progress_msg(i, steps, &format!("step {i} of {steps}"));
    }
    Ok(format!("counted to {steps}"))
}

wasmgear_guest::job!(count);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_steps_with_and_without_a_pause() {
        let plan = |steps, ms| Plan {
            steps,
            pause: Duration::from_millis(ms),
        };
        assert_eq!(parse("5").unwrap(), plan(5, DEFAULT_PAUSE_MS));
        assert_eq!(parse(" 3  20\n").unwrap(), plan(3, 20));
        assert_eq!(parse("0 0").unwrap(), plan(0, 0));
    }

    #[test]
    fn bad_input_fails_quoting_it() {
        for input in ["", "five", "5 fast", "5 10 15", "-1"] {
            let err = parse(input).unwrap_err();
            assert!(!err.is_retry());
            assert!(err.message().contains(&format!("{input:?}")), "{err}");
        }
    }
}
