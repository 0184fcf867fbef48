//! Dependencies between jobs of different functions.
//!
//! A script touches the keys of one function only (so it runs on one Redis Cluster node).
//! Dependencies within a function are linked and resolved inside the scripts, atomically.
//! Across functions it takes two steps, each atomic and idempotent:
//!
//! 1. `link` on the dependency's function records the dependent there, or says that the
//!    dependency has already ended; then `resolve` on the dependent's function tells it.
//! 2. When a job ends, the script that ended it returns its dependents in other functions
//!    (`notify`), and the caller runs `resolve` for each ([`deliver`]); a dependent that
//!    is cancelled in turn may name further dependents.
//!
//! A job of a batch is told about the same way: the script that ends it returns `batch ID`
//! as a dependent, and [`deliver`] counts its end in the batch (`batch_done`).
//!
//! If the caller dies between the steps, a waiting job could wait forever; so every worker
//! re-checks the links of the waiting jobs of the functions it serves ([`relink_due`]):
//! after 30 s, then ever less often.

use super::connection::Connection;
use super::{Result, scripts};
use wasmgear_proto::{FunctionName, JobId};

/// Runs `resolve` for each `(dependent, dependency, state)` triple of `notify` (the flat
/// list a script returned), and for those that its replies name in turn; then tells the
/// dependency's function that the dependent has been told (`told`), so that it may forget
/// the finished job when its retention is over.
pub(crate) async fn deliver(conn: &Connection, notify: Vec<String>) -> Result<()> {
    let mut todo = notify;
    while todo.len() >= 3 {
        let state = todo.pop().unwrap_or_default();
        let dependency = todo.pop().unwrap_or_default();
        let dependent = todo.pop().unwrap_or_default();
        let more: Vec<String> = if let Some(batch) = dependent.strip_prefix("batch ") {
            // The job's batch counts its end.
            crate::batch::done(conn, batch, &dependency, &state).await?;
            Vec::new()
        } else {
            let Ok(dependent) = dependent.parse::<JobId>() else {
                tracing::warn!(dependent, "skipping a dependent that is not a job id");
                continue;
            };
            scripts::on_function(&scripts::RESOLVE, &dependent.function)
                .arg(dependent.seq)
                .arg(&dependency)
                .arg(&state)
                .invoke_async(&mut conn.clone())
                .await?
        };
        if let Ok(dependency) = dependency.parse::<JobId>()
            && state != "pending"
        {
            let _: i64 = scripts::on_function(&scripts::TOLD, &dependency.function)
                .arg(dependency.seq)
                .arg(&dependent)
                .invoke_async(&mut conn.clone())
                .await?;
        }
        todo.extend(more);
    }
    Ok(())
}

/// Links `dependent` to `dependency` (a job of another function) and tells it at once if
/// the dependency has already ended.
pub(crate) async fn link(conn: &Connection, dependent: &JobId, dependency: &JobId) -> Result<()> {
    let state: String = scripts::on_function(&scripts::LINK, &dependency.function)
        .arg(dependency.seq)
        .arg(dependent.to_string())
        .invoke_async(&mut conn.clone())
        .await?;
    if state != "pending" {
        deliver(
            conn,
            vec![dependent.to_string(), dependency.to_string(), state],
        )
        .await?;
    }
    Ok(())
}

/// Re-checks the links of up to `limit` jobs of `function` that have waited long enough for
/// a re-check (on the queue's clock; each one's next re-check is pushed out as it is handed
/// out): links each again to its unfinished dependencies in other functions, and tells it
/// about those that have ended. Returns how many entries of the waiting set it looked at
/// (fewer than `limit`: none are left due).
pub(crate) async fn relink_due(
    conn: &Connection,
    function: &FunctionName,
    limit: usize,
) -> Result<usize> {
    let (looked, due): (usize, Vec<(u64, Vec<String>)>) =
        scripts::on_function(&scripts::RECHECK, function)
            .arg(limit)
            .invoke_async(&mut conn.clone())
            .await?;
    for (seq, dependencies) in &due {
        let id = JobId {
            function: function.clone(),
            seq: *seq,
        };
        for dependency in dependencies {
            let Ok(dependency) = dependency.parse::<JobId>() else {
                continue;
            };
            let state: String = scripts::on_function(&scripts::LINK, &dependency.function)
                .arg(dependency.seq)
                .arg(id.to_string())
                .invoke_async(&mut conn.clone())
                .await?;
            // `pending`: linked again; the re-check has already been pushed out.
            if state != "pending" {
                deliver(conn, vec![id.to_string(), dependency.to_string(), state]).await?;
            }
        }
    }
    Ok(looked)
}
