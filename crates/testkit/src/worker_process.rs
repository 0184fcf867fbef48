//! [`WorkerProcess`]: `wasmgear worker` (or another long-running command, such as `serve`)
//! run as the real binary, in a process group of its own that is killed on drop with what
//! it started (an embedded Redis), logging to a file that is printed if the test fails.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cli::command;
use crate::process::ProcessGroup;
use crate::test_redis::TestRedis;
use crate::wait::eventually_sync;

/// How long a worker process may take to start serving: it compiles every plugin first
/// (a JavaScript component takes seconds alone), on a machine other tests keep busy. A
/// bound for a hung worker, not a speed claim.
pub const WORKER_START: Duration = Duration::from_secs(120);

/// How often a wait here looks again.
const POLL: Duration = Duration::from_millis(20);

/// A `wasmgear worker` process in a process group of its own, killed on drop with what it
/// started (an embedded Redis); its log is printed if the test fails.
pub struct WorkerProcess {
    child: ProcessGroup,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl WorkerProcess {
    /// Starts `wasmgear worker ARGS` with `env`, logging to a file.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all_args = vec!["worker"];
        all_args.extend_from_slice(args);
        WorkerProcess::spawn_command(&all_args, env)
    }

    /// Starts `wasmgear ARGS` (any long-running command: `serve`...) with `env`, logging
    /// to a file.
    pub fn spawn_command(all_args: &[&str], env: &[(&str, &str)]) -> Self {
        let log_dir = tempfile::tempdir().expect("temp dir");
        let log = log_dir.path().join("worker.log");
        let file = std::fs::File::create(&log).expect("log file");
        let child = ProcessGroup::spawn(
            command(all_args, env)
                .stdin(Stdio::null())
                .stdout(file.try_clone().expect("log file"))
                .stderr(file),
        )
        .expect("spawn wasmgear worker");
        WorkerProcess {
            child,
            log,
            _log_dir: log_dir,
        }
    }

    /// Starts `wasmgear worker --plugins PLUGINS EXTRA...` against `redis` and waits until
    /// it serves.
    pub fn serving(redis: &TestRedis, plugins: &std::path::Path, extra: &[&str]) -> Self {
        let plugins = plugins.to_str().expect("a UTF-8 path");
        let url = redis.url();
        let mut args = vec!["--plugins", plugins];
        args.extend_from_slice(extra);
        let worker = WorkerProcess::spawn(&args, &[("WASMGEAR_REDIS_URL", url.as_str())]);
        eventually_sync(WORKER_START, "the worker to start", || {
            worker.log().contains("worker started")
        });
        worker
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (e.g. "TERM", "KILL") to it.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits up to `timeout` for it to exit; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.child().try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(POLL);
        }
        None
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.child.kill();
        if std::thread::panicking() {
            eprintln!("--- worker log ---\n{}", self.log());
        }
    }
}
