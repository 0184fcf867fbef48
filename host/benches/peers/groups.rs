//! Section `groups`: fairness inside a function. The drain of 100,000 no-op jobs spread over
//! 10,000 groups by one node at concurrency 100, beside the same drain without groups (the
//! cost of the round, which should stay within 20 %); and the fairness figure: one group
//! holding 100,000 jobs and 99 holding 10 each, all ready at once: how many leases it takes
//! until every one of the 990 small-group jobs has been leased (round robin: 990 + 10, one
//! job of the big group per turn of the round; the goal is 2,000).

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobId, Setting, WorkerQueue};
use wasmgear_proto::{AttemptNotes, FunctionName, LeaseRequest};

use super::node::{resume_and_drain as drain, start_node};
use super::{Plan, Row, ms, row};

/// Enqueues `n` no-op jobs of `f`, job `i` in group `group(i)` (`None`: no group), while
/// the function is paused; their ids.
async fn enqueue_paused(
    client: &Client,
    f: &FunctionName,
    n: usize,
    group: impl Fn(usize) -> Option<String>,
) -> Vec<JobId> {
    client.configure(f, &[Setting::Paused(true)]).await.unwrap();
    let mut ids = Vec::with_capacity(n);
    for start in (0..n).step_by(5000) {
        let jobs: Vec<(&[u8], EnqueueOptions)> = (start..(start + 5000).min(n))
            .map(|i| {
                let options = EnqueueOptions {
                    group: group(i),
                    ..EnqueueOptions::default()
                };
                (&b""[..], options)
            })
            .collect();
        ids.extend(client.enqueue_many(f, &jobs).await.unwrap());
    }
    ids
}

pub(crate) async fn groups(plan: &Plan, url: &str, rows: &mut Vec<Row>) {
    let quick = plan.jobs < 10_000;
    let (jobs, groups, big, small_groups, small) = match quick {
        true => (10_000, 1000, 10_000, 99, 10),
        false => (100_000, 10_000, 100_000, 99, 10),
    };
    let client = Client::connect(url).await.unwrap();
    let plugins = tempfile::tempdir().unwrap();
    let names = ["groups-plain", "groups-spread", "groups-fair"];
    for name in names {
        std::fs::copy(
            wasmgear_test_artifacts::ECHO,
            plugins.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let [plain, spread, fair] = names.map(|n| FunctionName::new(n).unwrap());
    // Every job is kept (the fairness figure reads when each started).
    for f in [&plain, &spread, &fair] {
        client
            .configure(f, &[Setting::KeepFinished(Some(2 * jobs as u64))])
            .await
            .unwrap();
    }
    let node = start_node(url, plugins.path(), 100).await;

    enqueue_paused(&client, &plain, jobs, |_| None).await;
    let without = drain(&client, &plain).await;
    eprintln!("[groups] {jobs} jobs without groups drained in {without:?}");
    enqueue_paused(&client, &spread, jobs, |i| {
        Some(format!("tenant-{}", i % groups))
    })
    .await;
    let with = drain(&client, &spread).await;
    eprintln!("[groups] {jobs} jobs over {groups} groups drained in {with:?}");

    node.stop().await;
    // One big group enqueued first, then the small ones: without groups every small job
    // would wait for the big group's. Leased here a hundred at a time (as a node at
    // concurrency 100 asks), each call's jobs completed before the next: the order of the
    // leases is what counts, not their times.
    enqueue_paused(&client, &fair, big, |_| Some("whale".into())).await;
    let mut small_ids = std::collections::HashSet::new();
    for g in 0..small_groups {
        small_ids
            .extend(enqueue_paused(&client, &fair, small, |_| Some(format!("minnow-{g}"))).await);
    }
    client
        .configure(&fair, &[Setting::Paused(false)])
        .await
        .unwrap();
    let hand = WorkerQueue::connect(url, "bench-groups").await.unwrap();
    let (mut leases, mut small_left) = (0, small_ids.len());
    while small_left > 0 {
        let leased = hand
            .lease(
                &[LeaseRequest::new(fair.clone())],
                100,
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        assert!(!leased.is_empty(), "the fair drain stalled");
        for lease in &leased {
            leases += 1;
            if small_ids.contains(&lease.info.id) {
                small_left -= 1;
                if small_left == 0 {
                    break;
                }
            }
        }
        for lease in &leased {
            hand.complete(lease, b"", &AttemptNotes::default())
                .await
                .unwrap();
        }
    }
    eprintln!(
        "[groups] the {} small-group jobs all started within the first {leases} leases",
        small_ids.len()
    );

    let per_job = |d: Duration| d.as_secs_f64() * 1e6 / jobs as f64;
    rows.push(row(
        format!("drain {jobs} no-op jobs over {groups} groups, concurrency 100 (vs no groups)"),
        ms(with),
        ms(without),
        format!("{:+.0} %", (per_job(with) / per_job(without) - 1.0) * 100.0),
    ));
    rows.push(row(
        format!(
            "leases until all {} jobs of {small_groups} small groups started, beside one group of {big}",
            small_ids.len()
        ),
        leases.to_string(),
        format!("goal ≤ {}", 2 * small_ids.len() + 20),
        "-",
    ));
}
