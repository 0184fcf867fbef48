//! `wasmgear jobs`: find jobs by tag or by state; `wasmgear tag`: tag a job.

use super::RedisArgs;
use super::output::{paint_state, print_json, print_table};
use wasmgear_client::JobState;
use wasmgear_proto::units::in_or_ago;
use wasmgear_proto::{FunctionName, JobId};

/// Options of `wasmgear jobs`.
#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// Only jobs of this function (needed with --state).
    #[arg(long)]
    function: Option<String>,

    /// Jobs with this tag.
    #[arg(long, required_unless_present = "state")]
    tag: Option<String>,

    /// Jobs in this state: queued, scheduled, running, waiting, succeeded, failed, cancelled.
    #[arg(long, requires = "function", conflicts_with = "tag")]
    state: Option<String>,

    /// List at most this many.
    #[arg(long, default_value_t = 100)]
    limit: usize,

    /// Print JSON: each job's status.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: JobsArgs) -> anyhow::Result<i32> {
    let function = args.function.clone().map(FunctionName::new).transpose()?;
    let state = args
        .state
        .as_deref()
        .map(|state| {
            state.parse::<JobState>().map_err(|_| {
                super::usage(format!(
                    "unknown state {state:?}: expected queued, scheduled, running, waiting, \
                     succeeded, failed or cancelled"
                ))
            })
        })
        .transpose()?;
    let client = args.redis.client().await?;
    if let Some(function) = &function {
        client.check_function(function).await?;
    }
    let ids = match (&args.tag, state, &function) {
        (Some(tag), _, _) => client.tagged(tag, function.as_ref(), args.limit).await?,
        (None, Some(state), Some(function)) => {
            client.jobs_in_state(function, state, args.limit).await?
        }
        _ => {
            return Err(super::usage(
                "give --tag TAG, or --function FUNCTION with --state STATE",
            ));
        }
    };
    let mut jobs = Vec::new();
    for id in &ids {
        match client.status(id).await {
            Ok(status) => jobs.push(status),
            Err(wasmgear_client::QueueError::NoSuchJob(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if args.json {
        print_json(&jobs)?;
        return Ok(0);
    }
    if jobs.is_empty() {
        println!("no such jobs");
        return Ok(0);
    }
    let rows = jobs
        .iter()
        .map(|job| {
            vec![
                job.id.to_string(),
                paint_state(job.record.state),
                in_or_ago(job.record.created_ms),
                job.record.tags.join(","),
            ]
        })
        .collect();
    print_table(&["JOB", "STATE", "ENQUEUED", "TAGS"], rows);
    Ok(0)
}

/// Options of `wasmgear tag`.
#[derive(Debug, clap::Args)]
pub struct TagArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The job's id (echo:42).
    id: String,

    /// `add` or `remove`.
    #[arg(value_parser = ["add", "remove"])]
    action: String,

    /// The tags.
    #[arg(required = true)]
    tags: Vec<String>,

    /// Print JSON: {"id", "tags"}.
    #[arg(long)]
    json: bool,
}

pub async fn tag(args: TagArgs) -> anyhow::Result<i32> {
    let id: JobId = args.id.parse()?;
    let client = args.redis.client().await?;
    let tags = client.tag(&id, args.action == "add", &args.tags).await?;
    let target = format!("{id} {} {}", args.action, args.tags.join(","));
    super::access::record(&client, "tag", &target, "ok").await;
    if args.json {
        print_json(&serde_json::json!({ "id": id.to_string(), "tags": tags }))?;
    } else {
        println!("{id} tags: {}", tags.join(", "));
    }
    Ok(0)
}
