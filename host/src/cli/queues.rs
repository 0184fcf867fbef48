//! `wasmgear queues`: how many jobs of each function are where.

use super::RedisArgs;
use super::output::{print_json, print_table};

/// Options of `wasmgear queues`.
#[derive(Debug, clap::Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// Print the overview as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: QueuesArgs) -> anyhow::Result<i32> {
    let client = args.redis.client().await?;
    let queues = client.queues().await?;
    if args.json {
        print_json(&queues)?;
        return Ok(0);
    }
    if queues.is_empty() {
        println!("no queues yet: enqueue a job or start a worker");
        return Ok(0);
    }
    let rows = queues
        .iter()
        .map(|q| {
            vec![
                q.function.clone(),
                q.queued.to_string(),
                q.scheduled.to_string(),
                q.running.to_string(),
                q.waiting.to_string(),
                q.succeeded.to_string(),
                q.failed.to_string(),
                q.cancelled.to_string(),
                q.workers.to_string(),
                if q.paused { "paused" } else { "" }.to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "FUNCTION",
            "QUEUED",
            "SCHEDULED",
            "RUNNING",
            "WAITING",
            "SUCCEEDED",
            "FAILED",
            "CANCELLED",
            "WORKERS",
            "",
        ],
        rows,
    );
    Ok(0)
}
