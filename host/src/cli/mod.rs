//! The `wasmgear` command line: one file per subcommand.
//!
//! Subcommands talk to Redis only through [`crate::queue`]; `worker` also builds the runtime.

mod author;
mod bulk;
mod cancel;
mod config;
mod enqueue;
mod failed;
mod jobs;
mod logs;
mod plugins;
mod queues;
mod retry;
mod stats;
mod status;
mod worker;
mod workers;

use std::path::PathBuf;

use anyhow::{Context, bail};

pub use crate::units::{parse_duration, parse_time};
use clap::{Parser, Subcommand};

/// The directory for local state (the embedded Redis) when `WASMGEAR_HOME` is not set.
pub const DEFAULT_HOME: &str = ".wasmgear";
/// The file in the home directory that tells the CLI where the embedded Redis listens.
pub const REDIS_URL_FILE: &str = "redis.url";

/// wasmgear: a job queue whose workers run every job in a fresh, sandboxed WebAssembly
/// component.
#[derive(Debug, Parser)]
#[command(name = "wasmgear", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How to reach Redis; shared by every subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct RedisArgs {
    /// Redis URL (redis://HOST:PORT[/DB]). Without it the CLI uses the embedded Redis
    /// started by `wasmgear worker` in the same WASMGEAR_HOME.
    #[arg(long = "redis", env = "WASMGEAR_REDIS_URL")]
    pub url: Option<String>,

    /// Directory for local state: the embedded Redis' data and the file telling the CLI
    /// where it listens.
    #[arg(long, env = "WASMGEAR_HOME", default_value = DEFAULT_HOME)]
    pub home: PathBuf,
}

impl RedisArgs {
    /// A queue client for the Redis these arguments name.
    pub async fn client(&self) -> anyhow::Result<crate::queue::Client> {
        let url = self.resolve()?;
        crate::queue::Client::connect(&url)
            .await
            .with_context(|| format!("cannot connect to Redis at {url}"))
    }

    /// The Redis URL to use: the one given, else the embedded Redis' (from its URL file).
    pub fn resolve(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.url {
            return Ok(url.clone());
        }
        let file = self.home.join(REDIS_URL_FILE);
        match std::fs::read_to_string(&file) {
            Ok(url) if !url.trim().is_empty() => Ok(url.trim().to_string()),
            _ => bail!(
                "no Redis to talk to: pass --redis URL or set WASMGEAR_REDIS_URL, or start \
                 `wasmgear worker` without a URL to run an embedded Redis (it writes {file:?})"
            ),
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a worker node: lease jobs and run each in a fresh instance of its plugin.
    Worker(worker::WorkerArgs),
    /// Enqueue a job and print its id (or, with --wait, its output).
    Enqueue(enqueue::EnqueueArgs),
    /// Enqueue many jobs from JSON lines (stdin or a file) and print their ids.
    Bulk(bulk::BulkArgs),
    /// Show a job's state, progress and result.
    Status(status::StatusArgs),
    /// Print a job's log: its log lines, stdout and stderr, attempt by attempt.
    Logs(logs::LogsArgs),
    /// List the live workers: host, pid, functions and plugin versions, running jobs.
    Workers(workers::WorkersArgs),
    /// Check a plugin directory offline: each plugin's functions, version, limits and
    /// grants, or why it cannot load (exit 1).
    Plugins(plugins::PluginsArgs),
    /// Cancel a job: a waiting one at once, a running one by asking its worker to stop it.
    Cancel(cancel::CancelArgs),
    /// Per function: jobs queued, scheduled, running, waiting on dependencies, finished;
    /// live workers; paused or not.
    Queues(queues::QueuesArgs),
    /// Failure groups with their counts, or (with --group) the failed jobs of one group.
    Failed(failed::FailedArgs),
    /// Run a failed or cancelled job again, or a whole failure group (--group).
    Retry(retry::RetryArgs),
    /// A function's statistics for one day: wait and run times, failures, retries.
    Stats(stats::StatsArgs),
    /// Find jobs by tag, or a function's jobs by state.
    Jobs(jobs::JobsArgs),
    /// Add or remove tags of a job.
    Tag(jobs::TagArgs),
    /// Show or change a function's settings: concurrency cap, rate limit, jobs kept.
    Config(config::ConfigArgs),
    /// Pause a function: workers start none of its jobs (running ones finish; enqueueing
    /// goes on).
    Pause(config::PauseArgs),
    /// Resume a paused function.
    Resume(config::PauseArgs),
    /// Write a new plugin project (Rust, Python, JavaScript or C) that builds NAME.wasm.
    New(author::NewArgs),
    /// Build a plugin project made by `new` and check that the result is a job component.
    Build(author::BuildArgs),
    /// Write the C bindings of the job world (job.h, job.c, job_component_type.o).
    Bindings(author::BindingsArgs),
    /// Make a core WebAssembly module (C, Zig, AssemblyScript, ...) into a job component.
    Componentize(author::ComponentizeArgs),
}

impl Cli {
    /// Runs the chosen subcommand; returns the process exit code.
    pub async fn run(self) -> anyhow::Result<i32> {
        match self.command {
            Command::Worker(args) => worker::run(args).await,
            Command::Enqueue(args) => enqueue::run(args).await,
            Command::Bulk(args) => bulk::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Cancel(args) => cancel::run(args).await,
            Command::Logs(args) => logs::run(args).await,
            Command::Workers(args) => workers::run(args).await,
            Command::Plugins(args) => plugins::run(args).await,
            Command::Queues(args) => queues::run(args).await,
            Command::Failed(args) => failed::run(args).await,
            Command::Retry(args) => retry::run(args).await,
            Command::Stats(args) => stats::run(args).await,
            Command::Jobs(args) => jobs::run(args).await,
            Command::Tag(args) => jobs::tag(args).await,
            Command::Config(args) => config::run(args).await,
            Command::Pause(args) => config::pause(args, true).await,
            Command::Resume(args) => config::pause(args, false).await,
            Command::New(args) => author::new(args),
            Command::Build(args) => author::build(args),
            Command::Bindings(args) => author::bindings(args),
            Command::Componentize(args) => author::componentize(args),
        }
    }
}

/// Prints `value` as pretty JSON on stdout.
pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Prints rows under `headers` in aligned columns (the last column unpadded).
pub(crate) fn print_table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let text: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, cell)| match i == last {
                true => cell.to_string(),
                false => format!("{cell:<width$}", width = widths[i]),
            })
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(headers.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
}
