//! `resume`: the checkpoints example. Runs `N` steps, saving the position after each one
//! (`checkpoint::resume_each`), and on its first attempt fails on purpose once it has done
//! half of them (`N / 2`, with a retry); the next attempt resumes from the last position
//! saved. The output says where the attempt that succeeded resumed from: `resumed from K`
//! (`resumed from 5` for `N = 10`; `resumed from 0` when it ran through at once).
//!
//! Input is UTF-8 text, `"N"` or `"N MS"`: `MS` milliseconds of work per step (none when
//! left out), so that tests can stop a worker mid-run. Input of another shape fails the job
//! for good with a message that quotes it.

use std::time::Duration;

use wasmgear_guest::{Job, JobError, checkpoint, info, progress};

/// Runs the steps of `input` from where the job's last attempt got to.
fn resume(job: &Job, input: String) -> Result<String, JobError> {
    let bad = || {
        JobError::fail(format!(
            "resume expects \"N\" or \"N MS\" (steps, then milliseconds of work per step), got {input:?}"
        ))
    };
    let mut words = input.split_whitespace();
    let steps: usize = words.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
    let pause = match words.next() {
        Some(ms) => Duration::from_millis(ms.parse().map_err(|_| bad())?),
        None => Duration::ZERO,
    };
    if words.next().is_some() {
        return Err(bad());
    }
    let fail_at = (job.attempt == 1).then_some(steps / 2);
    let from = checkpoint::resume_each(0..steps, 1, |position, _| {
        if Some(position) == fail_at {
            return Err(JobError::retry(format!(
                "failing on purpose after {position} of {steps} steps (first attempt)"
            )));
        }
        std::thread::sleep(pause);
        progress(position as u64 + 1, steps as u64);
        Ok(())
    })?;
    info!("attempt {} resumed from step {from} of {steps}", job.attempt);
    Ok(format!("resumed from {from}"))
}

wasmgear_guest::job!(resume);
