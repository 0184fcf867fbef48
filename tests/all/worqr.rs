//! worqr queues served by a real `wasmgear worker --source worqr:...` process, driven by a
//! worqr producer and peer written from worqr's document (`tests/support/worqr.rs`).

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;

use crate::support::worqr::{PREFIX, WorqrClient, md5_hex};
use wasmgear_testkit::{TestRedis, WorkerProcess, eventually, plugin_dir};

const WAIT: Duration = Duration::from_secs(60);
/// Jobs a worker started, by function.
const STARTED: &str = "wasmgear_jobs_started_total";
/// Jobs a worker finished, by function, state and error class.
const FINISHED: &str = "wasmgear_jobs_finished_total";
/// worqr's liveness time: a worker whose key is older than this is dead.
const LIVENESS: Duration = Duration::from_secs(3);

/// The `_done` messages of one queue.
struct DoneMessages(std::pin::Pin<Box<dyn futures_util::Stream<Item = redis::Msg> + Send>>);

impl DoneMessages {
    async fn subscribe(redis: &TestRedis, queue: &str) -> Self {
        let client = redis::Client::open(redis.url()).unwrap();
        let mut pubsub = client.get_async_pubsub().await.unwrap();
        pubsub
            .subscribe(WorqrClient::channel(queue, "done"))
            .await
            .unwrap();
        DoneMessages(Box::pin(pubsub.into_on_message()))
    }

    /// The next message, parsed.
    async fn next(&mut self) -> Value {
        let message = tokio::time::timeout(WAIT, self.0.next())
            .await
            .expect("a _done message in time")
            .expect("the subscription open");
        let payload: String = message.get_payload().unwrap();
        serde_json::from_str(&payload).unwrap_or_else(|e| panic!("{e}: {payload}"))
    }

    /// The next `n` messages, by task.
    async fn next_n(&mut self, n: usize) -> Vec<Value> {
        let mut messages = Vec::new();
        for _ in 0..n {
            messages.push(self.next().await);
        }
        messages.sort_by_key(|m| m["task"].as_str().unwrap_or_default().to_string());
        messages
    }
}

/// Starts `wasmgear worker` with `extra` (its `--source worqr:...` specs) and metrics (to
/// see the jobs it ran), and waits until it serves and is a registered worqr worker working
/// on `queue` (what the test needs to know before it pushes tasks); returns it with its
/// worqr worker id.
async fn start_registered_with_worqr(
    redis: &TestRedis,
    plugins: &std::path::Path,
    queue: &str,
    extra: &[&str],
) -> (WorkerProcess, String) {
    let mut client = WorqrClient::connect(&redis.url()).await;
    let before = client.workers().await;
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins)
        .args(extra)
        .metrics()
        .start();
    let url = redis.url();
    let id = eventually(WAIT, "the worker registered with worqr", || {
        let (url, before) = (url.clone(), before.clone());
        async move {
            let mut client = WorqrClient::connect(&url).await;
            let new = client
                .workers()
                .await
                .into_iter()
                .find(|w| !before.contains(w))?;
            let working = client.working_queues(&new).await == [queue];
            (working && client.alive(&new).await).then_some(new)
        }
    })
    .await;
    (worker, id)
}

/// Waits until `queue` has `n` processes, and returns them.
async fn processes(redis: &TestRedis, queue: &str, n: usize) -> Vec<String> {
    let url = redis.url();
    eventually(WAIT, &format!("{n} processes on {queue}"), || {
        let url = url.clone();
        async move {
            let mut client = WorqrClient::connect(&url).await;
            let processes = client.working_processes(queue).await;
            (processes.len() == n).then_some(processes)
        }
    })
    .await
}

/// Tasks a producer enqueues run on a plugin, and `_done` carries worqr's `{workerId, task}`
/// and the outcome; a finished task leaves no process, and its unique marker is gone so the
/// same unique task can be enqueued again. The same worker serves wasmgear's own queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worqr_tasks_run_on_plugins_and_done_carries_the_result() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let (_worker, id) = start_registered_with_worqr(
        &redis,
        plugins.path(),
        "thumbs",
        &["--source", "wasmgear", "--source", "worqr:thumbs=echo"],
    )
    .await;
    let mut client = WorqrClient::connect(&redis.url()).await;
    let mut done = DoneMessages::subscribe(&redis, "thumbs").await;
    client.enqueue("thumbs", "hello worqr").await;
    client.enqueue_unique("thumbs", "only once").await.unwrap();
    let messages = done.next_n(2).await;
    for (message, task) in messages.iter().zip(["hello worqr", "only once"]) {
        assert_eq!(message["task"], task, "{message}");
        assert_eq!(message["status"], "success", "{message}");
        assert_eq!(message["output"], task, "{message}");
        assert_eq!(message["workerId"], id.as_str(), "{message}");
    }
    assert!(client.tasks("thumbs").await.is_empty());
    assert!(client.working_processes("thumbs").await.is_empty());
    let mut conn = redis.raw().await;
    let marker: bool = redis::AsyncCommands::exists(
        &mut conn,
        format!("{PREFIX}:uniqueTasks:{}", md5_hex("only once")),
    )
    .await
    .unwrap();
    assert!(!marker, "the unique marker outlived its task");
    client.enqueue_unique("thumbs", "only once").await.unwrap();
    assert_eq!(done.next().await["status"], "success");

    crate::sources::own_queue_served_beside(&redis, "wasmgear, worqr:thumbs=echo");
}

/// The liveness key is renewed (it outlives worqr's 3 s many times over), so a worqr
/// peer's `cleanupWorkers`, run again and again meanwhile, never fails the worker nor takes
/// its running task away; the task is dequeued once and finishes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worqr_peer_never_fails_a_live_worker() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let (worker, id) = start_registered_with_worqr(
        &redis,
        plugins.path(),
        "slow",
        &["--source", "worqr:slow=count"],
    )
    .await;
    let mut client = WorqrClient::connect(&redis.url()).await;
    let mut done = DoneMessages::subscribe(&redis, "slow").await;
    client.enqueue("slow", "50 100").await;
    let running = processes(&redis, "slow", 1).await;
    let watched = Instant::now();
    let mut every = tokio::time::interval(Duration::from_millis(250));
    // Observed for longer than the liveness time: the key must be renewed throughout.
    while watched.elapsed() < LIVENESS + Duration::from_secs(1) {
        every.tick().await;
        client.cleanup_workers().await;
        assert!(client.alive(&id).await, "the liveness key ran out");
        assert!(
            client.workers().await.contains(&id),
            "the worker was failed"
        );
        assert_eq!(client.working_processes("slow").await, running);
        assert_eq!(
            client.process_task(&running[0]).await.as_deref(),
            Some("50 100")
        );
        assert!(
            client.tasks("slow").await.is_empty(),
            "the task was put back"
        );
    }
    let message = done.next().await;
    assert_eq!(message["output"], "counted to 50", "{message}");
    let count = [("function", "count")];
    assert_eq!(worker.metric(STARTED, &count), 1.0, "{}", worker.log());
}

/// A SIGKILLed worker's task is recovered by a worqr peer's `cleanupWorkers` once its
/// liveness key runs out, and runs again on another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worqr_peer_recovers_a_killed_workers_task() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let args = ["--source", "worqr:slow=count"];
    let (first, dead) = start_registered_with_worqr(&redis, plugins.path(), "slow", &args).await;
    let mut client = WorqrClient::connect(&redis.url()).await;
    let mut done = DoneMessages::subscribe(&redis, "slow").await;
    client.enqueue("slow", "40 100").await;
    processes(&redis, "slow", 1).await;
    first.signal("KILL");
    let url = redis.url();
    eventually(WAIT, "the killed worker's liveness key to run out", || {
        let (url, dead) = (url.clone(), dead.clone());
        async move {
            let mut client = WorqrClient::connect(&url).await;
            (!client.alive(&dead).await).then_some(())
        }
    })
    .await;
    client.cleanup_workers().await;
    assert_eq!(client.tasks("slow").await, ["40 100"]);
    assert!(!client.workers().await.contains(&dead));
    let (_second, id) = start_registered_with_worqr(&redis, plugins.path(), "slow", &args).await;
    let message = done.next().await;
    assert_eq!(message["output"], "counted to 40", "{message}");
    assert_eq!(message["workerId"], id.as_str(), "{message}");
}

/// Without any worqr peer, wasmgear workers supervise each other: a live worker puts back a
/// killed one's task, and only that one: its own running task stays its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasmgear_workers_recover_a_killed_peers_task_and_only_that() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let (first, dead) = start_registered_with_worqr(
        &redis,
        plugins.path(),
        "slow",
        &["--source", "worqr:slow=count", "--concurrency", "1"],
    )
    .await;
    let mut client = WorqrClient::connect(&redis.url()).await;
    let mut done = DoneMessages::subscribe(&redis, "slow").await;
    client.enqueue("slow", "50 100").await;
    let taken = processes(&redis, "slow", 1).await;
    let (second, id) = start_registered_with_worqr(
        &redis,
        plugins.path(),
        "slow",
        &["--source", "worqr:slow=count", "--concurrency", "2"],
    )
    .await;
    client.enqueue("slow", "120 100").await;
    let both = processes(&redis, "slow", 2).await;
    let own = both.iter().find(|p| !taken.contains(p)).unwrap().clone();
    first.signal("KILL");
    // Once the dead worker's liveness key has run out the survivor buries it: the dead
    // one's process is gone (its task back in the queue), the survivor's own untouched.
    let url = redis.url();
    eventually(WAIT, "the dead worker taken off the worker list", || {
        let (url, dead) = (url.clone(), dead.clone());
        async move {
            let mut client = WorqrClient::connect(&url).await;
            (!client.workers().await.contains(&dead)).then_some(())
        }
    })
    .await;
    assert_eq!(client.process_task(&own).await.as_deref(), Some("120 100"));
    assert_eq!(client.process_task(&taken[0]).await, None);
    let messages = done.next_n(2).await;
    assert_eq!(messages[0]["output"], "counted to 120", "{messages:?}");
    assert_eq!(messages[1]["output"], "counted to 50", "{messages:?}");
    assert!(messages.iter().all(|m| m["workerId"] == id.as_str()));
    // The survivor tells its operator what it did: that line is behaviour under test.
    let log = second.log();
    assert!(
        log.contains("a dead worqr worker's tasks went back to the queue"),
        "{log}"
    );
    let count = [("function", "count")];
    assert_eq!(second.metric(STARTED, &count), 2.0, "{log}");
}

/// A failure that may pass is retried (its task back in the queue after the backoff) until
/// the attempts run out, then `_done` says failed with the error; a final failure is not
/// retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worqr_failures_retry_then_report_and_cancel_stops() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["fail"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "worqr:flaky=fail", "--retry-backoff", "100ms"])
        .metrics()
        .start();
    let mut client = WorqrClient::connect(&redis.url()).await;
    let mut flaky = DoneMessages::subscribe(&redis, "flaky").await;
    client.enqueue("flaky", "retry").await;
    client.enqueue("flaky", "now").await;
    let messages = flaky.next_n(2).await;
    assert_eq!(messages[0]["task"], "now", "{messages:?}");
    assert_eq!(messages[0]["status"], "failed");
    let error = messages[0]["error"].as_str().unwrap();
    assert!(error.contains("failed on purpose: now"), "{error}");
    assert_eq!(messages[1]["status"], "failed");
    let error = messages[1]["error"].as_str().unwrap();
    assert!(error.contains("asked to retry"), "{error}");
    // Three attempts (the default), so two retries; the final failure ran once.
    let fail = [("function", "fail")];
    assert_eq!(worker.metric(STARTED, &fail), 4.0, "{}", worker.log());
    let mut conn = redis.raw().await;
    let attempts: usize =
        redis::AsyncCommands::hlen(&mut conn, format!("{PREFIX}:wasmgear:attempts"))
            .await
            .unwrap();
    assert_eq!(attempts, 0, "bookkeeping left behind");
    assert!(client.working_processes("flaky").await.is_empty());
}

/// `cancelTasks` stops a running task, reported as cancelled, however soon after the
/// dequeue it comes: before the dequeue's reply, before the job runs, or while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worqr_cancel_tasks_stops_a_task_at_any_moment() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    // Heartbeats every third of a second: a cancel that came before the job ran is seen
    // at the next one.
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "worqr:slow=count", "--lease-ttl", "1s"])
        .metrics()
        .start();
    let mut client = WorqrClient::connect(&redis.url()).await;
    let mut slow = DoneMessages::subscribe(&redis, "slow").await;
    // Each task would run for a minute; the first of the rounds that lost its cancel
    // would time out waiting for its message.
    for round in 0..8 {
        let task = format!("600 10{round}");
        client.enqueue("slow", &task).await;
        let running = processes(&redis, "slow", 1).await;
        client.cancel_tasks("slow", &task).await;
        let message = slow.next().await;
        assert_eq!(message["task"], task.as_str(), "{message}");
        assert_eq!(message["status"], "cancelled", "{message}");
        assert_eq!(client.process_task(&running[0]).await, None);
        assert!(client.tasks("slow").await.is_empty());
        processes(&redis, "slow", 0).await;
    }
    let timed_out = [("error_class", "timed-out")];
    assert_eq!(worker.metric(FINISHED, &timed_out), 0.0, "{}", worker.log());
}

/// A worker stopped mid-task hands its task back to the front of the queue and leaves
/// worqr's worker lists; another worker then runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_hands_back_and_leaves() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let (mut worker, id) = start_registered_with_worqr(
        &redis,
        plugins.path(),
        "slow",
        &[
            "--source",
            "worqr:slow=count",
            "--shutdown-grace",
            "100ms",
            "--concurrency",
            "1",
        ],
    )
    .await;
    let mut client = WorqrClient::connect(&redis.url()).await;
    client.enqueue("slow", "600 100").await;
    processes(&redis, "slow", 1).await;
    client.enqueue("slow", "behind").await;
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(WAIT), Some(0), "{}", worker.log());
    // Handed back where the next dequeue takes from (the tail), ahead of "behind".
    assert_eq!(client.tasks("slow").await, ["behind", "600 100"]);
    assert!(client.working_processes("slow").await.is_empty());
    assert!(!client.workers().await.contains(&id));
    assert!(!client.alive(&id).await);
    assert!(client.working_queues(&id).await.is_empty());
}

/// Data a worker cannot use is logged and the worker serves on: a queue key of the wrong
/// type, then an empty task (run with empty input) once the key is fixed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_worqr_data_is_logged_and_the_worker_serves_on() {
    let redis = TestRedis::start();
    let mut conn = redis.raw().await;
    let queue = format!("{PREFIX}:queues:odd");
    let _: () = redis::AsyncCommands::set(&mut conn, &queue, "not a list")
        .await
        .unwrap();
    let plugins = plugin_dir(&["echo"]);
    let (worker, _) = start_registered_with_worqr(
        &redis,
        plugins.path(),
        "odd",
        &["--source", "worqr:odd=echo"],
    )
    .await;
    // Being logged is what the worker does with a key it cannot use: the behaviour under
    // test, waited for.
    eventually(WAIT, "the bad queue logged", || {
        let log = worker.log();
        async move { log.contains("WRONGTYPE").then_some(()) }
    })
    .await;
    let _: () = redis::AsyncCommands::del(&mut conn, &queue).await.unwrap();
    let mut client = WorqrClient::connect(&redis.url()).await;
    let mut done = DoneMessages::subscribe(&redis, "odd").await;
    client.enqueue("odd", "").await;
    client.enqueue("odd", "fine").await;
    let messages = done.next_n(2).await;
    assert_eq!(messages[0]["output"], "", "{messages:?}");
    assert_eq!(messages[1]["output"], "fine", "{messages:?}");
}
