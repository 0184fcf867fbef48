//! What the benchmarks share: job hooks that drop everything, and building an example plugin
//! of `plugins/` with its own build script.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wasmgear_proto::{FunctionName, JobId, JobInfo, LogLevel, Progress};
use wasmgear_runtime::JobHooks;
// The binary's allocator (declared in the `wasmgear` library): benchmarks measure what runs.
use wasmgear as _;

/// Hooks that drop progress and log lines (a benchmark measures the job, not its reporting).
pub struct Quiet;

impl JobHooks for Quiet {
    fn progress(&self, _: Progress) {}
    fn log(&self, _: LogLevel, _: String) {}
}

/// A first attempt of job 1 of `function`, with a minute to run.
#[allow(dead_code)]
pub fn job_info(function: &str) -> JobInfo {
    JobInfo {
        id: JobId {
            function: FunctionName::new(function).unwrap(),
            seq: 1,
        },
        attempt: 1,
        max_attempts: 1,
        enqueued_at_ms: 0,
        timeout_ms: 60_000,
        trace: None,
    }
}

/// The repository's root.
#[allow(dead_code)]
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Builds `plugins/NAME` with its `build.sh` into `out` (Rust ones in the test plugins'
/// target directory, so their dependencies are compiled already); returns the build time,
/// or why it failed.
#[allow(dead_code)]
pub fn build_plugin(name: &str, out: &Path, quiet: bool) -> Result<Duration, String> {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../plugins");
    let started = Instant::now();
    let mut command = std::process::Command::new("bash");
    command
        .arg(repo().join("plugins").join(name).join("build.sh"))
        .arg(out)
        .env("WASMGEAR", env!("CARGO_BIN_EXE_wasmgear"))
        .env("CARGO_TARGET_DIR", target);
    if quiet {
        command.stderr(std::process::Stdio::null());
    }
    match command.status() {
        Ok(status) if status.success() => Ok(started.elapsed()),
        Ok(status) => Err(format!("building {name} failed ({status})")),
        Err(e) => Err(format!("cannot run the build script of {name}: {e}")),
    }
}
