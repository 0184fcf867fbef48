//! `join`: the fan-in step of a flow. Its output is its dependencies' outputs, in the order
//! of its `after` list, one per line (each output as it is, a line break after each but the
//! last). A dependency that did not succeed fails the job for good, naming it; the input is
//! not read.

use wasmgear_guest::dependencies::{self, Dependency, State};
use wasmgear_guest::{Job, JobError, info};

/// One dependency's output, or why the join cannot use it.
fn output_of(dependency: &Dependency) -> Result<Vec<u8>, JobError> {
    match dependency.state {
        State::Succeeded => dependency.output().map_err(JobError::retry),
        State::Failed | State::Cancelled => Err(JobError::fail(format!(
            "dependency {} ended {:?}: {}",
            dependency.id,
            dependency.state,
            dependency.error.as_deref().unwrap_or("no message")
        ))),
        State::Unfinished | State::Missing => Err(JobError::fail(format!(
            "dependency {} has no output to join ({:?})",
            dependency.id, dependency.state
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
        joined.extend(output_of(&dependency)?);
        count += 1;
    }
    info!("joined the outputs of {count} dependencies");
    Ok(joined)
}

wasmgear_guest::job!(join);
