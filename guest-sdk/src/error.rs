//! [`JobError`]: why a job produced no output, and whether to run it again.

use std::fmt;

use crate::__bindings::wasmgear::job::types::JobError as WitJobError;

/// Why a job did not produce an output: a transient failure worth another attempt
/// ([`JobError::retry`]) or a permanent one ([`JobError::fail`]).
///
/// The message travels to the queue and on to the client waiting for the job, so make it say
/// what went wrong in terms the client understands.
///
/// Like `anyhow::Error`, `JobError` converts from every [`std::error::Error`], so `?` works on
/// any `Result` in a handler; such errors become a *fail*, with the error's chain of sources in
/// the message. Wrap an error with `.map_err(JobError::retry)` to retry on it instead. For that
/// conversion to exist, `JobError` itself does not implement [`std::error::Error`].
///
/// # Examples
///
/// ```
/// use wasmgear_guest::{Job, JobError};
///
/// fn parse_width(_job: &Job, input: String) -> Result<u32, JobError> {
///     // A `ParseIntError` becomes a fail through `?`.
///     let width: u32 = input.trim().parse()?;
///     if width == 0 {
///         return Err(JobError::fail("width must not be 0"));
///     }
///     Ok(width)
/// }
///
/// let job = Job::new("w:1", "width");
/// let err = parse_width(&job, "wide".to_string()).unwrap_err();
/// assert!(!err.is_retry());
/// assert_eq!(err.message(), "invalid digit found in string");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobError {
    retry: bool,
    message: String,
}

impl JobError {
    /// A transient failure: the queue runs the job again later, with backoff, while attempts
    /// remain ([`Job::is_last_attempt`](crate::Job::is_last_attempt)); on the last attempt it
    /// fails like [`JobError::fail`].
    ///
    /// Takes anything that displays, so it also serves as a `map_err` function.
    ///
    /// # Examples
    ///
    /// ```
    /// use wasmgear_guest::JobError;
    ///
    /// let err = JobError::retry("upstream timed out");
    /// assert!(err.is_retry());
    ///
    /// // Retry on an I/O error instead of failing for good.
    /// let read: Result<Vec<u8>, std::io::Error> =
    ///     Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out"));
    /// let err = read.map_err(JobError::retry).unwrap_err();
    /// assert!(err.is_retry());
    /// assert_eq!(err.message(), "read timed out");
    /// ```
    pub fn retry(message: impl fmt::Display) -> JobError {
        JobError {
            retry: true,
            message: message.to_string(),
        }
    }

    /// A permanent failure (bad input, a bug): the job fails for good at once, whatever
    /// attempts remain.
    ///
    /// # Examples
    ///
    /// ```
    /// use wasmgear_guest::JobError;
    ///
    /// let input = "-3";
    /// let err = JobError::fail(format!("count must be positive, got {input}"));
    /// assert!(!err.is_retry());
    /// assert_eq!(err.to_string(), "count must be positive, got -3");
    /// ```
    pub fn fail(message: impl fmt::Display) -> JobError {
        JobError {
            retry: false,
            message: message.to_string(),
        }
    }

    /// Whether this error asks for another attempt ([`JobError::retry`]) rather than failing
    /// for good ([`JobError::fail`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use wasmgear_guest::JobError;
    ///
    /// assert!(JobError::retry("busy").is_retry());
    /// assert!(!JobError::fail("bad input").is_retry());
    /// ```
    pub fn is_retry(&self) -> bool {
        self.retry
    }

    /// What went wrong, as the client will see it.
    ///
    /// # Examples
    ///
    /// ```
    /// use wasmgear_guest::JobError;
    ///
    /// assert_eq!(JobError::fail("no such page").message(), "no such page");
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Converts to the WIT `job-error` the handler export returns.
    pub(crate) fn into_wit(self) -> WitJobError {
        if self.retry {
            WitJobError::Retry(self.message)
        } else {
            WitJobError::Fail(self.message)
        }
    }
}

/// Shows the message alone, without saying whether it is a retry or a fail.
impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Any error becomes a [`JobError::fail`] whose message is the error followed by its
/// sources, `": "` between each.
impl<E: std::error::Error> From<E> for JobError {
    fn from(error: E) -> JobError {
        let mut message = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        JobError::fail(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("could not load the template")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn constructors_set_kind_and_message() {
        let retry = JobError::retry("busy");
        assert!(retry.is_retry());
        assert_eq!(retry.message(), "busy");
        let fail = JobError::fail(format!("bad {}", 42));
        assert!(!fail.is_retry());
        assert_eq!(fail.message(), "bad 42");
        assert_eq!(fail.to_string(), "bad 42");
    }

    #[test]
    fn std_errors_convert_to_fail() {
        let err: JobError = "x".parse::<u8>().unwrap_err().into();
        assert!(!err.is_retry());
        assert_eq!(err.message(), "invalid digit found in string");
    }

    #[test]
    fn conversion_keeps_the_source_chain() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no file page.html");
        let err = JobError::from(Outer(inner));
        assert_eq!(
            err.message(),
            "could not load the template: no file page.html"
        );
    }

    #[test]
    fn question_mark_converts() {
        fn parse(text: &str) -> Result<u32, JobError> {
            Ok(text.parse::<u32>()?)
        }
        assert_eq!(parse("7"), Ok(7));
        assert!(!parse("seven").unwrap_err().is_retry());
    }

    #[test]
    fn map_err_retry_keeps_the_message() {
        let read = |_: &str| -> Result<(), std::io::Error> {
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "upstream timed out",
            ))
        };
        let err = read("page.html").map_err(JobError::retry).unwrap_err();
        assert!(err.is_retry());
        assert_eq!(err.message(), "upstream timed out");
    }

    #[test]
    fn converts_to_the_wit_variant() {
        assert!(matches!(JobError::retry("a").into_wit(), WitJobError::Retry(m) if m == "a"));
        assert!(matches!(JobError::fail("b").into_wit(), WitJobError::Fail(m) if m == "b"));
    }
}
