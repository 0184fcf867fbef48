//! `wasmgear bulk`: enqueue many jobs from JSON lines, one round trip per function.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use serde::Deserialize;

use super::{RedisArgs, parse_duration, parse_time};
use wasmgear_client::{EnqueueOptions, Priority};
use wasmgear_proto::FunctionName;

/// Options of `wasmgear bulk`.
#[derive(Debug, clap::Args)]
pub struct BulkArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    replicas: super::ReplicaArgs,

    /// File of JSON lines to read; stdin when left out or `-`. Each line is one job:
    /// {"function": "resize", "input": "text"} or with "input_json": <any JSON value>,
    /// and optionally "priority" ("high" or a number), "delay" ("30s"), "at" (epoch seconds
    /// or "YYYY-MM-DDTHH:MM:SSZ"), "max_attempts", "timeout" ("60s"), "retention" ("25h"),
    /// "failed_retention" ("7d"), "uniq" (a key) with "uniq_for" ("10m"), "debounce" ("5s")
    /// or "throttle" ("1/10s"), "expires_in" ("5m"), "group" (a key), "tags" and "after"
    /// (lists of job ids).
    /// Every line is checked before any job is written. Prints one job id per line, in order.
    file: Option<PathBuf>,

    /// Print the ids as a JSON array.
    #[arg(long)]
    json: bool,
}

/// One line of input.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    function: String,
    #[serde(default)]
    input: Option<String>,
    #[serde(default)]
    input_json: Option<serde_json::Value>,
    #[serde(default)]
    priority: Option<serde_json::Value>,
    #[serde(default)]
    delay: Option<String>,
    #[serde(default)]
    at: Option<serde_json::Value>,
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    retention: Option<String>,
    #[serde(default)]
    failed_retention: Option<String>,
    #[serde(default)]
    uniq: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    uniq_for: Option<String>,
    #[serde(default)]
    debounce: Option<String>,
    #[serde(default)]
    throttle: Option<String>,
    #[serde(default)]
    expires_in: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    after: Vec<String>,
}

impl Line {
    fn into_job(self) -> anyhow::Result<(FunctionName, Vec<u8>, EnqueueOptions)> {
        let function = FunctionName::new(self.function)?;
        let input = match (self.input, self.input_json) {
            (Some(_), Some(_)) => {
                return Err(super::usage("give \"input\" or \"input_json\", not both"));
            }
            (Some(text), None) => text.into_bytes(),
            (None, Some(value)) => serde_json::to_vec(&value)?,
            (None, None) => Vec::new(),
        };
        let mut options = EnqueueOptions::default();
        if let Some(priority) = self.priority {
            options.priority = match priority {
                serde_json::Value::String(name) => name.parse()?,
                serde_json::Value::Number(n) => {
                    let n = n.as_i64().and_then(|n| i32::try_from(n).ok());
                    Priority::new(n.context("priority must be an integer")?)?
                }
                other => {
                    return Err(super::usage(format!(
                        "priority {other} is neither a name nor a number"
                    )));
                }
            };
        }
        if let Some(delay) = self.delay {
            options.delay = parse_duration(&delay)?;
        }
        if let Some(at) = self.at {
            options.at = Some(match at {
                serde_json::Value::String(text) => parse_time(&text)?,
                serde_json::Value::Number(n) => parse_time(&n.to_string())?,
                other => {
                    return Err(super::usage(format!(
                        "at {other} is neither epoch seconds nor a timestamp"
                    )));
                }
            });
        }
        options.max_attempts = self.max_attempts;
        if let Some(timeout) = self.timeout {
            options.timeout = Some(parse_duration(&timeout)?);
        }
        if let Some(retention) = self.retention {
            options.retention = parse_duration(&retention)?;
        }
        if let Some(retention) = self.failed_retention {
            options.failed_retention = parse_duration(&retention)?;
        }
        options.uniq = self.uniq;
        options.group = self.group;
        options.uniq_for = self.uniq_for.as_deref().map(parse_duration).transpose()?;
        options.expires_in = self.expires_in.as_deref().map(parse_duration).transpose()?;
        options.debounce = self.debounce.as_deref().map(parse_duration).transpose()?;
        if let Some(rate) = &self.throttle {
            options.throttle = super::config::parse_rate("throttle", rate)?;
        }
        options.tags = self.tags;
        options.after = self
            .after
            .iter()
            .map(|id| id.parse())
            .collect::<Result<_, _>>()?;
        options.validate()?;
        Ok((function, input, options))
    }
}

pub async fn run(args: BulkArgs) -> anyhow::Result<i32> {
    let text = read_file_or_stdin(args.file.as_deref())?;
    enqueue_lines(&args.redis, &args.replicas, &text, args.json).await
}

/// The text of `file`, or of stdin when it is `None` or `-`.
pub(crate) fn read_file_or_stdin(file: Option<&std::path::Path>) -> anyhow::Result<String> {
    let mut text = String::new();
    match file {
        None => std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read stdin")?,
        Some(path) if path.as_os_str() == "-" => std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read stdin")?,
        Some(path) => std::fs::File::open(path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(|e| super::usage(format!("cannot read {path:?}: {e}")))?,
    };
    Ok(text)
}

/// The jobs of `text`, one JSON object per line, every line checked (the first bad one
/// refuses them all).
pub(crate) fn read_lines(
    text: &str,
) -> anyhow::Result<Vec<(FunctionName, Vec<u8>, EnqueueOptions)>> {
    let mut jobs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let job = serde_json::from_str::<Line>(line)
            .map_err(anyhow::Error::from)
            .and_then(Line::into_job)
            .map_err(|e| {
                super::usage(format!("line {}: {e:#}; nothing was enqueued", number + 1))
            })?;
        jobs.push(job);
    }
    Ok(jobs)
}

/// Enqueues the jobs of `text`, one JSON object per line (checking every line before
/// writing any), and prints their ids, one per line.
pub async fn enqueue_lines(
    redis: &super::RedisArgs,
    replicas: &super::ReplicaArgs,
    text: &str,
    json: bool,
) -> anyhow::Result<i32> {
    let jobs = read_lines(text)?;
    if jobs.is_empty() {
        return Err(super::usage(
            "no jobs in the input: give one JSON object per line",
        ));
    }
    let client = redis.writer(replicas).await?;
    let batch: Vec<_> = jobs
        .iter()
        .map(|(f, input, o)| (f.clone(), input.as_slice(), o.clone()))
        .collect();
    let ids = client.enqueue_batch(&batch).await?;
    if json {
        let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
        super::output::print_json(&ids)?;
        return Ok(0);
    }
    let mut out = String::with_capacity(ids.len() * 16);
    for id in ids {
        out.push_str(&id.to_string());
        out.push('\n');
    }
    print!("{out}");
    Ok(0)
}
