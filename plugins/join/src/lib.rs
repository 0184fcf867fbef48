//! `join`: the fan-in step of a flow. Its output is its dependencies' outputs, in the order
//! of its `after` list, one per line (each output as it is, a line break after each but the
//! last). A dependency that failed or was cancelled can only reach it through an edge whose
//! policy lets it run anyway (`ignore` or `continue`): its line is then `error: ` and the
//! dependency's error, where its output would be. The input is not read.

use wasmgear_guest::dependencies::{self, Dependency, State};
use wasmgear_guest::{Job, JobError, info};

/// One dependency's line: its output, or its error.
fn line_of(dependency: &Dependency) -> Result<Vec<u8>, JobError> {
    match dependency.state {
        State::Succeeded => dependency.output().map_err(JobError::retry),
        State::Failed | State::Cancelled | State::Missing => Ok(format!(
            "error: {} {}: {}",
            dependency.id,
            match dependency.state {
                State::Failed => "failed",
                State::Cancelled => "was cancelled",
                _ => "is gone",
            },
            dependency.error.as_deref().unwrap_or("no message")
        )
        .into_bytes()),
        State::Unfinished => Err(JobError::retry(format!(
            "dependency {} has not ended yet",
            dependency.id
        ))),
    }
}

/// Joins the dependencies' outputs, one per line.
fn join(_job: &Job, _input: Vec<u8>) -> Result<Vec<u8>, JobError> {
    let mut joined = Vec::new();
    let mut count = 0usize;
    for dependency in dependencies::all() {
        let dependency = dependency.map_err(JobError::retry)?;
        if count > 0 {
            joined.push(b'\n');
        }
        joined.extend(line_of(&dependency)?);
        count += 1;
    }
    info!("joined the outputs of {count} dependencies");
    Ok(joined)
}

wasmgear_guest::job!(join);
