//! Section `replicas`: what `--min-replicas 1` costs. On a primary with one replica, the
//! same producer enqueues jobs one per call (16 calls on their way at once), then in calls
//! of 1,000, and one node at concurrency 100 drains them, each without and with its writes
//! confirmed by the replica (`WAIT 1` after each `enqueue` and each `complete`).

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use wasmgear_client::{Client, EnqueueOptions, MinReplicas};
use wasmgear_proto::FunctionName;
use wasmgear_testkit::sentinel::TestReplicaSet;

use super::node::{bulk_enqueue, node_builder, paused_echo, resume_and_drain as drain, run_node};
use super::{Plan, Row, ms, row};

/// Single enqueues on their way at once.
const IN_FLIGHT: usize = 16;

/// Enqueues `n` jobs of `f` one per call, [`IN_FLIGHT`] at once; the time it took.
async fn single_enqueues(client: &Client, f: &FunctionName, n: usize) -> Duration {
    let started = Instant::now();
    futures_util::stream::iter(0..n)
        .map(|_| async move {
            client
                .enqueue(f, b"x", &EnqueueOptions::default())
                .await
                .unwrap()
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    started.elapsed()
}

pub(crate) async fn replicas(plan: &Plan, rows: &mut Vec<Row>) {
    let set = tokio::task::block_in_place(|| TestReplicaSet::start(1, 0));
    let url = set.node(0).url();
    let singles = plan.single.max(500);
    let jobs = plan.jobs;
    let plugins = tempfile::tempdir().unwrap();
    let mut measured = Vec::new();
    for (label, min) in [("without", 0), ("with", 1)] {
        let min = MinReplicas::new(min, Duration::from_secs(1)).unwrap();
        let client = Client::connect(&url).await.unwrap().with_min_replicas(min);
        let f = FunctionName::new(format!("replicas-{label}")).unwrap();
        paused_echo(&client, plugins.path(), &f).await;
        let single = single_enqueues(&client, &f, singles).await;
        let bulk = bulk_enqueue(&client, &f, jobs).await;
        let node = run_node(
            node_builder(plugins.path(), 100)
                .min_replicas(min)
                .build(&url)
                .await
                .unwrap(),
        );
        let drained = drain(&client, &f).await;
        node.stop().await;
        eprintln!(
            "[replicas] {label} --min-replicas: {singles} single enqueues in {single:?}, {jobs} in bulk in {bulk:?}, drained {} in {drained:?}",
            singles + jobs
        );
        measured.push((single, bulk, drained));
    }
    let [(single0, bulk0, drain0), (single1, bulk1, drain1)] = measured[..] else {
        unreachable!("two runs")
    };
    let change = |with: Duration, without: Duration| {
        format!(
            "{:+.0} %",
            (with.as_secs_f64() / without.as_secs_f64() - 1.0) * 100.0
        )
    };
    rows.push(row(
        format!(
            "enqueue {singles} jobs one per call, {IN_FLIGHT} in flight, --min-replicas 1 (vs none)"
        ),
        ms(single1),
        ms(single0),
        change(single1, single0),
    ));
    rows.push(row(
        format!("enqueue {jobs} jobs in calls of 1,000, --min-replicas 1 (vs none)"),
        ms(bulk1),
        ms(bulk0),
        change(bulk1, bulk0),
    ));
    rows.push(row(
        format!(
            "drain {} jobs, concurrency 100, completions confirmed (vs none)",
            singles + jobs
        ),
        ms(drain1),
        ms(drain0),
        change(drain1, drain0),
    ));
}
