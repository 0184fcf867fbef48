//! `wasmgear flow`: submit a graph of jobs in one call, follow it, draw it, cancel or retry
//! it.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use wasmgear_client::flow::document::FlowDocument;
use wasmgear_client::{Client, FlowJobStatus, FlowStatus, JobState};

use super::output::{output_text, paint_state, print_json};
use super::{RedisArgs, parse_duration, usage};

/// Options of `wasmgear flow`.
#[derive(Debug, clap::Args)]
pub struct FlowArgs {
    #[command(subcommand)]
    command: FlowCommand,
}

#[derive(Debug, clap::Subcommand)]
enum FlowCommand {
    /// Submit a flow from a file (JSON, or TOML when it ends in .toml): named jobs and the
    /// jobs each waits on, checked whole before anything is written. Prints the flow's id
    /// and each job's id.
    Submit(SubmitArgs),
    /// Draw a flow as a tree: each job under the jobs waiting on it, with its state.
    Status(IdArgs),
    /// Cancel every unfinished job of a flow.
    Cancel(IdArgs),
    /// Run a flow's failed and cancelled jobs again (dependencies first); succeeded jobs
    /// keep their outputs.
    Retry(IdArgs),
}

#[derive(Debug, clap::Args)]
struct SubmitArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    replicas: super::ReplicaArgs,

    /// The flow: {"name": "album", "jobs": {"a": {"function": "reverse", "input": "abc"},
    /// "c": {"function": "join", "after": ["a", {"job": "b", "on_failure": "ignore"}]}}}.
    /// A job takes the HTTP API's fields (input, input_base64, input_json, priority,
    /// delay_ms, at_ms, attempts, timeout_ms, retention_ms, failed_retention_ms, tags);
    /// on_failure is cancel (the default), ignore or continue.
    file: PathBuf,

    /// Follow the flow until every job has ended, then print the outputs of its last jobs
    /// (those no other job waits on); exit 1 if one of them did not succeed.
    #[arg(long)]
    wait: bool,

    /// With --wait: give up waiting after this long (exit 4); the flow goes on.
    #[arg(long, value_parser = parse_duration, requires = "wait")]
    wait_timeout: Option<Duration>,

    /// Print JSON: the flow's id and its jobs' ids; with --wait, the whole flow too.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct IdArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The flow's id, as `flow submit` printed it.
    id: u64,

    /// Print JSON instead (the HTTP API's `GET /v1/flows/{id}`).
    #[arg(long)]
    json: bool,
}

pub async fn run(args: FlowArgs) -> anyhow::Result<i32> {
    match args.command {
        FlowCommand::Submit(args) => submit(args).await,
        FlowCommand::Status(args) => {
            let client = args.redis.client().await?;
            let status = client.flow(args.id).await?;
            if args.json {
                print_json(&wasmgear_server::flow_json(&status))?;
            } else {
                print!("{}", draw(&status));
            }
            Ok(0)
        }
        FlowCommand::Cancel(args) => {
            let client = args.redis.client().await?;
            let cancelled = client.cancel_flow(args.id).await?;
            let outcome = format!("ok: {cancelled} jobs cancelled");
            super::access::record(
                &client,
                "flow cancel",
                &format!("flow {}", args.id),
                &outcome,
            )
            .await;
            if args.json {
                print_json(&serde_json::json!({ "id": args.id, "cancelled": cancelled }))?;
            } else {
                println!("flow {}: {cancelled} unfinished jobs cancelled", args.id);
            }
            Ok(0)
        }
        FlowCommand::Retry(args) => {
            let client = args.redis.client().await?;
            let retried = client.retry_flow(args.id).await?;
            let outcome = format!("ok: {} jobs run again", retried.len());
            super::access::record(
                &client,
                "flow retry",
                &format!("flow {}", args.id),
                &outcome,
            )
            .await;
            if args.json {
                let ids: Vec<String> = retried.iter().map(ToString::to_string).collect();
                print_json(&serde_json::json!({ "id": args.id, "retried": ids }))?;
            } else {
                println!("flow {}: {} jobs run again", args.id, retried.len());
                for id in retried {
                    println!("  {id}");
                }
            }
            Ok(0)
        }
    }
}

/// Reads the flow file: TOML when its name ends in `.toml`, else JSON.
fn read_flow(file: &PathBuf) -> anyhow::Result<FlowDocument> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the flow file {}", file.display()))?;
    let json = if file.extension().is_some_and(|e| e == "toml") {
        let value: toml::Value = toml::from_str(&text)
            .map_err(|e| usage(format!("{} is not TOML: {e}", file.display())))?;
        serde_json::to_string(&value)?
    } else {
        text
    };
    Ok(FlowDocument::from_json(&json)?)
}

async fn submit(args: SubmitArgs) -> anyhow::Result<i32> {
    let flow = read_flow(&args.file)?.into_flow()?;
    let client = args.redis.writer(&args.replicas).await?;
    let submitted = client.submit_flow(&flow).await?;
    if !args.wait {
        if args.json {
            print_json(&wasmgear_server::submitted_flow_json(&submitted))?;
        } else {
            println!("flow {}", submitted.id);
            for (name, id) in &submitted.jobs {
                println!("  {name}  {id}");
            }
        }
        return Ok(0);
    }
    let status = client.wait_flow(submitted.id, args.wait_timeout).await?;
    let sinks = status.sinks();
    let outputs = sink_outputs(&client, &sinks).await?;
    if args.json {
        let mut json = wasmgear_server::flow_json(&status);
        json["outputs"] = serde_json::Value::Object(
            outputs
                .iter()
                .map(|(name, output)| (name.clone(), serde_json::json!(output_text(output))))
                .collect(),
        );
        print_json(&json)?;
    } else {
        eprint!("{}", draw(&status));
        for (name, output) in &outputs {
            if sinks.len() > 1 {
                println!("== {name}");
            }
            println!("{}", output_text(output));
        }
    }
    let all_succeeded = sinks.iter().all(|j| j.state == Some(JobState::Succeeded));
    Ok(if all_succeeded { 0 } else { 1 })
}

/// The outputs of the flow's last jobs, by name (empty for one that did not succeed).
async fn sink_outputs(
    client: &Client,
    sinks: &[&FlowJobStatus],
) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut outputs = Vec::new();
    for sink in sinks {
        let output = match client.status(&sink.id).await {
            Ok(status) => status.output.unwrap_or_default(),
            Err(wasmgear_client::QueueError::NoSuchJob(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        outputs.push((sink.name.clone(), output));
    }
    Ok(outputs)
}

/// The flow as a tree: its last jobs at the top, each job's dependencies under it; a job
/// drawn already is named again with `(above)`.
fn draw(status: &FlowStatus) -> String {
    let by_name: HashMap<&str, &FlowJobStatus> =
        status.jobs.iter().map(|j| (j.name.as_str(), j)).collect();
    let counts: Vec<String> = status
        .counts()
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let mut text = format!(
        "flow {} {:?}: {} jobs, {}\n",
        status.id,
        status.name,
        status.jobs.len(),
        counts.join(", ")
    );
    let mut drawn = HashSet::new();
    for sink in status.sinks() {
        draw_job(&mut text, sink, &by_name, &mut drawn, "", "");
    }
    text
}

fn draw_job<'a>(
    text: &mut String,
    job: &'a FlowJobStatus,
    by_name: &HashMap<&str, &'a FlowJobStatus>,
    drawn: &mut HashSet<&'a str>,
    lead: &str,
    rest: &str,
) {
    let state = match job.state {
        Some(state) => paint_state(state),
        None => "missing".to_string(),
    };
    if !drawn.insert(job.name.as_str()) {
        text.push_str(&format!("{lead}{}  {}  (above)\n", job.name, job.id));
        return;
    }
    let error = job
        .error
        .as_deref()
        .map(|e| format!("  {e}"))
        .unwrap_or_default();
    text.push_str(&format!("{lead}{}  {}  {state}{error}\n", job.name, job.id));
    let count = job.after.len();
    for (i, edge) in job.after.iter().enumerate() {
        let Some(dependency) = by_name.get(edge.job.as_str()) else {
            continue;
        };
        let last = i + 1 == count;
        let policy = match edge.on_failure {
            wasmgear_client::OnFailure::Cancel => String::new(),
            other => format!("[{other}] "),
        };
        let (branch, below) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        draw_job(
            text,
            dependency,
            by_name,
            drawn,
            &format!("{rest}{branch}{policy}"),
            &format!("{rest}{below}"),
        );
    }
}
