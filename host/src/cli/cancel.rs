//! `wasmgear cancel`: stop a job.

use super::RedisArgs;
use crate::job::JobId;
use crate::queue::CancelOutcome;

/// Options of `wasmgear cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The job's id (e.g. echo:42).
    id: String,
}

pub async fn run(args: CancelArgs) -> anyhow::Result<i32> {
    let id: JobId = args.id.parse()?;
    let client = args.redis.client().await?;
    match client.cancel(&id).await? {
        CancelOutcome::Cancelled => println!("{id} cancelled"),
        CancelOutcome::Stopping => {
            println!("{id} is running: its worker has been asked to stop it")
        }
        CancelOutcome::AlreadyEnded(state) => {
            eprintln!("{id} had already ended ({state}); nothing changed");
            return Ok(1);
        }
    }
    Ok(0)
}
