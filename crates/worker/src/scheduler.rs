//! The recurring-job scheduler every worker on wasmgear's own queue runs (no extra daemon):
//! it fires the schedules due on Redis' clock (see [`wasmgear_client::schedule`]). However
//! many workers run it, each tick gets exactly one job: the function's queue enqueues a
//! schedule's tick once.

use std::time::Duration;

use wasmgear_client::Client;

/// The longest a scheduler waits between two passes (a schedule added or resumed meanwhile
/// is seen within it).
pub const PASS_MAX: Duration = Duration::from_millis(500);
/// The shortest wait between two passes.
const PASS_MIN: Duration = Duration::from_millis(10);

/// Fires due schedules until dropped.
pub async fn run(client: Client) {
    loop {
        let wait = match client.run_due_schedules().await {
            Ok(pass) => {
                for (schedule, job) in &pass.fired {
                    if job.created {
                        tracing::info!(schedule, job_id = %job.id, "schedule fired");
                    }
                }
                for schedule in &pass.skipped {
                    tracing::info!(schedule, "schedule's missed ticks skipped (catch-up none)");
                }
                for (schedule, reason) in &pass.failed {
                    tracing::warn!(schedule, "schedule cannot fire: {reason}");
                }
                // Due again at once if the pass was full; else until the next tick.
                pass.next_in.unwrap_or(PASS_MAX).clamp(PASS_MIN, PASS_MAX)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot read the schedules; trying again");
                PASS_MAX * 2
            }
        };
        tokio::time::sleep(wait).await;
    }
}
