//! qless queues served by a real `wasmgear worker --source qless:...` process, with the real
//! qless-py (0.11.4, from PyPI) as producer, observer and competing worker.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

use crate::support::clients::qless_py;
use wasmgear_testkit::{TestRedis, WorkerProcess, eventually, plugin_dir};

const WAIT: Duration = Duration::from_secs(60);
/// Jobs a worker started, by function.
const STARTED: &str = "wasmgear_jobs_started_total";
/// Jobs a worker finished, by function, state and error class.
const FINISHED: &str = "wasmgear_jobs_finished_total";

/// `qless-py put QUEUE KLASS DATA OPTIONS...`: the new jid.
fn put(redis: &TestRedis, queue: &str, klass: &str, data: &str, options: &[&str]) -> String {
    let mut args = vec!["put", queue, klass, data];
    args.extend_from_slice(options);
    qless_py(&redis.url(), &args)
        .as_str()
        .expect("a jid")
        .to_string()
}

/// The job as qless-py sees it (null once cancelled).
fn job(redis: &TestRedis, jid: &str) -> Value {
    qless_py(&redis.url(), &["job", jid])
}

/// Waits until job `jid` is in `state`; returns it.
async fn job_in_state(redis: &TestRedis, jid: &str, state: &str) -> Value {
    eventually(WAIT, &format!("qless job {jid} {state}"), || {
        let job = job(redis, jid);
        async move { (job["state"] == state).then_some(job) }
    })
    .await
}

/// What each history entry of `job` says happened, in order.
fn history(job: &Value) -> Vec<String> {
    job["history"]
        .as_array()
        .expect("a history")
        .iter()
        .map(|entry| entry["what"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The worker that popped `job` last, by its history.
fn popped_by(job: &Value) -> String {
    let entries = job["history"].as_array().expect("a history");
    let popped = entries
        .iter()
        .rev()
        .find(|entry| entry["what"] == "popped")
        .unwrap_or_else(|| panic!("never popped: {job}"));
    popped["worker"].as_str().unwrap_or_default().to_string()
}

/// Jobs put with priorities, tags, retries and dependencies run on plugins: qless-py sees
/// them complete with the history put → popped (by the wasmgear worker) → done, the output
/// in the job hash, higher priorities first, a dependent only after its dependency, and a
/// job of a function no plugin serves left waiting. At the end qless-py lists the worker,
/// with no jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qless_jobs_run_on_plugins_with_qless_semantics() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["reverse"]);
    let first = put(
        &redis,
        "work",
        "jobs.reverse",
        r#""first""#,
        &["priority=1"],
    );
    let depends = format!("depends={first}");
    let later = put(&redis, "work", "reverse", r#""later""#, &[&depends]);
    let unserved = put(&redis, "work", "jobs.resize", r#""img""#, &["priority=50"]);
    let urgent = put(
        &redis,
        "work",
        "jobs.reverse",
        r#""urgent""#,
        &["priority=10", "tags=a,b", "retries=2"],
    );
    assert_eq!(job(&redis, &later)["state"], "depends");
    // The order the worker pops them in: what qless publishes on `ql:popped` for tracked
    // jobs (their history keeps whole seconds).
    let mut conn = redis.raw().await;
    for jid in [&first, &later, &urgent] {
        let _: i64 = redis::AsyncCommands::zadd(&mut conn, "ql:tracked", jid.as_str(), 0)
            .await
            .unwrap();
    }
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe("ql:popped").await.unwrap();
    let mut popped = pubsub.into_on_message();
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "qless:work", "--concurrency", "1"])
        .start();

    let done = job_in_state(&redis, &later, "complete").await;
    assert_eq!(done["output"], "retal", "{done}");
    for (jid, output) in [(&urgent, "tnegru"), (&first, "tsrif")] {
        let done = job_in_state(&redis, jid, "complete").await;
        assert_eq!(done["output"], output, "{done}");
        assert_eq!(history(&done), ["put", "popped", "done"], "{done}");
        assert_eq!(done["worker"], "", "{done}");
    }
    let urgent_job = job(&redis, &urgent);
    assert_eq!(urgent_job["tags"], serde_json::json!(["a", "b"]));
    assert_eq!(urgent_job["remaining"], 2);
    // One worker, one job at a time: the urgent job first, the dependent last.
    let mut order = Vec::new();
    for _ in 0..3 {
        let message = tokio::time::timeout(WAIT, popped.next())
            .await
            .expect("a pop published in time")
            .expect("the subscription open");
        order.push(message.get_payload::<String>().unwrap());
    }
    assert_eq!(order, [urgent.as_str(), first.as_str(), later.as_str()]);
    assert_eq!(job(&redis, &unserved)["state"], "waiting");

    let me = popped_by(&job(&redis, &first));
    let workers = qless_py(&redis.url(), &["workers"]);
    let listed = workers
        .as_array()
        .expect("workers")
        .iter()
        .find(|w| w["name"] == me.as_str())
        .unwrap_or_else(|| panic!("{me} not among {workers}"));
    assert_eq!(listed["jobs"], 0, "{workers}");
    assert_eq!(
        qless_py(&redis.url(), &["worker", &me])["jobs"],
        serde_json::json!([])
    );
}

/// A failure for good ends the job `failed`, in a group named by the plugin's error class,
/// with the worker named; a failure that may pass is retried while qless' retries last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qless_failures_fail_in_the_error_class_group_and_retries_count_down() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["fail"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "qless:jobs", "--retry-backoff", "100ms"])
        .start();
    let now = put(&redis, "jobs", "fail", r#""now""#, &[]);
    let failed = job_in_state(&redis, &now, "failed").await;
    assert_eq!(failed["failure"]["group"], "guest-error", "{failed}");
    let message = failed["failure"]["message"].as_str().unwrap();
    assert!(message.contains("failed on purpose: now"), "{message}");
    let me = popped_by(&failed);
    assert_eq!(failed["failure"]["worker"], me.as_str(), "{failed}");
    assert_eq!(history(&failed), ["put", "popped", "failed"], "{failed}");
    assert_eq!(failed["remaining"], 5, "a failure for good uses no retry");

    let retried = put(&redis, "jobs", "fail", r#""retry""#, &["retries=1"]);
    let failed = job_in_state(&redis, &retried, "failed").await;
    assert_eq!(
        history(&failed),
        ["put", "popped", "popped", "failed"],
        "{failed}"
    );
    assert_eq!(failed["remaining"], 0, "{failed}");
    assert_eq!(failed["failure"]["group"], "guest-error", "{failed}");
}

/// Locks last qless' `heartbeat` setting (here 2 s), and the worker renews them: a job
/// running longer than that stays its own while a qless-py worker keeps popping the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_the_lock_under_a_short_heartbeat_setting() {
    let redis = TestRedis::start();
    qless_py(&redis.url(), &["config", "heartbeat", "2"]);
    qless_py(&redis.url(), &["config", "grace-period", "0"]);
    let plugins = plugin_dir(&["count"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "qless:slow"])
        .start();
    // One step after five seconds: more than two heartbeat periods with no progress report
    // (which renews the lock too) in between.
    let jid = put(&redis, "slow", "count", r#""1 5000""#, &[]);
    job_in_state(&redis, &jid, "running").await;
    let done = eventually(WAIT, "the job to complete", || {
        let popped = qless_py(&redis.url(), &["pop", "slow", "competitor"]);
        assert_eq!(popped, Value::Null, "a competitor took the job");
        let job = job(&redis, &jid);
        async move { (job["state"] == "complete").then_some(job) }
    })
    .await;
    assert_eq!(done["output"], "counted to 1", "{done}");
    assert_eq!(history(&done), ["put", "popped", "done"], "{done}");
}

/// A SIGKILLed worker's job is popped again by a qless-py worker once its lock and the
/// grace period run out, with one retry fewer, as qless does it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_job_is_popped_again_by_qless_py() {
    let redis = TestRedis::start();
    qless_py(&redis.url(), &["config", "heartbeat", "2"]);
    qless_py(&redis.url(), &["config", "grace-period", "1"]);
    let plugins = plugin_dir(&["count"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "qless:slow"])
        .start();
    let jid = put(&redis, "slow", "count", r#""600 100""#, &["retries=3"]);
    let running = job_in_state(&redis, &jid, "running").await;
    let killed = popped_by(&running);
    worker.signal("KILL");
    let rescued = eventually(WAIT, "qless-py to pop the job again", || {
        let popped = qless_py(&redis.url(), &["pop", "slow", "rescuer"]);
        async move { (!popped.is_null()).then_some(popped) }
    })
    .await;
    assert_eq!(rescued["jid"], jid.as_str());
    assert_eq!(rescued["remaining"], 2, "{rescued}");
    assert_eq!(rescued["worker"], "rescuer", "{rescued}");
    assert_eq!(
        history(&rescued),
        ["put", "popped", "timed-out", "popped"],
        "{rescued}"
    );
    assert_ne!(killed, "rescuer");
    let gone = qless_py(&redis.url(), &["worker", &killed]);
    assert_eq!(gone["jobs"], serde_json::json!([]), "{gone}");
}

/// qless-py's cancel stops a running job; nothing is written for it afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_qless_job_stops() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "qless:slow"])
        .metrics()
        .start();
    let jid = put(&redis, "slow", "count", r#""600 100""#, &[]);
    job_in_state(&redis, &jid, "running").await;
    qless_py(&redis.url(), &["cancel", &jid]);
    // It stopped as cancelled (not for a lost lease), and its report changed nothing.
    let count = [("function", "count")];
    wasmgear_testkit::eventually_sync(WAIT, "the job to stop", || {
        worker.metric(FINISHED, &count) == 1.0
    });
    let stopped = [
        ("function", "count"),
        ("error_class", "cancelled"),
        ("state", "refused"),
    ];
    assert_eq!(worker.metric(FINISHED, &stopped), 1.0, "{}", worker.log());
    // How it heard (qless' own notice, not a lease that ran out) only its log says.
    let log = worker.log();
    assert!(
        log.contains("qless asks this worker to stop a job"),
        "{log}"
    );
    assert_eq!(job(&redis, &jid), Value::Null);
}

/// A job whose lock ran out while it ran, and which this same worker popped again, is
/// finished by the new run only: the earlier run is stopped, and what it reports changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_popped_again_by_the_same_worker_is_finished_by_the_new_run_only() {
    let redis = TestRedis::start();
    qless_py(&redis.url(), &["config", "grace-period", "0"]);
    let plugins = plugin_dir(&["count"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "qless:slow"])
        .metrics()
        .start();
    // Long enough for the worker to pop it again while the first run goes on, also on a
    // loaded machine (it polls every second).
    let jid = put(&redis, "slow", "count", r#""1 20000""#, &[]);
    let running = job_in_state(&redis, &jid, "running").await;
    // The worker renews a lock first within a second of starting the job, and a renewal
    // after the lock was expired here would keep it: wait for that first renewal (the lock
    // then runs out later than the pop set it to: popped at + the 60 s heartbeat).
    let popped_at = running["history"]
        .as_array()
        .and_then(|entries| entries.iter().rev().find(|e| e["what"] == "popped"))
        .and_then(|entry| entry["when"].as_f64())
        .unwrap_or_else(|| panic!("no popped time: {running}"));
    let conn = redis.raw().await;
    eventually(WAIT, "the worker's first renewal of the job's lock", || {
        let mut conn = conn.clone();
        let jid = jid.clone();
        async move {
            let lock: Option<f64> =
                redis::AsyncCommands::zscore(&mut conn, "ql:q:slow-locks", &jid)
                    .await
                    .unwrap();
            lock.filter(|lock| *lock > popped_at + 60.0 + 0.001)
        }
    })
    .await;
    // The lock runs out (as after a stall): the worker's next pop hands the job over again,
    // to itself. On a loaded machine a renewal can come before that pop and keep the lock:
    // it is run out again until a pop has taken the job over (bounded). Checking that no pop
    // has yet and running the lock out are one script, so that the lock of the second pop
    // is never run out too (which would hand the job over a third time).
    let run_out = redis::Script::new(
        r"for _, entry in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
            if string.find(entry, 'timed%-out') then return 1 end
          end
          redis.call('ZADD', KEYS[2], 0, ARGV[1])
          return 0",
    );
    eventually(WAIT, "the worker to pop the job again", || {
        let mut conn = conn.clone();
        let (jid, run_out) = (jid.clone(), &run_out);
        async move {
            let taken_over: i64 = run_out
                .key(format!("ql:j:{jid}-history"))
                .key("ql:q:slow-locks")
                .arg(&jid)
                .invoke_async(&mut conn)
                .await
                .unwrap();
            (taken_over == 1).then_some(())
        }
    })
    .await;
    let done = job_in_state(&redis, &jid, "complete").await;
    assert_eq!(
        history(&done),
        ["put", "popped", "timed-out", "popped", "done"],
        "{done}"
    );
    let count = [("function", "count")];
    assert_eq!(worker.metric(STARTED, &count), 2.0, "{}", worker.log());
    // The earlier run ends, and what it reports is refused.
    let refused = [("function", "count"), ("state", "refused")];
    wasmgear_testkit::eventually_sync(WAIT, "the first run to end", || {
        worker.metric(FINISHED, &refused) == 1.0
    });
    // Why it was stopped (qless' notice to this worker) only its log says.
    let log = worker.log();
    assert!(
        log.contains("qless asks this worker to stop a job"),
        "{log}"
    );
    assert_eq!(job(&redis, &jid)["state"], "complete");
}

/// A scheduled job waits until it is due, a recurring job makes a job each interval (named
/// `JID-N`, as qless names them), and the day's statistics count the waits and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_and_recurring_jobs_run_when_due_and_statistics_count_them() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["reverse"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", "qless:timed"])
        .start();
    let later = put(&redis, "timed", "reverse", r#""later""#, &["delay=2"]);
    assert_eq!(job(&redis, &later)["state"], "scheduled");
    let recurring = qless_py(
        &redis.url(),
        &["recur", "timed", "reverse", r#""tick""#, "1"],
    );
    let recurring = recurring.as_str().expect("a jid").to_string();
    let done = job_in_state(&redis, &later, "complete").await;
    assert_eq!(done["output"], "retal", "{done}");
    for n in [1, 2] {
        let child = format!("{recurring}-{n}");
        let done = job_in_state(&redis, &child, "complete").await;
        assert_eq!(done["output"], "kcit", "{done}");
    }
    let stats = qless_py(&redis.url(), &["stats", "timed"]);
    for what in ["wait", "run"] {
        let count = stats[what]["count"].as_u64().unwrap_or(0);
        assert!(count >= 3, "{what}: {stats}");
    }
}
