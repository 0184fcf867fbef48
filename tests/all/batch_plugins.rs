//! Batch plugins (issue 43): a plugin built against the world `batch` whose manifest says
//! `batch = { max, wait }` gets up to `max` jobs of its function in one fresh instance and
//! one call; each job ends on its own. Tested with the `sum-batch` plugin on real worker
//! processes: how many instances 500 jobs take, mixed outcomes in one batch, a batch whose
//! worker is SIGKILLed, a batch plugin beside a normal one, one job of a running batch
//! cancelled.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_proto::{FunctionName, JobId};
use wasmgear_testkit::{
    TestRedis, WorkerProcess, artifact, eventually, function, plugin_dir, wasmgear,
};

const WAIT: Duration = Duration::from_secs(60);

/// A plugin directory serving `sum-batch` with `manifest`, and the other named plugins.
fn batch_dir(manifest: &str, others: &[&str]) -> tempfile::TempDir {
    let dir = plugin_dir(others);
    std::fs::copy(artifact("sum-batch"), dir.path().join("sum-batch.wasm")).unwrap();
    std::fs::write(dir.path().join("sum-batch.toml"), manifest).unwrap();
    dir
}

fn sum_batch() -> FunctionName {
    function("sum-batch")
}

/// Enqueues `inputs` for `f` in one call, each with `attempts` attempts.
async fn enqueue(
    client: &wasmgear_client::Client,
    f: &FunctionName,
    inputs: &[String],
    attempts: u32,
) -> Vec<JobId> {
    let options = EnqueueOptions {
        max_attempts: Some(attempts),
        ..EnqueueOptions::default()
    };
    let jobs: Vec<(&[u8], EnqueueOptions)> = inputs
        .iter()
        .map(|input| (input.as_bytes(), options.clone()))
        .collect();
    client.enqueue_many(f, &jobs).await.unwrap()
}

/// Waits for each of `ids` to end and returns their statuses, in order.
async fn ends(client: &wasmgear_client::Client, ids: &[JobId]) -> Vec<wasmgear_client::JobStatus> {
    let mut statuses = Vec::new();
    for id in ids {
        client.wait(id, Some(WAIT), |_| {}).await.unwrap();
        statuses.push(client.status(id).await.unwrap());
    }
    statuses
}

fn output(status: &wasmgear_client::JobStatus) -> String {
    String::from_utf8(status.output.clone().unwrap_or_default()).unwrap()
}

/// 500 jobs ready before the worker starts run in at most ceil(500 / max) instances (the
/// worker's metrics count them), each with its own output; the batch sizes are in the
/// metrics too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_jobs_take_at_most_ten_instances_of_fifty() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = sum_batch();
    let inputs: Vec<String> = (0..500).map(|i| format!("{i} 1")).collect();
    let ids = enqueue(&client, &f, &inputs, 1).await;
    let plugins = batch_dir("batch = { max = 50, wait = \"50ms\" }\n", &[]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--concurrency", "4"])
        .metrics()
        .start();
    let statuses = ends(&client, &ids).await;
    for (i, status) in statuses.iter().enumerate() {
        assert_eq!(status.record.state, JobState::Succeeded, "{i}");
        assert_eq!(output(status), format!("{} (in a batch of 50)", i + 1));
        assert_eq!(status.record.attempt, 1);
    }
    let labels = [("function", "sum-batch")];
    eventually(WAIT, "the worker to count the 500 jobs", || async {
        let finished = worker.metric("wasmgear_jobs_finished_total", &labels);
        (finished == 500.0).then_some(())
    })
    .await;
    assert_eq!(worker.metric("wasmgear_jobs_started_total", &labels), 500.0);
    let instances = worker.metric("wasmgear_instances_total", &labels);
    assert!(
        (1.0..=10.0).contains(&instances),
        "500 jobs took {instances} instances"
    );
    assert_eq!(
        worker.metric("wasmgear_batch_jobs_sum", &labels),
        500.0,
        "the batch sizes add up to the jobs"
    );
    assert_eq!(
        worker.metric("wasmgear_batch_jobs_count", &labels),
        instances
    );
}

/// One batch, four outcomes: a sum, a sum of nothing, a word that fails its job for good,
/// and a job that asks for a retry (its next attempt runs in a batch of its own). Each job
/// keeps its own output, error, attempts and history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_job_of_a_batch_ends_on_its_own() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = sum_batch();
    let inputs = ["1 2 3", "", "1 x", "flaky 4"].map(String::from);
    let ids = enqueue(&client, &f, &inputs, 3).await;
    let plugins = batch_dir("batch = { max = 10, wait = \"20ms\" }\n", &[]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let statuses = ends(&client, &ids).await;
    assert_eq!(statuses[0].record.state, JobState::Succeeded);
    assert_eq!(output(&statuses[0]), "6 (in a batch of 4)");
    assert_eq!(output(&statuses[1]), "0 (in a batch of 4)");
    let failed = &statuses[2].record;
    assert_eq!(failed.state, JobState::Failed);
    let error = failed.error.as_ref().unwrap();
    assert_eq!(error.class, "guest-error");
    assert!(
        error.message.contains("\"x\" is not a whole number"),
        "{}",
        error.message
    );
    assert_eq!(
        failed.attempt, 1,
        "a fail is for good, whatever attempts remain"
    );
    let flaky = &statuses[3];
    assert_eq!(flaky.record.state, JobState::Succeeded);
    assert_eq!(flaky.record.attempt, 2);
    assert_eq!(output(flaky), "4 (in a batch of 1)");
    assert_eq!(flaky.record.history.len(), 2);
}

/// A worker SIGKILLed while its batch runs: every job of the batch is leased again once the
/// leases run out, by another worker, and succeeds on its second attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_of_a_killed_workers_batch_is_leased_again() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = sum_batch();
    let inputs = ["sleep 60000 1", "2", "3"].map(String::from);
    let ids = enqueue(&client, &f, &inputs, 3).await;
    let plugins = batch_dir("batch = { max = 10 }\n", &[]);
    let mut first = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--lease-ttl", "1s"])
        .start();
    // Killed once each lease was renewed (a lease that runs out before its first renewal
    // gives its attempt back: the job would run as its first attempt again).
    let mut leased_until = Vec::new();
    for id in &ids {
        let until = eventually(WAIT, "the batch to run", || async {
            let record = client.status(id).await.unwrap().record;
            (record.state == JobState::Running)
                .then_some(record.lease_until_ms)
                .flatten()
        })
        .await;
        leased_until.push(until);
    }
    for (id, until) in ids.iter().zip(leased_until) {
        eventually(WAIT, "the batch's leases to be renewed", || async {
            let record = client.status(id).await.unwrap().record;
            record
                .lease_until_ms
                .is_some_and(|now| now > until)
                .then_some(())
        })
        .await;
    }
    first.signal("KILL");
    assert!(first.wait_exit(Duration::from_secs(10)).is_some());
    let _second = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let statuses = ends(&client, &ids).await;
    for (status, sum) in statuses.iter().zip(["1", "2", "3"]) {
        assert_eq!(status.record.state, JobState::Succeeded);
        assert_eq!(status.record.attempt, 2, "{}", status.id);
        assert!(output(status).starts_with(&format!("{sum} (in a batch of ")));
    }
}

/// A batch plugin beside a one-job plugin on one worker: both drain, the batch plugin's
/// jobs in far fewer instances than jobs, `echo`'s one instance each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_plugin_runs_beside_a_normal_one() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let plugins = batch_dir("batch = { max = 100, wait = \"10ms\" }\n", &["echo"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--concurrency", "2"])
        .metrics()
        .start();
    let inputs: Vec<String> = (0..200).map(|i| i.to_string()).collect();
    let sums = enqueue(&client, &sum_batch(), &inputs, 1).await;
    let echoes = enqueue(&client, &function("echo"), &inputs, 1).await;
    for (status, input) in ends(&client, &sums).await.iter().zip(&inputs) {
        assert_eq!(status.record.state, JobState::Succeeded);
        assert!(output(status).starts_with(&format!("{input} (in a batch of ")));
    }
    for (status, input) in ends(&client, &echoes).await.iter().zip(&inputs) {
        assert_eq!(status.record.state, JobState::Succeeded);
        assert_eq!(output(status), *input);
    }
    let counted = |f: &'static str| {
        let worker = &worker;
        async move {
            eventually(WAIT, "the worker to count the jobs", || async {
                let labels = [("function", f)];
                (worker.metric("wasmgear_jobs_finished_total", &labels) == 200.0)
                    .then(|| worker.metric("wasmgear_instances_total", &labels))
            })
            .await
        }
    };
    assert_eq!(counted("echo").await, 200.0);
    let batched = counted("sum-batch").await;
    assert!(batched < 100.0, "200 jobs took {batched} instances");
    // The worker list says which plugin takes batches, and how many jobs a call.
    let listed = wasmgear(&["workers", "--redis", &redis.url()], &[]);
    let listed = wasmgear_testkit::stdout(&listed);
    let line = |f: &str| {
        listed
            .lines()
            .find(|line| line.contains(&format!("serves {f} (plugin ")))
            .unwrap_or_else(|| panic!("{f} is not listed: {listed}"))
    };
    assert!(
        line("sum-batch").ends_with(", batches of up to 100)"),
        "{listed}"
    );
    assert!(!line("echo").contains("batches"), "{listed}");
}

/// One job of a running batch cancelled: `batch::each` skips it when its turn comes, and
/// the worker records it cancelled; the others of the batch succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cancelled_while_its_batch_runs_is_skipped() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = sum_batch();
    let inputs = ["sleep 1500 1", "2", "3"].map(String::from);
    let ids = enqueue(&client, &f, &inputs, 3).await;
    let plugins = batch_dir("batch = { max = 10 }\n", &[]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .metrics()
        .start();
    eventually(WAIT, "the batch to run", || async {
        let record = client.status(&ids[2]).await.unwrap().record;
        (record.state == JobState::Running).then_some(())
    })
    .await;
    client.cancel(&ids[2]).await.unwrap();
    let statuses = ends(&client, &ids).await;
    assert_eq!(output(&statuses[0]), "1 (in a batch of 3)");
    assert_eq!(output(&statuses[1]), "2 (in a batch of 3)");
    assert_eq!(statuses[2].record.state, JobState::Cancelled);
    assert_eq!(statuses[2].record.attempt, 1);
    // The guest skipped it (an error, which the worker took for the cancel): had it run the
    // job, its success would have been refused as cancelled with no error class.
    let skipped = [
        ("function", "sum-batch"),
        ("state", "cancelled"),
        ("error_class", "cancelled"),
    ];
    eventually(WAIT, "the worker to count the skipped job", || async {
        (worker.metric("wasmgear_jobs_finished_total", &skipped) == 1.0).then_some(())
    })
    .await;
}

/// A manifest's `concurrency` counts batches: with `concurrency = 1`, the second batch of
/// 20 jobs is leased only once the first one's results are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_plugins_concurrency_counts_batches() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = sum_batch();
    let inputs: Vec<String> = (0..20).map(|i| format!("sleep 20 {i}")).collect();
    let ids = enqueue(&client, &f, &inputs, 1).await;
    let plugins = batch_dir("concurrency = 1\nbatch = { max = 10 }\n", &[]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--concurrency", "4"])
        .start();
    let mut attempts: Vec<(u64, u64)> = ends(&client, &ids)
        .await
        .iter()
        .map(|status| {
            assert_eq!(
                output(status).split_once(' ').unwrap().1,
                "(in a batch of 10)"
            );
            let attempt = &status.record.history[0];
            (attempt.started_ms.unwrap(), attempt.ended_ms)
        })
        .collect();
    attempts.sort_unstable();
    let first_ended = attempts[..10]
        .iter()
        .map(|(_, ended)| *ended)
        .max()
        .unwrap();
    let second_started = attempts[10..]
        .iter()
        .map(|(started, _)| *started)
        .min()
        .unwrap();
    assert!(
        first_ended <= second_started,
        "the second batch started at {second_started}, before the first ended at {first_ended}"
    );
}
