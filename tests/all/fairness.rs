//! Groups with real worker processes running real plugins: a group with many jobs does not
//! starve the small ones under three workers, a group's concurrency holds across them, and
//! a sequence (a group of concurrency 1) keeps its order through a worker's SIGKILL.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, FunctionName, JobId, JobState, Setting};
use wasmgear_proto::model::Attempt;

use wasmgear_testkit::{TestRedis, WorkerProcess, eventually, function, plugin_dir};

const WAIT: Duration = Duration::from_secs(120);

fn grouped(group: &str) -> EnqueueOptions {
    EnqueueOptions {
        group: Some(group.to_string()),
        ..EnqueueOptions::default()
    }
}

/// Enqueues `n` jobs of `f` with `input` in `group`; their ids.
async fn enqueue_group(
    client: &Client,
    f: &FunctionName,
    group: &str,
    input: &str,
    n: usize,
) -> Vec<JobId> {
    let options = grouped(group);
    let jobs: Vec<(&[u8], EnqueueOptions)> = (0..n)
        .map(|_| (input.as_bytes(), options.clone()))
        .collect();
    client.enqueue_many(f, &jobs).await.unwrap()
}

/// Waits until every job of `ids` has succeeded; each one's attempts (from its history).
async fn attempts_of(client: &Client, ids: &[JobId]) -> Vec<Vec<Attempt>> {
    let mut all = Vec::new();
    for id in ids {
        let status = eventually(WAIT, &format!("{id} to succeed"), || async {
            let status = client.status(id).await.ok()?;
            (status.record.state == JobState::Succeeded).then_some(status)
        })
        .await;
        all.push(status.record.history);
    }
    all
}

/// The start of an attempt, ms.
fn started(attempt: &Attempt) -> u64 {
    attempt.started_ms.unwrap_or_default()
}

/// The most attempts of `runs` running at once (each `[started, ended)`).
fn most_at_once(runs: &[(u64, u64)]) -> usize {
    runs.iter()
        .map(|&(start, _)| {
            runs.iter()
                .filter(|&&(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn three_workers(
    redis: &TestRedis,
    plugins: &std::path::Path,
    extra: &[&str],
) -> Vec<WorkerProcess> {
    (0..3)
        .map(|_| {
            let mut args = vec!["--concurrency", "4"];
            args.extend_from_slice(extra);
            WorkerProcess::builder(&redis.url())
                .plugins(plugins)
                .args(&args)
                .start()
        })
        .collect()
}

/// One group with 300 jobs and nine with five each, all ready before three workers start
/// leasing: each turn of the round takes one job of every group, so the 45 small jobs all
/// start before the sixth job of the big group does (without groups they would wait for
/// the 300).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_groups_are_not_starved_by_a_big_one_under_three_workers() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let plugins = plugin_dir(&["echo"]);
    let f = function("echo");
    client
        .configure(&f, &[Setting::Paused(true)])
        .await
        .unwrap();
    let _workers = three_workers(&redis, plugins.path(), &[]);
    let big = enqueue_group(&client, &f, "big", "big", 300).await;
    let mut small = Vec::new();
    for i in 0..9 {
        small.extend(enqueue_group(&client, &f, &format!("small-{i}"), "small", 5).await);
    }
    client
        .configure(&f, &[Setting::Paused(false)])
        .await
        .unwrap();
    let small_starts: Vec<u64> = attempts_of(&client, &small)
        .await
        .iter()
        .map(|attempts| started(&attempts[0]))
        .collect();
    let last_small = *small_starts.iter().max().unwrap();
    let big_starts: Vec<u64> = attempts_of(&client, &big)
        .await
        .iter()
        .map(|attempts| started(&attempts[0]))
        .collect();
    let big_before = big_starts.iter().filter(|&&s| s < last_small).count();
    assert!(
        big_before <= 5,
        "{big_before} jobs of the big group started before the last small one"
    );
}

/// Each group's concurrency holds over three workers of four slots each: never more than
/// two jobs of a group at once, while the groups together use more slots than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_s_concurrency_holds_across_worker_processes() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let plugins = plugin_dir(&["count"]);
    let f = function("count");
    client
        .configure(&f, &[Setting::GroupConcurrency(Some(2))])
        .await
        .unwrap();
    let _workers = three_workers(&redis, plugins.path(), &[]);
    let mut runs_by_group = Vec::new();
    let mut ids_by_group = Vec::new();
    for group in ["red", "green", "blue"] {
        ids_by_group.push(enqueue_group(&client, &f, group, "2 150", 8).await);
    }
    let mut all_runs = Vec::new();
    for ids in &ids_by_group {
        let runs: Vec<(u64, u64)> = attempts_of(&client, ids)
            .await
            .iter()
            .flat_map(|attempts| attempts.iter().map(|a| (started(a), a.ended_ms)))
            .collect();
        all_runs.extend(runs.iter().copied());
        runs_by_group.push(runs);
    }
    for runs in &runs_by_group {
        assert_eq!(most_at_once(runs), 2, "{runs:?}");
    }
    assert!(
        most_at_once(&all_runs) > 2,
        "the groups never ran side by side: {all_runs:?}"
    );
}

/// A sequence (group concurrency 1) runs its jobs one at a time in the order they came: the
/// worker running the first is SIGKILLed mid-job, its lease runs out, and the job runs
/// again on another worker before the second one starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_keeps_its_order_through_a_worker_sigkill() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let plugins = plugin_dir(&["count"]);
    let f = function("count");
    client
        .configure(&f, &[Setting::GroupConcurrency(Some(1))])
        .await
        .unwrap();
    let workers = three_workers(&redis, plugins.path(), &["--lease-ttl", "1500ms"]);
    let ids = enqueue_group(&client, &f, "order-42", "4 250", 4).await;
    // Another group runs beside it all along.
    let others = enqueue_group(&client, &f, "order-43", "1 50", 6).await;
    let holder = eventually(WAIT, "the first job to run", || async {
        let status = client.status(&ids[0]).await.ok()?;
        (status.record.state == JobState::Running)
            .then(|| status.record.worker.clone())
            .flatten()
    })
    .await;
    let victim = workers
        .iter()
        .position(|w| holder.contains(&format!("-{}-", w.pid())))
        .unwrap_or_else(|| panic!("no worker of ours is {holder}"));
    workers[victim].signal("KILL");
    let attempts = attempts_of(&client, &ids).await;
    attempts_of(&client, &others).await;
    assert!(
        attempts[0].len() >= 2,
        "the first job ran once only: {:?}",
        attempts[0]
    );
    // Every attempt of a job ends before any attempt of the next one starts.
    for pair in attempts.windows(2) {
        let ended = pair[0].iter().map(|a| a.ended_ms).max().unwrap();
        let next = pair[1].iter().map(started).min().unwrap();
        assert!(ended <= next, "{:?} overlaps {:?}", pair[0], pair[1]);
    }
}
