//! `wasmgear cancel`: stop a job.

use super::RedisArgs;
use wasmgear_client::CancelOutcome;
use wasmgear_proto::JobId;

/// Options of `wasmgear cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The job's id (e.g. echo:42).
    id: String,

    /// Print JSON: {"id", "outcome": "cancelled" | "stopping" | "already-ended", "state"}.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: CancelArgs) -> anyhow::Result<i32> {
    let id: JobId = args.id.parse()?;
    let client = args.redis.client().await?;
    let outcome = client.cancel(&id).await?;
    let word = match &outcome {
        CancelOutcome::Cancelled => "ok: cancelled".to_string(),
        CancelOutcome::Stopping => "ok: its worker is stopping it".to_string(),
        CancelOutcome::AlreadyEnded(state) => format!("nothing changed: already {state}"),
    };
    super::access::record(&client, "cancel", &id.to_string(), &word).await;
    if args.json {
        let (word, state) = match outcome {
            CancelOutcome::Cancelled => ("cancelled", "cancelled".to_string()),
            CancelOutcome::Stopping => ("stopping", "running".to_string()),
            CancelOutcome::AlreadyEnded(state) => ("already-ended", state.to_string()),
        };
        super::output::print_json(
            &serde_json::json!({ "id": id.to_string(), "outcome": word, "state": state }),
        )?;
        return Ok(match outcome {
            CancelOutcome::AlreadyEnded(_) => super::exit::FAILED,
            _ => super::exit::OK,
        });
    }
    match outcome {
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
