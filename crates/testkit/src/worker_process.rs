//! [`WorkerProcess`]: `wasmgear worker` (or another long-running command, such as `serve`)
//! run as the real binary, in a process group of its own that is killed on drop with what
//! it started (an embedded Redis), logging to a file that is printed if the test fails.
//!
//! Every test and benchmark starts its workers one way, [`WorkerProcess::builder`]: the
//! Redis URL, the plugins and the test's own options, then `start()`, which returns once
//! the worker serves. Ready means the worker said so on purpose: it logged
//! [`READY_LINE`], a constant of the worker crate that README documents, not a copy of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use wasmgear_worker::READY_LINE;

use crate::cli::command;
use crate::metrics;
use crate::process::ProcessGroup;

/// How long a worker process may take to start serving: it compiles every plugin first
/// (a JavaScript component takes seconds alone), on a machine other tests keep busy. A
/// bound for a hung worker, not a speed claim.
pub const WORKER_START: Duration = Duration::from_secs(120);

/// What precedes the metrics address in the line a worker logs when it binds it.
const METRICS_FIELD: &str = "metrics=http://";

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

    /// A `wasmgear worker` on the Redis at `redis_url` (given as `WASMGEAR_REDIS_URL`), to
    /// be configured and started.
    pub fn builder(redis_url: &str) -> WorkerProcessBuilder {
        WorkerProcessBuilder {
            args: Vec::new(),
            env: vec![("WASMGEAR_REDIS_URL".into(), redis_url.into())],
        }
    }

    /// A `wasmgear worker` without a Redis URL: it starts an embedded Redis, its data and
    /// its `redis.url` file under `home` (`WASMGEAR_HOME`).
    pub fn embedded(home: &Path) -> WorkerProcessBuilder {
        let home = home.to_str().expect("a UTF-8 path");
        WorkerProcessBuilder {
            args: Vec::new(),
            env: vec![("WASMGEAR_HOME".into(), home.into())],
        }
    }

    /// Waits until it serves: it has logged [`READY_LINE`], the line a worker prints on
    /// purpose once it leases. Fails the test, with the log, if it exits first or takes
    /// longer than [`WORKER_START`].
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + WORKER_START;
        loop {
            if self.log().contains(READY_LINE) {
                return;
            }
            if let Ok(Some(status)) = self.child.child().try_wait() {
                panic!(
                    "the worker exited ({status}) before it served:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the worker did not serve within {WORKER_START:?}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// The address (`HOST:PORT`) it serves `/metrics`, `/healthz` and `/readyz` on: a
    /// worker started with [`WorkerProcessBuilder::metrics`] logs it (the field `metrics`
    /// of the line it logs when it binds the port, before it serves).
    pub fn metrics_address(&self) -> String {
        let log = self.log();
        log.split(METRICS_FIELD)
            .nth(1)
            .and_then(|rest| rest.split("/metrics").next())
            .map(str::to_string)
            .unwrap_or_else(|| {
                panic!("the worker names no metrics address (start it with .metrics()):\n{log}")
            })
    }

    /// The sum of its samples of `metric` with (at least) `labels`, scraped now: what it
    /// has done (`wasmgear_jobs_started_total`, `wasmgear_jobs_finished_total` with its
    /// `state` and `error_class`...). 0 for a counter that has not moved.
    pub fn metric(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        metrics::sum(&metrics::scrape(&self.metrics_address()), metric, labels)
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

/// A `wasmgear worker` to start: its plugins, options and environment
/// ([`WorkerProcess::builder`], [`WorkerProcess::embedded`]).
#[must_use = "a builder starts nothing until start() or spawn()"]
pub struct WorkerProcessBuilder {
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl WorkerProcessBuilder {
    /// Serves the plugins in `dir` (`--plugins DIR`).
    pub fn plugins(self, dir: &Path) -> Self {
        self.args(&["--plugins", dir.to_str().expect("a UTF-8 path")])
    }

    /// Serves metrics and health checks on a free loopback port (`--metrics 127.0.0.1:0`),
    /// for [`WorkerProcess::metric`] and [`WorkerProcess::metrics_address`].
    pub fn metrics(self) -> Self {
        self.args(&["--metrics", "127.0.0.1:0"])
    }

    /// More command-line options of `wasmgear worker`, as they are (`--concurrency 8`,
    /// `--source SPEC`...).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// An environment variable of the process (`WASMGEAR_HOME`...).
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Starts it and waits until it serves ([`WorkerProcess::wait_ready`]).
    pub fn start(self) -> WorkerProcess {
        let mut worker = self.spawn();
        worker.wait_ready();
        worker
    }

    /// Starts it without waiting: for a test that watches the start itself (a worker
    /// that must refuse to start, one whose Redis is not there yet).
    pub fn spawn(self) -> WorkerProcess {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        WorkerProcess::spawn(&args, &env)
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
