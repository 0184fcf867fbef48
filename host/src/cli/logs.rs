//! `wasmgear logs`: print a job's log.

use super::RedisArgs;
use wasmgear_proto::JobId;

/// Options of `wasmgear logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The job's id (e.g. echo:42).
    id: String,

    /// Print JSON: {"id", "log"}.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: LogsArgs) -> anyhow::Result<i32> {
    let id: JobId = args.id.parse()?;
    let client = args.redis.client().await?;
    let log = client.logs(&id).await?;
    if args.json {
        super::output::print_json(&serde_json::json!({ "id": id.to_string(), "log": log }))?;
    } else {
        print!("{log}");
    }
    Ok(0)
}
