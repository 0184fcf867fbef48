//! `wasmgear priority`: change the priority of a job that has not started (qless).

use super::RedisArgs;
use super::output::print_json;
use wasmgear_client::Priority;
use wasmgear_proto::JobId;

/// Options of `wasmgear priority`.
#[derive(Debug, clap::Args)]
pub struct PriorityArgs {
    #[command(flatten)]
    redis: RedisArgs,

    /// The job's id (echo:42).
    id: String,

    /// The new priority: low, normal, high, or a number from -1000 to 1000.
    priority: String,

    /// Print the outcome as JSON: {"id", "changed", "state", "priority"}.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: PriorityArgs) -> anyhow::Result<i32> {
    let id: JobId = args.id.parse()?;
    let priority: Priority = args.priority.parse()?;
    let client = args.redis.client().await?;
    let (changed, state) = client.set_priority(&id, priority).await?;
    let outcome = if changed {
        "ok".to_string()
    } else {
        format!("nothing changed: {state}")
    };
    super::access::record(&client, "priority", &format!("{id} {priority}"), &outcome).await;
    if args.json {
        print_json(&serde_json::json!({
            "id": id.to_string(), "changed": changed, "state": state, "priority": priority.value(),
        }))?;
    } else if changed {
        println!("{id} ({state}) now has priority {priority}");
    } else {
        eprintln!("{id} is {state}: its priority no longer matters; nothing changed");
    }
    Ok(if changed { 0 } else { super::exit::FAILED })
}
