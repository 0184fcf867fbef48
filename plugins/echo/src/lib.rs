//! `echo`: returns its input unchanged, byte for byte.
//!
//! The smallest possible job handler; the tests use it to see a payload make the whole trip
//! from client to component and back.

use wasmgear_guest::{Job, JobError};

/// Returns `input` as it came.
fn echo(_job: &Job, input: Vec<u8>) -> Result<Vec<u8>, JobError> {
    Ok(input)
}

wasmgear_guest::job!(echo);
