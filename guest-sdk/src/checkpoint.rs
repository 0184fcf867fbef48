//! Checkpoints: a long job saves where it got to, and its next attempt resumes from there
//! instead of starting again. The next attempt is a retry after a failure, a reclaim after
//! its worker died or lost the lease, or a `wasmgear retry` of the failed job (`--fresh`
//! starts it over). A job that succeeds drops its checkpoint.
//!
//! [`save`] is cheap and never blocks: the worker writes the latest checkpoint out at most
//! every 50 ms, and always the last one before the attempt's result. A checkpoint is at most
//! the size the plugin's manifest allows (`[limits] checkpoint`, 1 MiB by default): save
//! where the job got to, not its data.
//!
//! [`resume_each`] covers the common case, a job that works through a list of items:
//!
//! ```no_run
//! use wasmgear_guest::{Job, JobError, checkpoint};
//!
//! fn import(job: &Job, input: String) -> Result<String, JobError> {
//!     let rows: Vec<&str> = input.lines().collect();
//!     let from = checkpoint::resume_each(rows, 100, |_position, row| {
//!         // ... write `row` somewhere (idempotently: the rows after the last checkpoint
//!         // saved may run again) ...
//!         Ok(())
//!     })?;
//!     Ok(format!("imported, resumed from row {from}"))
//! }
//! # import(&Job::new("import:1", "import"), String::new()).unwrap();
//! ```

use crate::__bindings::wasmgear::job::checkpoint as wit;
use crate::JobError;

/// The checkpoint to resume from: the last one this attempt saved, else the last one an
/// earlier attempt of the job saved that reached the queue; `None` on a fresh start. An
/// error (the queue unreachable) is worth a retry.
pub fn load() -> Result<Option<Vec<u8>>, JobError> {
    wit::load().map_err(JobError::retry)
}

/// Saves `data` as the job's checkpoint, in place of the one before. Refused, saving
/// nothing, when `data` is larger than the plugin's manifest allows or when the job came
/// from another protocol's queue, which keeps no checkpoints: the error fails the job.
pub fn save(data: &[u8]) -> Result<(), JobError> {
    wit::save(data).map_err(JobError::fail)
}

/// Runs `step` for each of `items`, from where the job's last attempt got to, and saves the
/// position reached (the number of items done, as decimal text) after every `every` items
/// and after the last. `step` gets each item's position (from 0) and the item. Before each
/// item it checks whether the job was asked to stop ([`cancelled`](crate::cancelled)): then
/// it saves the position and returns a retry, so that the next attempt goes on from there.
///
/// Returns the position it resumed from: 0 on a fresh start. The items from the last saved
/// position on run again after a failure, so `step` should not mind doing one twice.
pub fn resume_each<I>(
    items: I,
    every: usize,
    mut step: impl FnMut(usize, I::Item) -> Result<(), JobError>,
) -> Result<usize, JobError>
where
    I: IntoIterator,
{
    let from = match load()? {
        Some(saved) => position_of(&saved)?,
        None => 0,
    };
    let every = every.max(1);
    let mut done = from;
    for item in items.into_iter().skip(from) {
        if crate::cancelled() {
            save(done.to_string().as_bytes())?;
            return Err(JobError::retry(format!(
                "asked to stop after {done} items; the next attempt resumes there"
            )));
        }
        step(done, item)?;
        done += 1;
        if (done - from) % every == 0 {
            save(done.to_string().as_bytes())?;
        }
    }
    if (done - from) % every != 0 {
        save(done.to_string().as_bytes())?;
    }
    Ok(from)
}

/// The position a checkpoint of [`resume_each`] holds; another checkpoint fails the job.
fn position_of(saved: &[u8]) -> Result<usize, JobError> {
    std::str::from_utf8(saved)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| {
            JobError::fail(format!(
                "the job's checkpoint is not a position resume_each saved: {:?}",
                String::from_utf8_lossy(&saved[..saved.len().min(64)])
            ))
        })
}

#[cfg(test)]
mod tests {
    /// A saved position reads back; anything else is refused with what it holds.
    #[test]
    fn positions_read_back_and_others_are_refused() {
        assert_eq!(super::position_of(b"17").unwrap(), 17);
        let refused = super::position_of(b"{\"row\": 3}").unwrap_err();
        assert!(format!("{refused:?}").contains("row"), "{refused:?}");
    }
}
