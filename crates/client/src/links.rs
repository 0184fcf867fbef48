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

use std::collections::BTreeMap;

use super::connection::Connection;
use super::{Result, scripts};
use wasmgear_proto::crypto::KeyRing;
use wasmgear_proto::limits::MAX_TELLS_PER_CALL;
use wasmgear_proto::{FunctionName, JobId};

/// Runs `resolve` for each `(dependent, dependency, state)` triple of `notify` (the flat
/// list a script returned), and for those that its replies name in turn. A `batch ID`
/// dependent is the job's batch, which counts its end (`batch_done`); a `release ID`
/// dependent is a dependency the (ended) job no longer holds; after both, the
/// dependency's function is told (`told`), so that it may forget the finished job at its
/// own retention. The triples go in one `resolve` call per function (and one `told` per
/// function), up to [`MAX_TELLS_PER_CALL`] each: a fan-in's dependent is loaded and saved
/// once per call, not once per dependency.
pub(crate) async fn deliver(
    conn: &Connection,
    keys: Option<&KeyRing>,
    notify: Vec<String>,
) -> Result<()> {
    let mut todo = notify;
    while todo.len() >= 3 {
        let mut resolves: BTreeMap<FunctionName, Vec<(u64, String, String)>> = BTreeMap::new();
        let mut told: BTreeMap<FunctionName, Vec<(u64, String)>> = BTreeMap::new();
        for triple in todo.chunks_exact(3) {
            let [dependent, dependency, state] = triple else {
                continue;
            };
            if let Some(batch) = dependent.strip_prefix("batch ") {
                crate::batch::done(conn, keys, batch, dependency, state).await?;
                if let Ok(job) = dependency.parse::<JobId>() {
                    told.entry(job.function)
                        .or_default()
                        .push((job.seq, dependent.clone()));
                }
            } else if let Some(held) = dependent.strip_prefix("release ") {
                // `dependency` ended: `held`, one of its dependencies, holds for it no
                // longer.
                match held.parse::<JobId>() {
                    Ok(held) => told
                        .entry(held.function)
                        .or_default()
                        .push((held.seq, dependency.clone())),
                    Err(_) => tracing::warn!(held, "skipping a dependency that is not a job id"),
                }
            } else if let Ok(id) = dependent.parse::<JobId>() {
                // The dependency holds for the dependent until it has ended (its
                // `release`), not merely been told.
                resolves.entry(id.function).or_default().push((
                    id.seq,
                    dependency.clone(),
                    state.clone(),
                ));
            } else {
                tracing::warn!(dependent, "skipping a dependent that is not a job id");
            }
        }
        let mut more = Vec::new();
        for (function, triples) in &resolves {
            for chunk in triples.chunks(MAX_TELLS_PER_CALL as usize) {
                let mut call = scripts::on_function(&scripts::RESOLVE, function);
                for (seq, dependency, state) in chunk {
                    call.arg(seq).arg(dependency).arg(state);
                }
                let next: Vec<String> = call.invoke_async(&mut conn.clone()).await?;
                more.extend(next);
            }
        }
        for (function, pairs) in &told {
            for chunk in pairs.chunks(MAX_TELLS_PER_CALL as usize) {
                let mut call = scripts::on_function(&scripts::TOLD, function);
                for (seq, dependent) in chunk {
                    call.arg(seq).arg(dependent);
                }
                let _: i64 = call.invoke_async(&mut conn.clone()).await?;
            }
        }
        todo = more;
    }
    Ok(())
}

/// Links `dependent` to `dependency` (a job of another function) and tells it at once if
/// the dependency has already ended.
pub(crate) async fn link(
    conn: &Connection,
    keys: Option<&KeyRing>,
    dependent: &JobId,
    dependency: &JobId,
) -> Result<()> {
    link_many(conn, keys, vec![(dependent.clone(), dependency.clone())]).await
}

/// Links each `(dependent, dependency)` pair (the dependency in another function than its
/// dependent), one `link` call per dependencies' function (and per [`MAX_TELLS_PER_CALL`]
/// pairs), then tells the dependents of those that have already ended, together.
pub(crate) async fn link_many(
    conn: &Connection,
    keys: Option<&KeyRing>,
    pairs: Vec<(JobId, JobId)>,
) -> Result<()> {
    let mut by_function: BTreeMap<&FunctionName, Vec<&(JobId, JobId)>> = BTreeMap::new();
    for pair in &pairs {
        by_function.entry(&pair.1.function).or_default().push(pair);
    }
    let mut ended = Vec::new();
    for (function, pairs) in by_function {
        for chunk in pairs.chunks(MAX_TELLS_PER_CALL as usize) {
            let mut call = scripts::on_function(&scripts::LINK, function);
            for (dependent, dependency) in chunk {
                call.arg(dependency.seq).arg(dependent.to_string());
            }
            let states: Vec<String> = if chunk.len() == 1 {
                vec![call.invoke_async(&mut conn.clone()).await?]
            } else {
                call.invoke_async(&mut conn.clone()).await?
            };
            for ((dependent, dependency), state) in chunk.iter().zip(states) {
                if state != "pending" {
                    ended.extend([dependent.to_string(), dependency.to_string(), state]);
                }
            }
        }
    }
    deliver(conn, keys, ended).await
}

/// Re-checks the links of up to `limit` jobs of `function` that have waited long enough for
/// a re-check (on the queue's clock; each one's next re-check is pushed out as it is handed
/// out): links each again to its unfinished dependencies in other functions, and tells it
/// about those that have ended. Returns how many entries of the waiting set it looked at
/// (fewer than `limit`: none are left due).
pub(crate) async fn relink_due(
    conn: &Connection,
    keys: Option<&KeyRing>,
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
                deliver(
                    conn,
                    keys,
                    vec![id.to_string(), dependency.to_string(), state],
                )
                .await?;
            }
        }
    }
    Ok(looked)
}
