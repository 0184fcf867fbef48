//! `reverse`: reads its input as UTF-8 text and returns it reversed, character by character
//! (Unicode scalar values, so `"añb"` becomes `"bña"`). Input that is not UTF-8 fails the job
//! for good, with a message saying so.

use wasmgear_guest::{Job, JobError};

/// Reverses `input` by `char`s.
fn reverse(_job: &Job, input: String) -> Result<String, JobError> {
    Ok(input.chars().rev().collect())
}

wasmgear_guest::job!(reverse);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverses_by_chars() {
        let job = Job::new("reverse:1", "reverse");
        assert_eq!(reverse(&job, "añb".to_string()).unwrap(), "bña");
        assert_eq!(reverse(&job, String::new()).unwrap(), "");
    }
}
