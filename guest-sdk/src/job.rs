//! [`Job`]: what the worker tells a handler about the job it runs.

use crate::__bindings::wasmgear::job::types::JobInfo;

/// The job a handler is running, as the worker describes it (`job-info` in `wit/job.wit`).
///
/// The worker fills it in; a handler only reads it. It is `#[non_exhaustive]` so that later
/// versions can tell more: outside this crate, make one with [`Job::new`] (in a test, say) and
/// set the fields you need.
///
/// # Examples
///
/// ```
/// use wasmgear_guest::{Job, JobError};
///
/// fn resize(job: &Job, image: Vec<u8>) -> Result<Vec<u8>, JobError> {
///     if image.is_empty() && !job.is_last_attempt() {
///         return Err(JobError::retry(format!("empty image on attempt {}", job.attempt)));
///     }
///     Ok(image)
/// }
///
/// let mut job = Job::new("resize:1042", "resize");
/// job.max_attempts = 3;
/// assert!(resize(&job, Vec::new()).unwrap_err().is_retry());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Job {
    /// The job's id, unique within the queue, for example `resize:1042`.
    pub id: String,
    /// The function the job was enqueued for: the name of the plugin running it.
    pub function: String,
    /// Which attempt this is: 1 the first time, 2 on the first retry, and so on.
    pub attempt: u32,
    /// How many attempts the job may have in all; `attempt == max_attempts` is the last.
    pub max_attempts: u32,
    /// When the job was enqueued, in milliseconds since the Unix epoch (the queue's clock).
    pub enqueued_at_ms: u64,
    /// How long the handler may run, in milliseconds, before the worker stops it.
    pub timeout_ms: u64,
}

impl Job {
    /// A job with the given id and function, on its first and only attempt, enqueued at the
    /// epoch and with no timeout (0). Handlers are given their [`Job`] by the worker; this is
    /// for tests that call a handler directly.
    ///
    /// # Examples
    ///
    /// ```
    /// use wasmgear_guest::Job;
    ///
    /// let mut job = Job::new("thumbs:7", "thumbs");
    /// job.attempt = 2;
    /// job.max_attempts = 5;
    /// assert_eq!(job.id, "thumbs:7");
    /// assert!(!job.is_last_attempt());
    /// ```
    pub fn new(id: impl Into<String>, function: impl Into<String>) -> Job {
        Job {
            id: id.into(),
            function: function.into(),
            attempt: 1,
            max_attempts: 1,
            enqueued_at_ms: 0,
            timeout_ms: 0,
        }
    }

    /// Whether this is the job's last attempt: if it fails now, even with
    /// [`JobError::retry`](crate::JobError::retry), it is not run again.
    ///
    /// # Examples
    ///
    /// ```
    /// use wasmgear_guest::Job;
    ///
    /// let mut job = Job::new("report:9", "report");
    /// job.max_attempts = 3;
    /// job.attempt = 2;
    /// assert!(!job.is_last_attempt());
    /// job.attempt = 3;
    /// assert!(job.is_last_attempt());
    /// ```
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// Converts the record the worker passed in.
    pub(crate) fn from_wit(info: JobInfo) -> Job {
        let JobInfo {
            id,
            function,
            attempt,
            max_attempts,
            enqueued_at_ms,
            timeout_ms,
        } = info;
        Job {
            id,
            function,
            attempt,
            max_attempts,
            enqueued_at_ms,
            timeout_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_is_a_single_first_attempt() {
        let job = Job::new("a:1", "a");
        assert_eq!((job.attempt, job.max_attempts), (1, 1));
        assert!(job.is_last_attempt());
    }

    #[test]
    fn from_wit_copies_every_field() {
        let job = Job::from_wit(JobInfo {
            id: "resize:1042".into(),
            function: "resize".into(),
            attempt: 1,
            max_attempts: 4,
            enqueued_at_ms: 5,
            timeout_ms: 6,
        });
        assert_eq!(
            job,
            Job {
                id: "resize:1042".into(),
                function: "resize".into(),
                attempt: 1,
                max_attempts: 4,
                enqueued_at_ms: 5,
                timeout_ms: 6,
            }
        );
        assert!(!job.is_last_attempt());
    }
}
