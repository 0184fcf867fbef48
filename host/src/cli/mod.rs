//! The `wasmgear` command line: one file per subcommand.
//!
//! Subcommands talk to Redis only through [`crate::queue`]; `worker` also builds the runtime.

mod cancel;
mod enqueue;
mod status;
mod worker;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
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
    /// Show a job's state, progress and result.
    Status(status::StatusArgs),
    /// Cancel a job: a waiting one at once, a running one by asking its worker to stop it.
    Cancel(cancel::CancelArgs),
}

impl Cli {
    /// Runs the chosen subcommand; returns the process exit code.
    pub async fn run(self) -> anyhow::Result<i32> {
        match self.command {
            Command::Worker(args) => worker::run(args).await,
            Command::Enqueue(args) => enqueue::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Cancel(args) => cancel::run(args).await,
        }
    }
}

/// Parses a duration: `250ms`, `10s`, `5m`, `2h`, `1d`, or a plain number of seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().with_context(|| {
        format!("invalid duration {text:?}: expected e.g. 250ms, 10s, 5m, 2h, 1d")
    })?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86400.0,
        _ => bail!("invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m, h or d)"),
    };
    Duration::try_from_secs_f64(seconds)
        .with_context(|| format!("invalid duration {text:?}: out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_refuse_garbage() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        for bad in ["", "s", "10x", "-1s", "1e999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }
}
