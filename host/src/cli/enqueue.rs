//! `wasmgear enqueue`: enqueue a job, and optionally wait for it.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use super::status::print_failure;
use super::{RedisArgs, parse_duration, parse_time};
use crate::job::{FunctionName, JobId, Progress};
use crate::queue::client::EnqueueOptions;
use crate::queue::{JobState, Priority};

/// Options of `wasmgear enqueue`.
#[derive(Debug, clap::Args)]
pub struct EnqueueArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The function to run (the plugin FUNCTION.wasm serves it).
    function: String,

    /// The job's input as text; `-` reads it from stdin. Empty when neither this nor
    /// --input-file is given.
    input: Option<String>,

    /// Read the job's input from this file.
    #[arg(long, conflicts_with = "input")]
    input_file: Option<PathBuf>,

    /// Priority: low, normal, high, or a number from -1000 to 1000 (higher runs first).
    #[arg(long, default_value = "normal")]
    priority: String,

    /// Run the job no sooner than this from now (e.g. 30s, 5m).
    #[arg(long, value_parser = parse_duration, conflicts_with = "at")]
    delay: Option<Duration>,

    /// Run the job no sooner than this time: seconds since the Unix epoch or
    /// YYYY-MM-DDTHH:MM:SSZ. A time in the past is refused.
    #[arg(long, value_parser = parse_time)]
    at: Option<SystemTime>,

    /// How long one attempt may run [default: the plugin's, else 60s].
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,

    /// Attempts in all, retries included [default: the plugin's, else 3].
    #[arg(long)]
    max_attempts: Option<u32>,

    /// How long the finished job and its output are kept.
    #[arg(long, default_value = "25h", value_parser = parse_duration)]
    retention: Duration,

    /// How long the job is kept if it fails for good (to look at and retry it).
    #[arg(long, default_value = "7d", value_parser = parse_duration)]
    failed_retention: Duration,

    /// Unique key (Gearman): while an unfinished job of this function has the same key, print
    /// that job's id instead of enqueueing another.
    #[arg(long)]
    uniq: Option<String>,

    /// Tag the job (repeatable); `wasmgear jobs --tag TAG` finds it.
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,

    /// Run only after this job (of any function) has succeeded (repeatable). If it fails or
    /// is cancelled, this job is cancelled.
    #[arg(long = "after", value_name = "JOB_ID")]
    after: Vec<String>,

    /// Refuse to enqueue (exit 1, nothing written) unless a live worker serves the function
    /// (GearMonkey's roll call). Workers may still die between the check and the job.
    #[arg(long)]
    require_worker: bool,

    /// Wait for the job to end, show its progress, then print its output (exit 0) or its
    /// error (exit 1).
    #[arg(long)]
    wait: bool,

    /// With --wait: give up waiting after this long (exit 4); the job itself goes on.
    #[arg(long, value_parser = parse_duration)]
    wait_timeout: Option<Duration>,
}

pub async fn run(args: EnqueueArgs) -> anyhow::Result<i32> {
    let function = FunctionName::new(args.function.clone())?;
    let options = EnqueueOptions {
        priority: args.priority.parse::<Priority>()?,
        max_attempts: args.max_attempts,
        timeout: args.timeout,
        retention: args.retention,
        failed_retention: args.failed_retention,
        delay: args.delay.unwrap_or_default(),
        at: args.at,
        uniq: args.uniq.clone(),
        tags: args.tags.clone(),
        after: args
            .after
            .iter()
            .map(|id| id.parse::<JobId>())
            .collect::<Result<_, _>>()?,
    };
    options.validate()?;
    let input = read_input(&args)?;
    let client = args.redis.client().await?;
    if args.require_worker && client.live_workers(&function).await? == 0 {
        anyhow::bail!(
            "no live worker serves function {function}: start `wasmgear worker` with a plugin for it \
             (nothing was enqueued)"
        );
    }
    let enqueued = client
        .submit(&function, &[(&input, options)])
        .await?
        .into_iter()
        .next()
        .context("the queue answered no job id")?;
    let id = enqueued.id;
    if !enqueued.created {
        eprintln!("an unfinished job with this uniq key exists: {id}");
    }
    if !args.wait {
        println!("{id}");
        return Ok(0);
    }

    eprintln!("enqueued {id}");
    let mut display = ProgressDisplay::new();
    let waited = client
        .wait(&id, args.wait_timeout, |p| display.show(p))
        .await;
    display.finish();
    let status = match waited {
        Ok(status) => status,
        Err(crate::queue::QueueError::WaitTimedOut(id)) => {
            eprintln!("gave up waiting for {id}; it goes on (see `wasmgear status {id}`)");
            return Ok(4);
        }
        Err(e) => return Err(e.into()),
    };
    match status.record.state {
        JobState::Succeeded => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(status.output.as_deref().unwrap_or_default())?;
            if stdout.is_terminal() {
                writeln!(stdout)?;
            }
            Ok(0)
        }
        _ => {
            print_failure(&status);
            Ok(1)
        }
    }
}

fn read_input(args: &EnqueueArgs) -> anyhow::Result<Vec<u8>> {
    if let Some(path) = &args.input_file {
        return std::fs::read(path).with_context(|| format!("cannot read the input file {path:?}"));
    }
    match args.input.as_deref() {
        Some("-") => {
            let mut input = Vec::new();
            std::io::stdin()
                .read_to_end(&mut input)
                .context("cannot read the input from stdin")?;
            Ok(input)
        }
        Some(text) => Ok(text.as_bytes().to_vec()),
        None => Ok(Vec::new()),
    }
}

/// Shows progress on stderr: a bar on a terminal, one line per report otherwise.
struct ProgressDisplay {
    bar: Option<indicatif::ProgressBar>,
}

impl ProgressDisplay {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(0);
            if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
            {
                bar.set_style(style);
            }
            bar
        });
        ProgressDisplay { bar }
    }

    fn show(&mut self, progress: &Progress) {
        let message = progress.message.clone().unwrap_or_default();
        match &self.bar {
            Some(bar) => {
                bar.set_length(progress.total);
                bar.set_position(progress.done);
                bar.set_message(message);
            }
            None => eprintln!("progress {}/{} {message}", progress.done, progress.total),
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}
