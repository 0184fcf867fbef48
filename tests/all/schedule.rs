//! Recurring jobs (`wasmgear schedule`): fired by the workers, exactly one job per tick
//! however many workers run, on cron expressions in time zones or fixed intervals; pause,
//! resume, removal; missed ticks fired once or skipped; a schedule that cannot fire delays
//! only itself; a clock that went back; bad arguments to the library refused.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, JobId, JobStatus, Tick};
use wasmgear_proto::keys::{FunctionKeys, ScheduleKeys};
use wasmgear_proto::schedule::Recurrence;

use wasmgear_testkit::{
    TestRedis, WorkerProcess, eventually, function, json, plugin_copies, stderr, stdout, wasmgear,
};

const WAIT: Duration = Duration::from_secs(60);

fn schedule(redis: &TestRedis, args: &[&str]) -> std::process::Output {
    let url = redis.url();
    let mut all = vec!["schedule"];
    all.extend_from_slice(args);
    wasmgear(&all, &[("WASMGEAR_REDIS_URL", &url)])
}

fn ok(out: std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out)
}

/// Every job of `function` enqueued so far (numbers 1, 2, ... up to its sequence).
async fn jobs(client: &Client, function: &str) -> Vec<JobStatus> {
    let mut found = Vec::new();
    for seq in 1.. {
        let id = JobId {
            function: wasmgear_testkit::function(function),
            seq,
        };
        match client.status(&id).await {
            Ok(status) => found.push(status),
            Err(_) => return found,
        }
    }
    found
}

/// The tick times of `function`'s jobs, sorted, checking each names `schedule`.
async fn ticks_of(client: &Client, function: &str, schedule: &str) -> Vec<u64> {
    let mut ticks: Vec<u64> = jobs(client, function)
        .await
        .iter()
        .map(|job| {
            assert_eq!(job.record.schedule.as_deref(), Some(schedule), "{job:?}");
            job.record.tick_ms.expect("a tick time")
        })
        .collect();
    ticks.sort();
    ticks
}

/// Waits until `function` has at least `n` jobs; returns their ticks.
async fn until_ticks(client: &Client, function: &str, schedule: &str, n: usize) -> Vec<u64> {
    eventually(WAIT, &format!("{n} jobs of {function}"), || async {
        let ticks = ticks_of(client, function, schedule).await;
        (ticks.len() >= n).then_some(ticks)
    })
    .await
}

fn workers(redis: &TestRedis, dir: &std::path::Path, n: usize) -> Vec<WorkerProcess> {
    (0..n)
        .map(|_| WorkerProcess::builder(&redis.url()).plugins(dir).start())
        .collect()
}

/// Three workers, an `--every 1s` schedule: ten ticks make ten jobs, one per tick (distinct,
/// consecutive seconds: none twice, none skipped), each naming its schedule and tick (also
/// in `status`). Pause stops it while another
/// schedule goes on; resume starts it again; removal stops it for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_fire_one_job_per_tick() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = plugin_copies("echo", &["beat".into(), "control".into()]);
    let _workers = workers(&redis, dir.path(), 3);
    ok(schedule(
        &redis,
        &[
            "add",
            "beat",
            "--function",
            "beat",
            "--every",
            "1s",
            "--input",
            "tick",
        ],
    ));
    ok(schedule(
        &redis,
        &["add", "control", "--function", "control", "--every", "1s"],
    ));

    let ticks = until_ticks(&client, "beat", "beat", 10).await;
    for pair in ticks.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1000,
            "one job per tick, every tick: {ticks:?}"
        );
    }
    assert!(ticks.iter().all(|t| t % 1000 == 0), "{ticks:?}");
    let jobs_now = jobs(&client, "beat").await;

    assert!(
        jobs_now
            .iter()
            .all(|j| j.output.as_deref() == Some(&b"tick"[..]))
    );
    let url = redis.url();
    let shown = ok(wasmgear(
        &["status", &jobs_now[0].id.to_string()],
        &[("WASMGEAR_REDIS_URL", &url)],
    ));
    assert!(shown.contains("schedule  beat, tick "), "{shown}");

    // Paused: nothing fires for it while the control schedule ticks three more times.
    ok(schedule(&redis, &["pause", "beat"]));
    let listed = json(&schedule(&redis, &["list", "--json"]));
    let beat = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "beat")
        .unwrap();
    assert_eq!(
        (beat["paused"].as_bool(), beat["next_ms"].is_null()),
        (Some(true), true)
    );
    let paused_at = ticks_of(&client, "beat", "beat").await.len();
    let control = ticks_of(&client, "control", "control").await.len();
    until_ticks(&client, "control", "control", control + 3).await;
    // A tick that was being fired as the pause came may land; nothing after it.
    let after_pause = ticks_of(&client, "beat", "beat").await.len();
    assert!(after_pause <= paused_at + 1, "{paused_at} -> {after_pause}");

    ok(schedule(&redis, &["resume", "beat"]));
    until_ticks(&client, "beat", "beat", after_pause + 2).await;

    // Removed: nothing more, while the control goes on.
    ok(schedule(&redis, &["rm", "beat"]));
    let removed_at = ticks_of(&client, "beat", "beat").await.len();
    let control = ticks_of(&client, "control", "control").await.len();
    until_ticks(&client, "control", "control", control + 3).await;
    assert!(ticks_of(&client, "beat", "beat").await.len() <= removed_at + 1);
    let out = schedule(&redis, &["rm", "beat"]);
    assert_eq!(out.status.code(), Some(5));
    assert!(
        stderr(&out).contains("no schedule beat"),
        "{}",
        stderr(&out)
    );
}

/// A cron expression with seconds fires on its seconds; a five-field one in a time zone is
/// next due at the minute that zone says (the list shows it, computed from Redis' clock);
/// invalid expressions, zones, names and intervals are refused in one sentence, and change
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_expressions_fire_at_their_times_and_bad_ones_are_refused() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = plugin_copies("echo", &["even".into()]);
    let _worker = workers(&redis, dir.path(), 1);
    ok(schedule(
        &redis,
        &[
            "add",
            "even",
            "--function",
            "even",
            "--cron",
            "*/2 * * * * *",
        ],
    ));
    let even = until_ticks(&client, "even", "even", 3).await;
    assert!(even.iter().all(|t| t % 2000 == 0), "{even:?}");

    let before = client.redis_now_ms().await.unwrap();
    ok(schedule(
        &redis,
        &[
            "add",
            "paris",
            "--function",
            "even",
            "--cron",
            "0 9 * * *",
            "--tz",
            "Europe/Paris",
        ],
    ));
    let listed = json(&schedule(&redis, &["list", "--json"]));
    let paris = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "paris")
        .unwrap();
    let expected = Recurrence::cron("0 9 * * *", "Europe/Paris")
        .unwrap()
        .next_after(before)
        .unwrap()
        .unwrap();
    assert_eq!(paris["next_ms"].as_u64(), Some(expected));
    assert_eq!(paris["recurrence"]["tz"], "Europe/Paris");
    // Replaced in place with --replace (refused without it, below).
    ok(schedule(
        &redis,
        &[
            "add",
            "paris",
            "--function",
            "even",
            "--cron",
            "0 9 * * *",
            "--tz",
            "Europe/Paris",
            "--replace",
        ],
    ));
    let table = ok(schedule(&redis, &["list"]));
    assert!(table.contains("cron \"0 9 * * *\" Europe/Paris"), "{table}");

    let before = ok(schedule(&redis, &["list", "--json"]));
    for (args, message) in [
        (
            vec!["add", "x", "--function", "even", "--cron", "61 * * * *"],
            "invalid cron expression \"61 * * * *\": ",
        ),
        (
            vec![
                "add",
                "x",
                "--function",
                "even",
                "--cron",
                "* * * * *",
                "--tz",
                "Mars/Olympus",
            ],
            "unknown time zone \"Mars/Olympus\"",
        ),
        (
            vec!["add", "x", "--function", "even", "--every", "10ms"],
            "shorter than 1s",
        ),
        (
            vec!["add", "bad name", "--function", "even", "--every", "1s"],
            "schedule name \"bad name\"",
        ),
        (
            vec!["add", "even", "--function", "even", "--every", "1s"],
            "schedule even exists already",
        ),
        (vec!["add", "x", "--function", "even"], "required"),
        (vec!["pause", "nope"], "no schedule nope"),
    ] {
        let out = schedule(&redis, &args);
        assert!(
            matches!(out.status.code(), Some(2) | Some(5)),
            "{args:?}: {}",
            stderr(&out)
        );
        let err = stderr(&out);
        assert!(err.contains(message), "{args:?}: {err}");
        // (clap's own usage errors come with the usage.)
        if message != "required" {
            assert_eq!(err.trim_end().lines().count(), 1, "one sentence: {err}");
        }
    }
    assert_eq!(ok(schedule(&redis, &["list", "--json"])), before);
}

/// Ticks missed while no worker ran: `--catch-up one` fires once, for the latest missed
/// tick, when a worker comes; `--catch-up none` fires none of them. Both then go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_ticks_fire_once_or_not_at_all() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    ok(schedule(
        &redis,
        &["add", "once", "--function", "once", "--every", "1s"],
    ));
    ok(schedule(
        &redis,
        &[
            "add",
            "skip",
            "--function",
            "skip",
            "--every",
            "1s",
            "--catch-up",
            "none",
        ],
    ));
    let listed = json(&schedule(&redis, &["list", "--json"]));
    let first = listed[0]["next_ms"].as_u64().unwrap();
    // No worker: wait (on Redis' clock) until three ticks have passed.
    eventually(WAIT, "three ticks to pass", || async {
        (client.redis_now_ms().await.unwrap() >= first + 2500).then_some(())
    })
    .await;
    let dir = plugin_copies("echo", &["once".into(), "skip".into()]);
    let started = client.redis_now_ms().await.unwrap();
    let _worker = workers(&redis, dir.path(), 1);
    let once = until_ticks(&client, "once", "once", 2).await;
    // The first job is the latest missed tick (at or after first + 2s), none before it.
    assert!(
        once[0] >= first + 2000 && once[0] <= started,
        "{once:?} from {first}"
    );
    assert_eq!(once[1] - once[0], 1000, "{once:?}");
    let skip = until_ticks(&client, "skip", "skip", 1).await;
    assert!(
        skip[0] > started,
        "no missed tick fired: {skip:?} (worker started {started})"
    );
    let _ = function("once");
}

/// The listed schedule `name` (`schedule list --json`).
fn listed(redis: &TestRedis, name: &str) -> serde_json::Value {
    let all = json(&schedule(redis, &["list", "--json"]));
    all.as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no schedule {name} in {all}"))
}

/// Two schedules due at the same ticks, the first in order whose enqueue Redis refuses (its
/// function's `ticks` key holds a string): the other keeps firing every tick; `schedule
/// list` (table and JSON) says why the first cannot fire and counts its tries, the worker
/// logs it once (not at every try); repaired, it fires again and its error is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_that_cannot_fire_delays_only_itself() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let mut raw = redis.raw().await;
    let broken_ticks = FunctionKeys::new(&function("broken")).ticks();
    // Same ticks; "a-broken" comes first in each pass (equal scores go by name).
    ok(schedule(
        &redis,
        &["add", "a-broken", "--function", "broken", "--every", "1s"],
    ));
    ok(schedule(
        &redis,
        &["add", "b-good", "--function", "good", "--every", "1s"],
    ));
    let _: () = redis::cmd("SET")
        .arg(&broken_ticks)
        .arg("not a hash")
        .query_async(&mut raw)
        .await
        .unwrap();
    let dir = plugin_copies("echo", &["good".into(), "broken".into()]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .start();

    let good = until_ticks(&client, "good", "b-good", 5).await;
    for pair in good.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "every tick: {good:?}");
    }
    let failing = eventually(WAIT, "a-broken to have failed 3 times", || async {
        let error = listed(&redis, "a-broken")["error"].clone();
        (error["failures"].as_u64() >= Some(3)).then_some(error)
    })
    .await;
    let reason = failing["error"].as_str().unwrap();
    assert!(reason.contains("WRONGTYPE"), "{failing}");
    assert!(
        failing["retry_ms"].as_u64() > failing["tick_ms"].as_u64(),
        "{failing}"
    );
    let table = ok(schedule(&redis, &["list"]));
    assert!(
        table.contains("schedule a-broken cannot fire its tick of") && table.contains("WRONGTYPE"),
        "{table}"
    );
    assert!(jobs(&client, "broken").await.is_empty());
    // Logging the failure once per reason, not once per tick, is behaviour under test.
    let log = worker.log();
    let logged: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("schedule cannot fire"))
        .collect();
    assert_eq!(logged.len(), 1, "logged once per reason: {log}");
    assert!(logged[0].contains("a-broken"), "{log}");

    // Repaired: it fires again (within its backoff), and says nothing is wrong any more.
    let _: () = redis::cmd("DEL")
        .arg(&broken_ticks)
        .query_async(&mut raw)
        .await
        .unwrap();
    until_ticks(&client, "broken", "a-broken", 1).await;
    eventually(WAIT, "a-broken's error to be gone", || async {
        listed(&redis, "a-broken")["error"].is_null().then_some(())
    })
    .await;
    assert!(!ok(schedule(&redis, &["list"])).contains("cannot fire"));
}

/// Writes what a scheduler pass on a Redis clock `hours` ahead leaves for schedule `name` of
/// `function`, ticking every second: its function's queue keeps a tick that far ahead (a
/// real `enqueue` of that tick's job), and its next tick and the time that was set are that
/// far ahead (written by hand: a test cannot move Redis' clock). Returns that tick.
async fn clock_ahead_pass(
    redis: &TestRedis,
    client: &Client,
    (name, function): (&str, &str),
    hours: u64,
) -> u64 {
    let ahead = client.redis_now_ms().await.unwrap() + hours * 3_600_000;
    let tick = ahead / 1000 * 1000;
    let options = EnqueueOptions {
        tick: Some(Tick {
            schedule: name.into(),
            at_ms: tick,
        }),
        ..EnqueueOptions::default()
    };
    let enqueued = client
        .submit(&wasmgear_testkit::function(function), &[(b"", options)])
        .await
        .unwrap();
    assert!(enqueued[0].created);
    let mut raw = redis.raw().await;
    let _: () = redis::pipe()
        .zadd(ScheduleKeys::next(), name, tick + 1000)
        .zadd(ScheduleKeys::advanced(), name, ahead)
        .query_async(&mut raw)
        .await
        .unwrap();
    tick
}

/// After Redis' clock was hours ahead and came back (the state a pass on that clock
/// leaves, see `clock_ahead_pass`): `schedule add --replace` resets the next tick and the
/// last tick the queue keeps; and without a replace, two workers fire it again at once,
/// at the ticks of the real time, one job per tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_fires_again_after_redis_clock_went_back() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let add = ["add", "beat", "--function", "beat", "--every", "1s"];
    ok(schedule(&redis, &add));
    let ticks_key = FunctionKeys::new(&function("beat")).ticks();
    let mut raw = redis.raw().await;

    // Replaced: the next tick is the first after now, and the queue forgot the tick ahead.
    let an_hour_ahead = clock_ahead_pass(&redis, &client, ("beat", "beat"), 1).await;
    assert!(listed(&redis, "beat")["next_ms"].as_u64() > Some(an_hour_ahead));
    let mut replace = add.to_vec();
    replace.push("--replace");
    ok(schedule(&redis, &replace));
    let now = client.redis_now_ms().await.unwrap();
    let next = listed(&redis, "beat")["next_ms"].as_u64().unwrap();
    assert!(next > now && next <= now + 1000, "{next} (now {now})");
    let kept: Option<String> = redis::cmd("HGET")
        .arg(&ticks_key)
        .arg("beat")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(kept, None);

    // Not replaced: the workers bring it back and fire it at once, one job per tick.
    let ahead = clock_ahead_pass(&redis, &client, ("beat", "beat"), 2).await;
    let dir = plugin_copies("echo", &["beat".into()]);
    let _workers = workers(&redis, dir.path(), 2);
    let now_ticks = eventually(WAIT, "4 jobs at the real time's ticks", || async {
        let ticks: Vec<u64> = ticks_of(&client, "beat", "beat")
            .await
            .into_iter()
            .filter(|&t| t < an_hour_ahead - 1_800_000)
            .collect();
        (ticks.len() >= 4).then_some(ticks)
    })
    .await;
    for pair in now_ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "one job per tick: {now_ticks:?}");
    }
    let all = ticks_of(&client, "beat", "beat").await;
    assert_eq!(
        all.iter().filter(|&&t| t == ahead).count(),
        1,
        "the tick fired ahead keeps its one job: {all:?}"
    );
    assert!(listed(&redis, "beat")["next_ms"].as_u64() < Some(ahead));
}

/// The schedule functions of the library refuse bad arguments (a next tick of `nan`,
/// `inf` or `1e999`, a definition that is not JSON or names no function, a flag that is not
/// 0 or 1) with one sentence, before writing anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_functions_refuse_bad_arguments_before_writing() {
    let redis = TestRedis::start();
    ok(schedule(
        &redis,
        &["add", "kept", "--function", "echo", "--every", "1h"],
    ));
    let mut raw = redis.raw().await;
    let snapshot = || async {
        let mut raw = redis.raw().await;
        let stored: Vec<Vec<(String, String)>> = redis::pipe()
            .hgetall(ScheduleKeys::defs())
            .cmd("ZRANGE")
            .arg(ScheduleKeys::next())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .cmd("ZRANGE")
            .arg(ScheduleKeys::advanced())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .hgetall(ScheduleKeys::errors())
            .query_async(&mut raw)
            .await
            .unwrap();
        stored
    };
    let before = snapshot().await;
    let def = r#"{"name":"x","function":"echo","recurrence":{"kind":"every","every_ms":1000}}"#;
    let keys = ScheduleKeys::all();
    let calls: Vec<(&str, Vec<&str>)> = vec![
        ("schedule_set", vec!["x", def, "input", "nan", "0"]),
        ("schedule_set", vec!["x", def, "input", "inf", "0"]),
        ("schedule_set", vec!["x", def, "input", "1e999", "0"]),
        ("schedule_set", vec!["x", "not json", "input", "1000", "0"]),
        (
            "schedule_set",
            vec!["x", r#"{"function":"bad name"}"#, "", "1000", "0"],
        ),
        ("schedule_set", vec!["x", def, "input", "1000", "yes"]),
        ("schedule_set", vec!["bad name", def, "input", "1000", "0"]),
        ("schedule_pause", vec!["kept", "0", "inf"]),
        ("schedule_pause", vec!["kept", "2", ""]),
        ("schedule_advance", vec!["kept", "0", "nan"]),
        ("schedule_failed", vec!["kept", "0", "1000", "not json"]),
        ("schedule_rewind", vec!["kept", "0", "-5"]),
        ("schedule_due", vec!["0"]),
    ];
    for (function, args) in calls {
        let mut call = redis::cmd("FCALL");
        call.arg(format!("wg2_{function}"))
            .arg(keys.len())
            .arg(&keys);
        call.arg(&args);
        let error = call
            .query_async::<redis::Value>(&mut raw)
            .await
            .expect_err(&format!("{function} {args:?} refused"));
        assert_eq!(
            error.code(),
            Some("BADSCHEDULE"),
            "{function} {args:?}: {error}"
        );
        assert_eq!(
            before,
            snapshot().await,
            "{function} {args:?} wrote something"
        );
    }
}
