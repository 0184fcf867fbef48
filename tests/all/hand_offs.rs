//! Hand-offs: an enqueue gives its job straight to an idle worker registered for the
//! function; never more jobs than the slots registered or free, nothing to a stopping worker,
//! a copy of the message taken once, lapsed registrations cleaned up without failing an
//! enqueue, and the other workers still told there is work.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState, WorkerQueue};
use wasmgear_proto::{JobId, LeaseRequest};
use wasmgear_worker::WorkerConfig;

use crate::support::jobs::{long_job, plain_jobs};
use crate::support::library::Library;
use wasmgear_testkit::{
    TestRedis, TestWorker, TestWorkerOptions, WorkerProcess, eventually, function, plugin_dir,
};

const WAIT: Duration = Duration::from_secs(30);

async fn running_count(library: &Library) -> usize {
    library.members("leased").await.len()
}

/// A worker with two slots serving two functions keeps a slot for each function's hand-off
/// while idle; once both slots run jobs of one function, the other function's jobs are not
/// handed to it (they wait, queued, for a free slot), and they run once the slots free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_never_handed_more_jobs_than_it_has_free_slots() {
    let redis = TestRedis::start();
    let options = TestWorkerOptions {
        config: WorkerConfig {
            concurrency: 2,
            ..WorkerConfig::default()
        },
        ..TestWorkerOptions::default()
    };
    let worker = TestWorker::start_with(&redis, &["hostile", "echo"], options).await;
    let client = redis.client().await;
    let (hostile, echo) = (function("hostile"), function("echo"));
    let hostile_lib = Library::new(redis.raw().await, &hostile);
    let echo_lib = Library::new(redis.raw().await, &echo);
    // Idle: registered for both functions, their slots within the worker's two.
    let slots = eventually(WAIT, "the idle worker to register for both", || async {
        let a = hostile_lib.registration("test-worker").await?;
        let b = echo_lib.registration("test-worker").await?;
        Some(a.1 + b.1)
    })
    .await;
    assert!(
        slots <= 2,
        "{slots} slots kept for hand-offs by a worker with 2"
    );

    // Both slots taken by long jobs of one function.
    let long: Vec<JobId> = client
        .enqueue_many(
            &hostile,
            &[
                (&b"sleep 3600"[..], long_job()),
                (&b"sleep 3600"[..], long_job()),
            ],
        )
        .await
        .unwrap();
    eventually(WAIT, "both long jobs to run", || async {
        (running_count(&hostile_lib).await == 2).then_some(())
    })
    .await;
    // The hand-off happens inside `enqueue`: what it hands is leased when the call returns.
    let quick = client
        .enqueue_many(&echo, &plain_jobs(b"a", 3))
        .await
        .unwrap();
    let leased = echo_lib.members("leased").await;
    let mut records = Vec::new();
    for number in &leased {
        let raw: Option<String> = redis::cmd("HGET")
            .arg(echo_lib.key("jobs"))
            .arg(number)
            .query_async(&mut echo_lib.conn.clone())
            .await
            .unwrap();
        records.push(raw);
    }
    for number in hostile_lib.members("leased").await {
        let raw: Option<String> = redis::cmd("HGET")
            .arg(hostile_lib.key("jobs"))
            .arg(number)
            .query_async(&mut echo_lib.conn.clone())
            .await
            .unwrap();
        records.push(raw);
    }
    assert!(
        leased.is_empty(),
        "a worker with no free slot was handed jobs: {records:?}"
    );
    assert_eq!(echo_lib.registration("test-worker").await, None);
    for id in &quick {
        assert_eq!(
            client.status(id).await.unwrap().record.state,
            JobState::Queued
        );
    }
    // The slots free: the waiting jobs run.
    for id in &long {
        client.cancel(id).await.unwrap();
    }
    for id in &quick {
        let status = client.wait(id, Some(WAIT), |_| {}).await.unwrap();
        assert_eq!(status.record.state, JobState::Succeeded);
    }
    worker.stop().await;
}

/// A registration's slots bound what its hand-off gives, the message says how many it gave,
/// a lease call that replaces an unused registration gets its slots back, and `withdraw`
/// takes out only the call it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_gives_at_most_the_slots_registered() {
    let redis = TestRedis::start();
    let f = function("handed");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    let channel = "wg:handoff:w1";
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe(channel).await.unwrap();
    // Nothing ready: registered for 2 slots.
    let lease = |call: &'static str,
                 want: &'static str,
                 slots: &'static str,
                 replaces: &'static str,
                 replaced: &'static str| {
        let library = library.clone();
        async move {
            library
                .ok::<redis::Value>(
                    "lease",
                    &[
                        "w1", call, want, "30000", "1000", "3", channel, "3000", slots, replaces,
                        replaced,
                    ],
                )
                .await
        }
    };
    lease("w1/a", "4", "2", "", "0").await;
    assert_eq!(
        library.registration("w1").await,
        Some(("w1/a".to_string(), 2))
    );
    client.enqueue_many(&f, &plain_jobs(b"x", 5)).await.unwrap();
    assert_eq!(running_count(&library).await, 2);
    assert_eq!(library.registration("w1").await, None);
    use futures_util::StreamExt;
    let mut messages = pubsub.on_message();
    for _ in 0..2 {
        let message: Vec<u8> = messages.next().await.unwrap().get_payload().unwrap();
        let text = String::from_utf8_lossy(&message);
        assert!(text.starts_with("lease handed 2 "), "{text}");
    }
    drop(messages);

    // A new registration replacing an unused one gets its slots back (2 + 1), and leases
    // with them when jobs are ready.
    let g = function("replaced");
    let other = Library::new(redis.raw().await, &g);
    other
        .ok::<redis::Value>(
            "lease",
            &[
                "w1", "w1/b", "2", "30000", "1000", "3", channel, "3000", "2", "", "0",
            ],
        )
        .await;
    let reply: (redis::Value, i64, i64, redis::Value, String) = other
        .ok(
            "lease",
            &[
                "w1", "w1/c", "1", "30000", "1000", "3", channel, "3000", "1", "w1/b", "2",
            ],
        )
        .await;
    assert_eq!(reply.4, "w1/b", "the unused registration was taken out");
    assert_eq!(
        other.registration("w1").await,
        Some(("w1/c".to_string(), 3))
    );
    // `withdraw` names the call: another's registration stays, its own goes.
    let removed: i64 = other.ok("withdraw", &["w1", "w1/b"]).await;
    assert_eq!(removed, 0);
    let removed: i64 = other.ok("withdraw", &["w1", "w1/c"]).await;
    assert_eq!(removed, 1);
    assert_eq!(other.registration("w1").await, None);
}

/// Once a worker is told to stop (it says it is not ready), it is handed nothing: its
/// registrations are gone before, and a job enqueued then waits for another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_is_handed_nothing() {
    let redis = TestRedis::start();
    let dir = plugin_dir(&["hostile", "echo"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--concurrency", "2"])
        .metrics()
        .start();
    let address = worker.metrics_address();
    let client = redis.client().await;
    let echo = function("echo");
    let echo_lib = Library::new(redis.raw().await, &echo);
    // One long job keeps the worker busy while it stops; one slot stays free.
    let long = client
        .enqueue(&function("hostile"), b"sleep 3600", &long_job())
        .await
        .unwrap();
    eventually(WAIT, "the long job to run", || async {
        (client.status(&long).await.ok()?.record.state == JobState::Running).then_some(())
    })
    .await;
    // Its free slot is kept for a hand-off of one function or the other.
    let hostile_lib = Library::new(redis.raw().await, &function("hostile"));
    eventually(WAIT, "the worker to register for a hand-off", || async {
        let mut registered = 0;
        for library in [&echo_lib, &hostile_lib] {
            let workers: Vec<String> = redis::cmd("HKEYS")
                .arg(library.key("idle-args"))
                .query_async(&mut library.conn.clone())
                .await
                .ok()?;
            registered += workers.len();
        }
        (registered == 1).then_some(())
    })
    .await;
    worker.signal("TERM");
    eventually(
        WAIT,
        "the stopping worker to say it is not ready",
        || async {
            let answer =
                crate::http_api::send_raw(&address, "GET", "/readyz", None, None, Vec::new()).await;
            let answer = crate::http_api::answer(answer).await;
            (answer.status == 503).then_some(())
        },
    )
    .await;
    let late = [
        client
            .enqueue(&echo, b"late", &EnqueueOptions::default())
            .await
            .unwrap(),
        client
            .enqueue(&function("hostile"), b"sleep 0", &EnqueueOptions::default())
            .await
            .unwrap(),
    ];
    for id in &late {
        assert_eq!(
            client.status(id).await.unwrap().record.state,
            JobState::Queued,
            "a stopping worker was handed {id}"
        );
    }
    assert_eq!(running_count(&echo_lib).await, 0);
    assert_eq!(hostile_lib.members("leased").await.len(), 1);
}

/// Cleaning up a great many lapsed hand-off registrations (dead workers') never fails an
/// `enqueue` after it has written: the call is answered, and sent again it is answered the
/// same (nothing written twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapsed_registrations_never_fail_an_enqueue() {
    let redis = TestRedis::start();
    let f = function("crowded");
    let library = Library::new(redis.raw().await, &f);
    // (A client loads the library.)
    let _client = redis.client().await;
    let mut conn = redis.raw().await;
    // 20,000 registrations that lapsed long ago, as workers that died leave them.
    for chunk in 0..20 {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(library.key("idle"));
        let mut hset = redis::cmd("HSET");
        hset.arg(library.key("idle-args"));
        for i in 0..1000 {
            let worker = format!("dead-{chunk}-{i}");
            zadd.arg(1).arg(&worker);
            hset.arg(&worker)
                .arg(format!("{worker}/x|1|30000|1000|3|wg:handoff:{worker}"));
        }
        let _: () = zadd.query_async(&mut conn).await.unwrap();
        let _: () = hset.query_async(&mut conn).await.unwrap();
    }
    let call = ["1", "call", "c1", "1", "0", "input"];
    let first: (Vec<u64>, String, Vec<String>, u32) = library.ok("enqueue", &call).await;
    let again: (Vec<u64>, String, Vec<String>, u32) = library.ok("enqueue", &call).await;
    assert_eq!(first, again);
    assert_eq!(first.0, [1]);
    assert_eq!(library.state(1).await, "queued");
    assert_eq!(library.state(2).await, "missing");
}

/// A copy of a hand-off message (as a worker re-subscribing can get) is dropped: the job
/// handed is taken once, its token started once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_heard_twice_is_taken_once() {
    let redis = TestRedis::start();
    let f = function("twice");
    let client = redis.client().await;
    let queue = WorkerQueue::connect(&redis.url(), "w2").await.unwrap();
    queue.listen(std::slice::from_ref(&f)).await.unwrap();
    redis.until_subscribed("wg:handoff:w2", 1).await;
    // Listen to the worker's channel too, to copy what it is handed.
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    pubsub.subscribe("wg:handoff:w2").await.unwrap();
    let request = LeaseRequest::new(f.clone());
    let ttl = Duration::from_secs(30);
    assert!(
        queue
            .lease(std::slice::from_ref(&request), 4, ttl)
            .await
            .unwrap()
            .is_empty()
    );
    let first = client
        .enqueue(&f, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    use futures_util::StreamExt;
    let message: Vec<u8> = pubsub
        .on_message()
        .next()
        .await
        .unwrap()
        .get_payload()
        .unwrap();
    let taken = eventually(WAIT, "the handed job", || async {
        let leases = queue
            .lease(std::slice::from_ref(&request), 4, ttl)
            .await
            .ok()?;
        (!leases.is_empty()).then_some(leases)
    })
    .await;
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].info.id, first);
    // The copy comes; then another job is handed through a new registration, its message
    // after the copy's on the same channel: once it is taken, the copy has been heard.
    let mut conn = redis.raw().await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg("wg:handoff:w2")
        .arg(&message)
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut later = queue
        .lease(std::slice::from_ref(&request), 4, ttl)
        .await
        .unwrap();
    let second = client
        .enqueue(&f, b"y", &EnqueueOptions::default())
        .await
        .unwrap();
    while !later.iter().any(|lease| lease.info.id == second) {
        let leases = eventually(WAIT, "the second handed job", || async {
            let leases = queue
                .lease(std::slice::from_ref(&request), 4, ttl)
                .await
                .ok()?;
            (!leases.is_empty()).then_some(leases)
        })
        .await;
        later.extend(leases);
    }
    assert!(
        later.iter().all(|lease| lease.token != taken[0].token),
        "the same lease was taken twice: {:?}",
        later.iter().map(|l| &l.token).collect::<Vec<_>>()
    );
    assert_eq!(later.len(), 1);
    assert_eq!(
        client.status(&first).await.unwrap().record.state,
        JobState::Running,
        "the copy was handed back"
    );
}

/// When a hand-off gives out older ready jobs instead of the call's new ones, the other
/// workers are still told there is work (`work` on the function's channel).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_is_announced_when_a_hand_off_gave_older_jobs() {
    let redis = TestRedis::start();
    let f = function("older");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    client
        .configure(&f, &[wasmgear_client::Setting::Concurrency(Some(1))])
        .await
        .unwrap();
    client
        .enqueue(&f, b"1", &EnqueueOptions::default())
        .await
        .unwrap();
    let (_, token) = library
        .lease_rows(&["a", "a/1", "1", "30000", "1000", "3"])
        .await
        .remove(0);
    // An older job waits, held back by the cap; a worker registers for a hand-off.
    client
        .enqueue(&f, b"2", &EnqueueOptions::default())
        .await
        .unwrap();
    library
        .ok::<redis::Value>(
            "lease",
            &[
                "b",
                "b/1",
                "1",
                "30000",
                "1000",
                "3",
                "wg:handoff:b",
                "3000",
                "1",
                "",
                "0",
            ],
        )
        .await;
    assert!(library.registration("b").await.is_some());
    let _: redis::Value = library
        .ok("complete", &["0", "1", "1", &token, "", "", ""])
        .await;
    let mut pubsub = redis::Client::open(redis.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    let work = library.key("work");
    pubsub.subscribe(&work).await.unwrap();
    let new = client
        .enqueue(&f, b"3", &EnqueueOptions::default())
        .await
        .unwrap();
    // The older job went to the registered worker; the new one waits.
    assert_eq!(
        client.status(&new).await.unwrap().record.state,
        JobState::Queued
    );
    // A marker published after the call: `work` must come before it.
    let mut conn = redis.raw().await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(&work)
        .arg("marker")
        .query_async(&mut conn)
        .await
        .unwrap();
    use futures_util::StreamExt;
    let mut messages = pubsub.on_message();
    let mut seen = Vec::new();
    loop {
        let payload: String = messages.next().await.unwrap().get_payload().unwrap();
        if payload == "marker" {
            break;
        }
        seen.push(payload);
    }
    assert!(seen.iter().any(|m| m == "work"), "{seen:?}");
}

/// A job enqueued before a worker listens (its `work` message unheard) is leased by the
/// worker's first lease call even when the worker has fewer slots than functions: the
/// function asked first finds nothing, and its hand-off registration leaves the only slot
/// to the function still to be asked (a worker of concurrency 1 started beside a full queue
/// waited two idle polls, the registration renewed while the other function had jobs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_before_the_worker_listens_is_leased_with_one_slot_for_two_functions() {
    let redis = TestRedis::start();
    let (first, second) = (function("asked-first"), function("asked-second"));
    let client = redis.client().await;
    let waiting = client
        .enqueue(&second, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    let queue = WorkerQueue::connect(&redis.url(), "one-slot")
        .await
        .unwrap();
    queue
        .listen(&[first.clone(), second.clone()])
        .await
        .unwrap();
    redis.until_subscribed("wg:handoff:one-slot", 1).await;
    // The first call asks the functions in this order.
    let requests = [LeaseRequest::new(first.clone()), LeaseRequest::new(second)];
    let ttl = Duration::from_secs(30);
    let leased = queue.lease(&requests, 1, ttl).await.unwrap();
    let ids: Vec<&JobId> = leased.iter().map(|lease| &lease.info.id).collect();
    assert_eq!(
        ids,
        [&waiting],
        "the waiting job is leased by the first call"
    );
    let library = Library::new(redis.raw().await, &first);
    assert_eq!(
        library.registration("one-slot").await,
        None,
        "the slot kept for the other function's hand-off went to the job"
    );
}

/// A `work` message heard just before a wait for work runs out stays news: its function
/// takes back the slot kept for another function's hand-off and leases its job (a worker
/// that forgot it asked the function again with no slot to lease into, and the job waited
/// while the other function's registration was renewed round after round).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_heard_as_a_wait_runs_out_is_not_forgotten() {
    let redis = TestRedis::start();
    let functions = [function("one"), function("other")];
    let client = redis.client().await;
    let queue = WorkerQueue::connect(&redis.url(), "heard").await.unwrap();
    queue.listen(&functions).await.unwrap();
    redis.until_subscribed("wg:handoff:heard", 1).await;
    let requests: Vec<LeaseRequest> = functions.iter().cloned().map(LeaseRequest::new).collect();
    let ttl = Duration::from_secs(30);
    assert!(queue.lease(&requests, 1, ttl).await.unwrap().is_empty());
    // One function keeps the only slot for its hand-off; a job of the other is announced.
    let mut holders = Vec::new();
    for f in &functions {
        let library = Library::new(redis.raw().await, f);
        holders.push(library.registration("heard").await.is_some());
    }
    assert_eq!(holders.iter().filter(|h| **h).count(), 1, "{holders:?}");
    let other = &functions[holders.iter().position(|h| !h).unwrap()];
    // The wake-up `listen` left is spent first, so that the next wait ends on the `work`.
    queue.wait_for_work(Duration::from_millis(10)).await;
    queue.wait_for_work(Duration::from_millis(10)).await;
    let job = client
        .enqueue(other, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    queue.wait_for_work(WAIT).await;
    // A wait that runs out before the next lease call.
    queue.wait_for_work(Duration::from_millis(50)).await;
    let leased = queue.lease(&requests, 1, ttl).await.unwrap();
    let ids: Vec<&JobId> = leased.iter().map(|lease| &lease.info.id).collect();
    assert_eq!(ids, [&job]);
}
