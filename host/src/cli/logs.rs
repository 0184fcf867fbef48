//! `wasmgear logs`: print a job's log.

use super::RedisArgs;
use crate::job::JobId;

/// Options of `wasmgear logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The job's id (e.g. echo:42).
    id: String,
}

pub async fn run(args: LogsArgs) -> anyhow::Result<i32> {
    let id: JobId = args.id.parse()?;
    let client = args.redis.client().await?;
    print!("{}", client.logs(&id).await?);
    Ok(0)
}
