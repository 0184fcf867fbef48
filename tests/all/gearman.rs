//! A real `wasmgear worker --source gearman://...` process as a worker of a real gearmand,
//! driven by the `gearman` command-line client, `gearadmin` and python3-gearman 0.1.0.

use std::time::Duration;

use crate::support::clients::gearman_py;
use wasmgear_testkit::gearmand::Gearmand;
use wasmgear_testkit::{TestRedis, WorkerProcess, eventually_sync, plugin_dir};

const WAIT: Duration = Duration::from_secs(60);
/// Jobs a worker started, by function.
const STARTED: &str = "wasmgear_jobs_started_total";
/// Jobs a worker finished, by function, state and error class.
const FINISHED: &str = "wasmgear_jobs_finished_total";

/// Starts a worker of `gearmand` (with metrics, to see the jobs it ran) and waits until it
/// serves and gearmand lists it with `functions` (what the test needs to know before it
/// submits jobs); returns it and its worker id.
fn start_listed_by_gearmand(
    redis: &TestRedis,
    gearmand: &Gearmand,
    plugins: &std::path::Path,
    functions: &[&str],
) -> (WorkerProcess, String) {
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins)
        .args(&["--source", &gearmand.spec()])
        .metrics()
        .start();
    let mut id = String::new();
    eventually_sync(WAIT, "gearmand to list the worker", || {
        let listing = gearmand.admin(&["--workers"]);
        let found = listing.lines().find_map(|line| {
            let (who, can) = line.split_once(" : ")?;
            let mut can: Vec<&str> = can.split_whitespace().collect();
            can.sort();
            let mut want = functions.to_vec();
            want.sort();
            (can == want).then(|| who.split_whitespace().last().unwrap_or("").to_string())
        });
        match found {
            Some(found) => {
                id = found;
                true
            }
            None => false,
        }
    });
    (worker, id)
}

/// Foreground jobs from the `gearman` client get the plugin's output, background jobs run,
/// progress reaches the client as `WORK_STATUS`, a failing job makes the client exit 1 with
/// the message, and `gearadmin --workers` names the worker (by its wasmgear id) and its
/// functions.
#[test]
fn gearman_cli_jobs_run_on_plugins() {
    let redis = TestRedis::start();
    let gearmand = Gearmand::start();
    let plugins = plugin_dir(&["reverse", "count", "fail", "echo"]);
    let (worker, id) = start_listed_by_gearmand(
        &redis,
        &gearmand,
        plugins.path(),
        &["reverse", "count", "fail", "echo"],
    );
    assert!(!id.is_empty() && id != "-", "{id}");

    let out = gearmand.client(&["-f", "reverse", "hello gearman"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "namraeg olleh");

    let out = gearmand.client(&["-f", "count", "4 50"]);
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("counted to 4"), "{shown}");
    assert!(shown.contains("50% Complete"), "{shown}");
    assert!(shown.contains("100% Complete"), "{shown}");

    let out = gearmand.client(&["-f", "fail", "now"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("failed on purpose: now"), "{said}");

    let out = gearmand.client(&["-b", "-f", "echo", "in the background"]);
    assert!(out.status.success(), "{out:?}");
    eventually_sync(WAIT, "the background job to run", || {
        worker.metric(FINISHED, &[("state", "succeeded")]) == 3.0
    });
    assert_eq!(worker.metric(STARTED, &[]), 4.0, "each job ran once");
}

/// python3-gearman sees COMPLETE with the output and the progress numbers, FAILED with the
/// message as a warning, and a background job runs.
#[test]
fn python3_gearman_sees_results_progress_and_failures() {
    let redis = TestRedis::start();
    let gearmand = Gearmand::start();
    let plugins = plugin_dir(&["reverse", "count", "fail"]);
    let (worker, _) = start_listed_by_gearmand(
        &redis,
        &gearmand,
        plugins.path(),
        &["reverse", "count", "fail"],
    );
    let server = gearmand.address();

    let seen = gearman_py(&server, &["reverse", "hello"]);
    assert_eq!(seen["state"], "COMPLETE", "{seen}");
    assert_eq!(seen["result"], "olleh", "{seen}");

    let seen = gearman_py(&server, &["count", "3 50"]);
    assert_eq!(seen["state"], "COMPLETE", "{seen}");
    assert_eq!(seen["result"], "counted to 3", "{seen}");
    assert_eq!(seen["numerator"], 3, "{seen}");
    assert_eq!(seen["denominator"], 3, "{seen}");

    let seen = gearman_py(&server, &["fail", "now"]);
    assert_eq!(seen["state"], "FAILED", "{seen}");
    let warning = seen["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.contains("[guest-error] failed on purpose: now"),
        "{seen}"
    );

    let seen = gearman_py(&server, &["reverse", "later", "bg"]);
    assert_eq!(seen["state"], "CREATED", "{seen}");
    eventually_sync(WAIT, "the background job to run", || {
        worker.metric(FINISHED, &[("state", "succeeded")]) == 3.0
    });
}

/// gearmand restarted under a running worker: the worker connects again, registers its
/// functions again, and serves the next job.
#[test]
fn a_restarted_gearmand_is_connected_to_again() {
    let redis = TestRedis::start();
    let mut gearmand = Gearmand::start();
    let plugins = plugin_dir(&["reverse"]);
    let (worker, id) = start_listed_by_gearmand(&redis, &gearmand, plugins.path(), &["reverse"]);
    gearmand.restart();
    eventually_sync(WAIT, "the worker to register again", || {
        gearmand
            .admin(&["--workers"])
            .lines()
            .any(|line| line.contains(&id) && line.ends_with(": reverse"))
    });
    let out = gearmand.client(&["-f", "reverse", "again"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "niaga");
    // The worker tells its operator it lost gearmand and found it again: those lines are
    // behaviour under test.
    let log = worker.log();
    assert!(log.contains("lost the connection to gearmand"), "{log}");
    assert!(log.contains("connected to gearmand again"), "{log}");
}

/// A worker whose gearmand cannot be reached exits 6 with a sentence naming it.
#[test]
fn an_unreachable_gearmand_is_reported() {
    let redis = TestRedis::start();
    let closed = wasmgear_testkit::ClosedPort::new();
    let plugins = plugin_dir(&["reverse"]);
    let dir = plugins.path().to_str().unwrap();
    let spec = format!("gearman://127.0.0.1:{}", closed.port());
    let out = wasmgear_testkit::wasmgear(
        &["worker", "--plugins", dir, "--source", &spec],
        &[("WASMGEAR_REDIS_URL", redis.url().as_str())],
    );
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let said = wasmgear_testkit::stderr(&out);
    assert!(said.contains("gearmand cannot be reached"), "{said}");
}

/// Gearman has no lease: when a worker dies mid-job, gearmand gives the job to another
/// worker as soon as the dead one's connection closes (here a background job, run again from
/// the start).
#[test]
fn a_killed_workers_job_goes_to_another_worker() {
    let redis = TestRedis::start();
    let gearmand = Gearmand::start();
    let plugins = plugin_dir(&["count"]);
    let (first, _) = start_listed_by_gearmand(&redis, &gearmand, plugins.path(), &["count"]);
    let out = gearmand.client(&["-b", "-f", "count", "600 100"]);
    assert!(out.status.success(), "{out:?}");
    let count = [("function", "count")];
    eventually_sync(WAIT, "the first worker to take the job", || {
        first.metric(STARTED, &count) == 1.0
    });
    first.signal("KILL");
    let second = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", &gearmand.spec()])
        .metrics()
        .start();
    eventually_sync(WAIT, "the second worker to take the job", || {
        second.metric(STARTED, &count) == 1.0
    });
}

/// A worker of two gearmand servers registers with both and runs the jobs of each.
#[test]
fn a_worker_serves_several_gearmand_servers() {
    let redis = TestRedis::start();
    let (one, two) = (Gearmand::start(), Gearmand::start());
    let plugins = plugin_dir(&["reverse"]);
    let spec = format!("gearman://{},{}", one.address(), two.address());
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", &spec])
        .start();
    for (gearmand, text) in [(&one, "first"), (&two, "second")] {
        eventually_sync(WAIT, "gearmand to list the worker", || {
            gearmand
                .admin(&["--workers"])
                .lines()
                .any(|line| line.ends_with(": reverse"))
        });
        let out = gearmand.client(&["-f", "reverse", text]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            text.chars().rev().collect::<String>()
        );
    }
}

/// gearmand may assign more jobs of a function than its plugin's `concurrency` lets run at
/// once; the others wait in the worker and run, each with its whole lease, when a slot frees
/// (here a lease of 1 s, and a wait of 2 s behind the first job).
#[test]
fn jobs_beyond_a_plugins_concurrency_wait_their_turn() {
    let redis = TestRedis::start();
    let gearmand = Gearmand::start();
    // `reverse` beside it keeps the worker asking for jobs while `count` has no slot.
    let plugins = plugin_dir(&["count", "reverse"]);
    std::fs::write(plugins.path().join("count.toml"), "concurrency = 1\n").unwrap();
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--source", &gearmand.spec(), "--lease-ttl", "1s"])
        .metrics()
        .start();
    eventually_sync(WAIT, "gearmand to list the worker", || {
        gearmand
            .admin(&["--workers"])
            .lines()
            .any(|line| line.contains(" : ") && line.contains("count"))
    });
    for _ in 0..2 {
        let out = gearmand.client(&["-b", "-f", "count", "2 1000"]);
        assert!(out.status.success(), "{out:?}");
    }
    let succeeded = [("function", "count"), ("state", "succeeded")];
    eventually_sync(WAIT, "both jobs to succeed", || {
        worker.metric(FINISHED, &succeeded) == 2.0
    });
    // Each had its whole lease: none was stopped for a lease that ran out.
    let lost = [("function", "count"), ("error_class", "lease-lost")];
    assert_eq!(worker.metric(FINISHED, &lost), 0.0, "{}", worker.log());
}
