//! What the node does beside its jobs: it advertises itself every [`ADVERTISE_EVERY`],
//! keeps the source's housekeeping going, and passes cancel requests to running jobs.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use wasmgear_proto::WorkerAd;
use wasmgear_runtime::CancelReason;

use crate::node::*;
use crate::*;
use wasmgear_proto::sync::Locked;

/// How often a worker renews its entry in the worker list.
pub const ADVERTISE_EVERY: Duration = Duration::from_secs(2);

/// How long an entry lives without renewal: a dead worker disappears after this.
pub const ADVERTISE_TTL: Duration = Duration::from_secs(10);

/// Keeps the worker's subscriptions and its worker-list entry up to date.
pub(crate) async fn upkeep<S: JobSource>(node: Arc<Node<S>>, stopping: CancellationToken) {
    let started_ms = wasmgear_proto::units::now_ms();
    let mut changes = node.registry.changes();
    let mut served = node.serving();
    loop {
        let current = node.serving();
        if current != served {
            if let Err(error) = node.source.serve(&current).await {
                tracing::warn!(%error, "cannot subscribe to the events of the new functions");
            }
            // Leave the roll call of functions no longer served.
            let gone: Vec<_> = served
                .iter()
                .filter(|f| !current.contains(f))
                .cloned()
                .collect();
            if !gone.is_empty() {
                let _ = node.source.leave(&gone).await;
            }
            served = current;
        }
        let ad = WorkerAd {
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_ms,
            concurrency: node.config.concurrency,
            functions: served
                .iter()
                .filter_map(|f| {
                    node.registry
                        .get(f)
                        .map(|p| (f.to_string(), p.version().to_string()))
                })
                .collect(),
            running: node
                .running
                .locked()
                .values()
                .map(|(id, _)| id.to_string())
                .collect(),
            plugin_errors: node
                .registry
                .errors()
                .into_iter()
                .map(|(p, e)| format!("{p:?}: {e}"))
                .collect(),
            sources: Vec::new(),
            deployed: served
                .iter()
                .filter(|f| node.registry.is_deployed(f))
                .map(|f| f.to_string())
                .collect(),
            batches: served
                .iter()
                .filter_map(|f| {
                    let plugin = node.registry.get(f)?;
                    Some((f.to_string(), plugin.batch()?.max))
                })
                .collect(),
        };
        if let Err(error) = node.source.advertise(&ad, &served, ADVERTISE_TTL).await {
            node.metrics.source_error("advertise");
            tracing::warn!(%error, "cannot renew this worker's entry in the worker list");
        }
        if let Err(error) = node.source.maintain(&served).await {
            node.metrics.source_error("maintain");
            tracing::warn!(%error, "queue housekeeping failed; trying again shortly");
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = tokio::time::sleep(ADVERTISE_EVERY) => {}
            _ = stopping.cancelled() => return,
        }
    }
}

/// Fires the cancel signal of each running job whose cancellation the source reports.
pub(crate) async fn forward_cancel_requests<S: JobSource>(
    node: Arc<Node<S>>,
    stopping: CancellationToken,
) {
    let mut requests = node.source.cancel_requests();
    loop {
        let request = tokio::select! {
            request = requests.recv() => request,
            _ = stopping.cancelled() => return,
        };
        match request {
            Ok(request) => {
                let running = node.running.locked();
                let meant = running
                    .iter()
                    .filter(|(token, (job, _))| request.matches(job, token));
                for (_, (id, signal)) in meant {
                    tracing::info!(job_id = %id, "cancel requested: asking the job to stop");
                    signal.cancel(CancelReason::Requested);
                }
            }
            // Missed some: heartbeats will catch those jobs.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}
