//! `clock`: returns the wall-clock time at which the handler was entered, in nanoseconds
//! since the Unix epoch (decimal text). The benchmarks time enqueue → guest entry with it
//! (the worker and the client run on the same machine, so their clocks agree).

use std::time::{SystemTime, UNIX_EPOCH};

use wasmgear_guest::{Job, JobError};

fn clock(_job: &Job, _input: Vec<u8>) -> Result<String, JobError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| JobError::fail(format!("the clock is before 1970: {e}")))?;
    Ok(now.as_nanos().to_string())
}

wasmgear_guest::job!(clock);
