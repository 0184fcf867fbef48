//! The recurring-job scheduler every worker on wasmgear's own queue runs (no extra daemon):
//! it fires the schedules due on Redis' clock (see [`wasmgear_client::schedule`]). However
//! many workers run it, each tick gets exactly one job: the function's queue enqueues a
//! schedule's tick once. A schedule whose tick cannot fire waits on its own (logged once
//! per change of its reason, shown by `schedule list`); the others go on.

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
                // Once per change of its reason, not at every try.
                for failed in pass.failed.iter().filter(|f| f.new_reason) {
                    let failure = &failed.failure;
                    tracing::warn!(
                        schedule = failed.name,
                        tick_ms = failure.tick_ms,
                        "schedule cannot fire (it alone waits, tried again with a backoff of \
                         at most {}s): {}",
                        wasmgear_proto::limits::SCHEDULE_RETRY_MAX_MS / 1000,
                        failure.error
                    );
                }
                for schedule in &pass.recovered {
                    tracing::info!(schedule, "schedule fires again");
                }
                for (schedule, next_ms) in &pass.rewound {
                    tracing::warn!(
                        schedule,
                        next_ms,
                        "schedule's next tick was set on a clock that has gone back since: \
                         brought back to the first tick after now"
                    );
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
