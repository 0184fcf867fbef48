//! `wasmgear enqueue`: enqueue a job, and optionally wait for it.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use super::{RedisArgs, parse_duration, parse_time};
use wasmgear_client::EnqueueOptions;
use wasmgear_client::Priority;
use wasmgear_proto::{FunctionName, JobId, OnFailure};

/// Options of `wasmgear enqueue`.
#[derive(Debug, clap::Args)]
pub struct EnqueueArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    replicas: super::ReplicaArgs,

    /// The function to run (the plugin FUNCTION.wasm serves it).
    #[arg(required_unless_present = "bulk")]
    function: Option<String>,

    /// The job's input as text; `-` reads it from stdin. Empty when no input option is given.
    #[arg(conflicts_with_all = ["input_file", "input_json", "json"])]
    input: Option<String>,

    /// Read the job's input from this file.
    #[arg(long, conflicts_with_all = ["input_json", "json"])]
    input_file: Option<PathBuf>,

    /// The job's input as a JSON literal, checked to be valid JSON (e.g. --input-json
    /// '{"n": 3}').
    #[arg(long, value_name = "JSON", conflicts_with = "json")]
    input_json: Option<String>,

    /// The old spelling of --input-json, kept for one release with a warning: everywhere
    /// else --json means "print JSON".
    #[arg(long, value_name = "JSON", hide = true)]
    json: Option<String>,

    /// Enqueue many jobs from JSON lines on stdin instead, as `wasmgear bulk` does; prints
    /// one id per line.
    #[arg(long, conflicts_with_all = ["function", "input", "input_file", "input_json", "json", "wait"])]
    bulk: bool,

    /// Priority: low, normal, high, or a number from -1000 to 1000 (higher runs first).
    #[arg(long, default_value = "normal")]
    priority: String,

    /// Run the job no sooner than this from now (e.g. 30s, 5m).
    #[arg(long, value_parser = parse_duration, conflicts_with = "at")]
    delay: Option<Duration>,

    /// Run the job no sooner than this time: seconds since the Unix epoch or
    /// an RFC 3339 time (2027-01-01T09:00:00Z, 2027-01-01T10:00:00+01:00). A time in the past
    /// is refused.
    #[arg(long, value_parser = parse_time)]
    at: Option<SystemTime>,

    /// How long one attempt may run [default: the plugin's, else 60s].
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,

    /// Attempts in all, retries included [default: the plugin's, else 3].
    #[arg(long, visible_alias = "attempts")]
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

    /// With --uniq: once the job holding the key has succeeded, the key goes on answering
    /// with it for this long (e.g. 10m): the same work is not done twice within it.
    #[arg(long, value_parser = parse_duration, requires = "uniq", conflicts_with_all = ["debounce", "throttle"])]
    uniq_for: Option<Duration>,

    /// With --uniq: the job waits this long; enqueued again with the key before it starts,
    /// that job takes the new input and waits again (the last of a burst runs).
    #[arg(long, value_parser = parse_duration, requires = "uniq", conflicts_with_all = ["throttle", "delay", "at"])]
    debounce: Option<Duration>,

    /// With --uniq: at most N jobs with the key per INTERVAL (1/10s); beyond, the latest one
    /// made is printed instead.
    #[arg(long, value_name = "N/INTERVAL", requires = "uniq")]
    throttle: Option<String>,

    /// A job that has not started this long from now (e.g. 5m) ends `expired` and never
    /// runs: for work that is worse late than never.
    #[arg(long, value_parser = parse_duration, conflicts_with = "expires_at")]
    expires_in: Option<Duration>,

    /// The same as a time: seconds since the Unix epoch or RFC 3339; must not have passed.
    #[arg(long, value_parser = parse_time)]
    expires_at: Option<SystemTime>,

    /// The job's group (a tenant, customer or document key): the function's jobs are run
    /// round robin across groups, each within its own limits (`wasmgear config F
    /// --group-concurrency N`; 1 runs a group's jobs one at a time, in order).
    #[arg(long)]
    group: Option<String>,

    /// Tag the job (repeatable); `wasmgear jobs --tag TAG` finds it.
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,

    /// Run only after this job (of any function) has succeeded (repeatable). If it fails or
    /// is cancelled, this job is cancelled.
    #[arg(long = "after", value_name = "JOB_ID")]
    after: Vec<String>,

    /// Run after this job (repeatable) even if it fails or is cancelled: the job reads it
    /// as failed, with its error. Another dependency's failure still cancels it.
    #[arg(long = "after-ignore", value_name = "JOB_ID")]
    after_ignore: Vec<String>,

    /// Run once this job and every other dependency have ended (repeatable), however they
    /// ended: no dependency's failure cancels this job.
    #[arg(long = "after-continue", value_name = "JOB_ID")]
    after_continue: Vec<String>,

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
    if args.json.is_some() {
        super::deprecated("enqueue --json JSON", "enqueue --input-json JSON");
    }
    if args.bulk {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the jobs from stdin")?;
        return super::bulk::enqueue_lines(&args.redis, &args.replicas, &text, false).await;
    }
    let function = FunctionName::new(args.function.clone().unwrap_or_default())?;
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
        after: Vec::new(),
        on_failure: Default::default(),
        tick: None,
        parent: None,
        once: None,
        group: args.group.clone(),
        uniq_for: args.uniq_for,
        debounce: args.debounce,
        expires_in: args.expires_in,
        expires_at: args.expires_at,
        throttle: match &args.throttle {
            Some(text) => super::config::parse_rate("--throttle", text)?,
            None => None,
        },
        // (TRACEPARENT reaches the job as the current context: main.rs.)
        trace: None,
    };
    let mut options = options;
    for (ids, policy) in [
        (&args.after, OnFailure::Cancel),
        (&args.after_ignore, OnFailure::Ignore),
        (&args.after_continue, OnFailure::Continue),
    ] {
        for id in ids {
            let id = id.parse::<JobId>()?;
            if policy != OnFailure::Cancel {
                options.on_failure.insert(id.clone(), policy);
            }
            options.after.push(id);
        }
    }
    options.validate()?;
    let input = read_input(&args)?;
    let client = args.redis.writer(&args.replicas).await?;
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
        let why = if args.debounce.is_some() {
            "the job with this key has not started: it takes this input and waits again"
        } else if args.throttle.is_some() {
            "this key's jobs are throttled: the latest one made holds it"
        } else {
            "a job holds this uniq key (unfinished, or within its --uniq-for window)"
        };
        eprintln!("{why}: {id}");
    }
    if !args.wait {
        println!("{id}");
        return Ok(0);
    }

    eprintln!("enqueued {id}");
    super::wait::wait_for(&client, &[id], args.wait_timeout, false).await
}

fn read_input(args: &EnqueueArgs) -> anyhow::Result<Vec<u8>> {
    let json = match (&args.input_json, &args.json) {
        (Some(json), _) => Some(("--input-json", json)),
        (None, Some(json)) => Some(("--json", json)),
        (None, None) => None,
    };
    if let Some((flag, json)) = json {
        serde_json::from_str::<serde_json::Value>(json)
            .map_err(|e| super::usage(format!("{flag} is not valid JSON: {e}")))?;
        return Ok(json.clone().into_bytes());
    }
    if let Some(path) = &args.input_file {
        return std::fs::read(path)
            .map_err(|e| super::usage(format!("cannot read the input file {path:?}: {e}")));
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
