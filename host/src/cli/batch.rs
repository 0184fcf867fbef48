//! `wasmgear batch`: jobs of any functions with callbacks once they have all succeeded
//! (`--on-success`) or all ended (`--on-complete`).

use std::path::PathBuf;

use wasmgear_client::{BatchSpec, BatchStatus, Callback, FunctionName};
use wasmgear_proto::units::in_or_ago;

use super::bulk::{read_file_or_stdin, read_lines};
use super::output::print_json;
use super::{RedisArgs, usage};

/// Options of `wasmgear batch`.
#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    #[command(subcommand)]
    command: BatchCommand,
}

#[derive(Debug, clap::Subcommand)]
enum BatchCommand {
    /// Open a batch, add the jobs of FILE (JSON lines, as `wasmgear bulk` reads them; stdin
    /// when left out or `-`) and close it (unless --open). Prints the batch's id, then its
    /// jobs' ids.
    Run(RunArgs),
    /// Add the jobs of FILE (JSON lines) to an open batch.
    Add(AddArgs),
    /// Close a batch: no job can be added any more, and its callbacks come once all its
    /// jobs have ended.
    Close(IdArgs),
    /// Show a batch: total, pending, succeeded, failed, cancelled, its callbacks.
    Status(IdArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    replicas: super::ReplicaArgs,

    /// The jobs, one JSON object per line: {"function": "resize", "input": "..."} with the
    /// options `wasmgear bulk` takes.
    file: Option<PathBuf>,

    /// The batch's name.
    #[arg(long, default_value = "")]
    name: String,

    /// A job of this function is enqueued once every job has succeeded; its input is the
    /// batch's outcome as JSON (counts, failed and cancelled ids, --data).
    #[arg(long, value_name = "FUNCTION")]
    on_success: Option<String>,

    /// A job of this function is enqueued once every job has ended, however.
    #[arg(long, value_name = "FUNCTION")]
    on_complete: Option<String>,

    /// JSON passed on to the callbacks' input as `data`.
    #[arg(long, value_name = "JSON")]
    data: Option<String>,

    /// Leave the batch open for `wasmgear batch add`; `wasmgear batch close` closes it.
    #[arg(long)]
    open: bool,

    /// Print JSON: the batch's id and its jobs' ids.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct AddArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    replicas: super::ReplicaArgs,

    /// The batch's id.
    id: String,

    /// The jobs, one JSON object per line (stdin when left out or `-`).
    file: Option<PathBuf>,

    /// Print the jobs' ids as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct IdArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The batch's id, as `wasmgear batch run` printed it.
    id: String,

    /// Print JSON (the HTTP API's `GET /v1/batches/{id}`).
    #[arg(long)]
    json: bool,
}

pub async fn run(args: BatchArgs) -> anyhow::Result<i32> {
    match args.command {
        BatchCommand::Run(args) => run_batch(args).await,
        BatchCommand::Add(args) => {
            let jobs = read_lines(&read_file_or_stdin(args.file.as_deref())?)?;
            let client = args.redis.writer(&args.replicas).await?;
            let ids = add(&client, &args.id, &jobs).await?;
            print_ids(None, &ids, args.json)
        }
        BatchCommand::Close(args) => {
            let client = args.redis.client().await?;
            client.close_batch(&args.id).await?;
            let status = client.batch_status(&args.id).await?;
            show(&status, args.json)
        }
        BatchCommand::Status(args) => {
            let client = args.redis.client().await?;
            let status = client.batch_status(&args.id).await?;
            show(&status, args.json)
        }
    }
}

async fn run_batch(args: RunArgs) -> anyhow::Result<i32> {
    let data = args
        .data
        .as_deref()
        .map(serde_json::from_str::<serde_json::Value>)
        .transpose()
        .map_err(|e| usage(format!("--data is not JSON: {e}")))?;
    let callback = |function: &Option<String>| -> anyhow::Result<Option<Callback>> {
        function
            .as_ref()
            .map(|f| {
                Ok(Callback {
                    function: FunctionName::new(f.clone())?,
                    data: data.clone(),
                })
            })
            .transpose()
    };
    let spec = BatchSpec {
        name: args.name.clone(),
        on_success: callback(&args.on_success)?,
        on_complete: callback(&args.on_complete)?,
    };
    let jobs = read_lines(&read_file_or_stdin(args.file.as_deref())?)?;
    let client = args.redis.writer(&args.replicas).await?;
    let id = client.open_batch(&spec).await?;
    let ids = add(&client, &id, &jobs).await?;
    if !args.open {
        client.close_batch(&id).await?;
    }
    print_ids(Some(&id), &ids, args.json)
}

/// Adds `jobs` (as `read_lines` reads them) to batch `id`.
async fn add(
    client: &wasmgear_client::Client,
    id: &str,
    jobs: &[(FunctionName, Vec<u8>, wasmgear_client::EnqueueOptions)],
) -> anyhow::Result<Vec<wasmgear_client::JobId>> {
    let borrowed: Vec<_> = jobs
        .iter()
        .map(|(f, input, o)| (f.clone(), input.as_slice(), o.clone()))
        .collect();
    Ok(client.add_to_batch(id, &borrowed).await?)
}

fn print_ids(
    batch: Option<&str>,
    ids: &[wasmgear_client::JobId],
    json: bool,
) -> anyhow::Result<i32> {
    let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
    if json {
        match batch {
            Some(batch) => print_json(&serde_json::json!({ "id": batch, "jobs": ids }))?,
            None => print_json(&ids)?,
        }
        return Ok(0);
    }
    if let Some(batch) = batch {
        println!("batch {batch}");
    }
    for id in ids {
        println!("{id}");
    }
    Ok(0)
}

fn show(status: &BatchStatus, json: bool) -> anyhow::Result<i32> {
    if json {
        print_json(status)?;
        return Ok(0);
    }
    println!("batch      {} {:?}", status.id, status.name);
    println!(
        "state      {}",
        if status.open {
            "open"
        } else if status.ended_ms.is_some() {
            "ended"
        } else {
            "closed"
        }
    );
    println!(
        "jobs       {} in all: {} pending, {} succeeded, {} failed, {} cancelled",
        status.total, status.pending, status.succeeded, status.failed, status.cancelled
    );
    println!("opened     {}", in_or_ago(status.created_ms));
    if let Some(ended) = status.ended_ms {
        println!("ended      {}", in_or_ago(ended));
    }
    for (name, callback) in [
        ("on success", &status.on_success),
        ("on complete", &status.on_complete),
    ] {
        if let Some(callback) = callback {
            println!("{name:<10} {callback}");
        }
    }
    for id in status.failed_ids.iter().chain(&status.cancelled_ids) {
        println!("unsuccessful {id}");
    }
    Ok(0)
}
