//! The lease protocol through `WorkerQueue` directly: fencing, reclaim, order, delay.

use std::time::Duration;

use wasmgear_proto::LeaseRequest;

use wasmgear_client::{EnqueueOptions, JobState, Priority, WorkerQueue};
use wasmgear_proto::{AttemptNotes, Completion, ErrorClass, JobFailure, LeaseStatus, Progress};

use wasmgear_testkit::{TestRedis, eventually, function};

const TTL: Duration = Duration::from_secs(30);

/// Enqueues one `echo` job and leases it as worker `worker`.
async fn one_leased(
    redis: &TestRedis,
    client: &wasmgear_client::Client,
    worker: &str,
) -> (wasmgear_proto::JobId, WorkerQueue, wasmgear_proto::Lease) {
    let f = function("echo");
    let id = client
        .enqueue(&f, b"in", &EnqueueOptions::default())
        .await
        .unwrap();
    let queue = WorkerQueue::connect(&redis.url(), worker).await.unwrap();
    let lease = queue
        .lease(&[LeaseRequest::new(f)], 1, TTL)
        .await
        .unwrap()
        .remove(0);
    (id, queue, lease)
}

/// A `complete` whose lease part is malformed (from another client) is refused before it
/// writes anything: the job is still running, with no output, and a good call then works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_completion_changes_nothing() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let (id, queue, lease) = one_leased(&redis, &client, "worker").await;
    let f = id.function.clone();
    let keys = wasmgear_client::queue_keys("complete", &f).unwrap();
    let mut conn = redis.raw().await;
    let refused: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
        .arg("wg2_complete")
        .arg(keys.len())
        .arg(&keys[..])
        .arg(f.as_str())
        .arg(5)
        .arg(&[
            "call", "call-1", "worker", "worker", "lease", "1", "ttl", "soon",
        ])
        .arg(&["timeout", "1000", "attempts", "3"])
        .arg(1)
        .arg(id.seq)
        .arg(&lease.token)
        .arg("out")
        .arg("")
        .arg("")
        .query_async(&mut conn)
        .await;
    let error = refused.unwrap_err();
    assert_eq!(error.code(), Some("BADARGS"), "{error}");
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Running);
    assert_eq!(status.output, None);
    assert_eq!(
        queue
            .complete(&lease, b"out", &AttemptNotes::default())
            .await
            .unwrap(),
        Completion::Accepted(JobState::Succeeded)
    );
}

/// The raw record of job `seq` of `function` in `wg:{F}:jobs`.
async fn raw_record(
    redis: &TestRedis,
    function: &wasmgear_proto::FunctionName,
    seq: u64,
) -> String {
    redis::cmd("HGET")
        .arg(wasmgear_proto::keys::FunctionKeys::new(function).jobs())
        .arg(seq)
        .query_async(&mut redis.raw().await)
        .await
        .unwrap()
}

/// A plain job (no tags, uniq key, dependencies...) lives its whole life in the record's hot
/// fields: enqueue, lease and complete write no JSON part (the record ends with the
/// separator), and the attempt that succeeded is read back as the last entry of its
/// history, with its worker and plugin version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_job_is_leased_and_completed_in_its_hot_fields() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let id = client
        .enqueue(&f, b"in", &EnqueueOptions::default())
        .await
        .unwrap();
    assert!(raw_record(&redis, &f, id.seq).await.ends_with('|'));
    let queue = WorkerQueue::connect(&redis.url(), "worker-1")
        .await
        .unwrap();
    let lease = queue
        .lease(&[LeaseRequest::new(f.clone())], 1, TTL)
        .await
        .unwrap()
        .remove(0);
    let running = raw_record(&redis, &f, id.seq).await;
    assert!(
        running.starts_with("running|") && running.ends_with('|'),
        "{running}"
    );
    let notes = AttemptNotes {
        log: String::new(),
        plugin_version: Some("abc123".into()),
    };
    assert_eq!(
        queue.complete(&lease, b"out", &notes).await.unwrap(),
        Completion::Accepted(JobState::Succeeded)
    );
    let done = raw_record(&redis, &f, id.seq).await;
    assert!(
        done.starts_with("succeeded|") && done.ends_with('|'),
        "{done}"
    );
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.record.worker, None, "a finished job names no worker");
    assert_eq!(status.output.as_deref(), Some(&b"out"[..]));
    let [attempt] = &status.record.history[..] else {
        panic!("one attempt: {:?}", status.record.history)
    };
    assert_eq!(attempt.attempt, 1);
    assert_eq!(attempt.outcome, "succeeded");
    assert_eq!(attempt.worker.as_deref(), Some("worker-1"));
    assert_eq!(attempt.version.as_deref(), Some("abc123"));
    assert_eq!(attempt.started_ms, status.record.started_ms);
    assert_eq!(Some(attempt.ended_ms), status.record.finished_ms);
}

/// Records written in the former layout (one JSON object, as before the hot fields were
/// kept apart) are still leased, renewed, completed, failed and read: jobs queued before an
/// upgrade are served by the new scripts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_the_former_layout_are_still_served() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let tagged_options = EnqueueOptions {
        tags: vec!["t".into()],
        max_attempts: Some(2),
        ..EnqueueOptions::default()
    };
    let plain = client
        .enqueue(&f, b"plain", &EnqueueOptions::default())
        .await
        .unwrap();
    let tagged = client
        .enqueue(&f, b"tagged", &tagged_options)
        .await
        .unwrap();
    let mut conn = redis.raw().await;
    for seq in [plain.seq, tagged.seq] {
        let json = redis.record_json(&f, seq).await.unwrap();
        let _: () = redis::cmd("HSET")
            .arg(wasmgear_proto::keys::FunctionKeys::new(&f).jobs())
            .arg(seq)
            .arg(&json)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(raw_record(&redis, &f, seq).await.starts_with('{'));
    }
    let queue = WorkerQueue::connect(&redis.url(), "worker").await.unwrap();
    let mut leases = queue
        .lease(&[LeaseRequest::new(f.clone())], 2, TTL)
        .await
        .unwrap();
    leases.sort_by_key(|l| l.info.id.seq);
    let [p, t] = &leases[..] else {
        panic!("two leases: {leases:?}")
    };
    assert_eq!((p.input.as_slice(), p.info.attempt), (&b"plain"[..], 1));
    assert_eq!(
        (t.input.as_slice(), t.info.max_attempts),
        (&b"tagged"[..], 2)
    );
    assert_eq!(queue.heartbeat(p, TTL).await.unwrap(), LeaseStatus::Held);
    assert_eq!(
        queue
            .complete(p, b"out", &AttemptNotes::default())
            .await
            .unwrap(),
        Completion::Accepted(JobState::Succeeded)
    );
    let failure = JobFailure::new(ErrorClass::Trap, "once");
    assert_eq!(
        queue
            .fail(t, &failure, &AttemptNotes::default())
            .await
            .unwrap(),
        Completion::Accepted(JobState::Scheduled)
    );
    let plain = client.status(&plain).await.unwrap();
    assert_eq!(plain.record.state, JobState::Succeeded);
    assert_eq!(plain.record.history.len(), 1);
    assert_eq!(plain.output.as_deref(), Some(&b"out"[..]));
    let tagged = client.status(&tagged).await.unwrap();
    assert_eq!(tagged.record.state, JobState::Scheduled);
    assert_eq!(tagged.record.tags, vec!["t".to_string()]);
    assert_eq!(tagged.record.history[0].outcome, "trap");
}

/// Worker ids, call ids and plugin versions are kept in the record's hot fields, so they may
/// not hold its separator: a call with one is refused before it changes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_holding_the_record_separator_are_refused() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let (id, queue, lease) = one_leased(&redis, &client, "worker").await;
    let queued = client
        .enqueue(&id.function, b"in", &EnqueueOptions::default())
        .await
        .unwrap();
    let bad = WorkerQueue::connect(&redis.url(), "bad|worker")
        .await
        .unwrap();
    let error = bad
        .lease(&[LeaseRequest::new(id.function.clone())], 1, TTL)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("must not contain '|'"),
        "{error}"
    );
    assert_eq!(
        client.status(&queued).await.unwrap().record.state,
        JobState::Queued
    );
    let notes = AttemptNotes {
        log: String::new(),
        plugin_version: Some("v|1".into()),
    };
    let error = queue.complete(&lease, b"out", &notes).await.unwrap_err();
    assert!(
        error.to_string().contains("must not contain '|'"),
        "{error}"
    );
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Running);
    assert_eq!(status.output, None);
}

/// Another client speaks the calling convention directly: `enqueue` takes the call's
/// options, then each job's named options before its input (a plain job is `0` and its
/// input), with the keys the function declares; options it does not know, or given twice,
/// are refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_takes_named_options() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("named");
    let keys = wasmgear_client::queue_keys("enqueue", &f).unwrap();
    let mut conn = redis.raw().await;
    let enqueue = |call: &str, jobs: &[&[&str]]| {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg("wg2_enqueue")
            .arg(keys.len())
            .arg(&keys[..])
            .arg(f.as_str())
            .arg(1)
            .arg("call")
            .arg(call)
            .arg(jobs.len());
        for job in jobs {
            cmd.arg(job);
        }
        cmd
    };
    let (numbers, created, links, min_replicas): (Vec<u64>, String, Vec<String>, u32) = enqueue(
        "call-1",
        &[
            &["0", "plain"],
            &[
                "4", "priority", "7", "tag", "a", "tag", "b", "uniq", "u1", "tagged",
            ],
            &["1", "uniq", "u1", "joins"],
        ],
    )
    .query_async(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        (numbers, created.as_str(), links.len(), min_replicas),
        (vec![1, 2, 2], "110", 0, 0)
    );
    let tagged = client
        .status(&wasmgear_proto::JobId {
            function: f.clone(),
            seq: 2,
        })
        .await
        .unwrap();
    assert_eq!(tagged.record.priority, 7);
    assert_eq!(tagged.record.tags, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(tagged.record.uniq.as_deref(), Some("u1"));

    for (job, why) in [
        (&["1", "colour", "red", "x"][..], "unknown option colour"),
        (
            &["2", "delay", "1", "delay", "2", "x"][..],
            "option delay is given twice",
        ),
        (
            &["1", "delay", "soon", "x"][..],
            "delay must be a whole number in 0..315360000000, not soon",
        ),
        (&["2", "delay", "x"][..], "the call ends before it"),
    ] {
        let error = enqueue("call-2", &[&["0", "fine"], job])
            .query_async::<redis::Value>(&mut conn)
            .await
            .unwrap_err();
        assert_eq!(error.code(), Some("BADJOB"), "{error}");
        assert!(
            error.to_string().contains(&format!("job 2: {why}")),
            "{error}"
        );
    }
    let seq: u64 = redis::cmd("GET")
        .arg(wasmgear_proto::keys::FunctionKeys::new(&f).seq())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(seq, 2, "refused calls wrote nothing");
}

/// A completion is accepted once; a second one, or one after the lease was taken over
/// by another worker, is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_is_fenced_by_the_lease_token() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let id = client
        .enqueue(&f, b"in", &EnqueueOptions::default())
        .await
        .unwrap();
    let a = WorkerQueue::connect(&redis.url(), "worker-a")
        .await
        .unwrap();
    let b = WorkerQueue::connect(&redis.url(), "worker-b")
        .await
        .unwrap();

    let lease_a = a
        .lease(
            &[LeaseRequest::new(f.clone())],
            5,
            Duration::from_millis(300),
        )
        .await
        .unwrap();
    assert_eq!(lease_a.len(), 1);
    let lease_a = lease_a.into_iter().next().unwrap();
    assert_eq!(lease_a.info.id, id);
    assert_eq!(lease_a.input, b"in");
    assert!(
        b.lease(&[LeaseRequest::new(f.clone())], 5, TTL)
            .await
            .unwrap()
            .is_empty(),
        "leased twice"
    );

    // A shows it has the job (a heartbeat), then its lease expires; B reclaims the job as
    // a second attempt (an expiry before any heartbeat would give the attempt back).
    assert_eq!(
        a.heartbeat(&lease_a, Duration::from_millis(300))
            .await
            .unwrap(),
        LeaseStatus::Held
    );
    let lease_b = eventually(Duration::from_secs(5), "the reclaim", || async {
        b.lease(&[LeaseRequest::new(f.clone())], 5, TTL)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(lease_b.info.attempt, 2);
    assert_eq!(
        a.heartbeat(&lease_a, TTL).await.unwrap(),
        LeaseStatus::Lost,
        "a stale heartbeat must fail"
    );
    assert_eq!(b.heartbeat(&lease_b, TTL).await.unwrap(), LeaseStatus::Held);
    assert!(!a.progress(&lease_a, &Progress::default()).await.unwrap());
    assert_eq!(
        a.complete(&lease_a, b"from a", &AttemptNotes::default())
            .await
            .unwrap(),
        Completion::Stale
    );
    assert_eq!(
        b.complete(&lease_b, b"from b", &AttemptNotes::default())
            .await
            .unwrap(),
        Completion::Accepted(JobState::Succeeded)
    );
    // The same lease's report sent again is answered as the first (issue 36), changing
    // nothing.
    assert_eq!(
        b.complete(&lease_b, b"again", &AttemptNotes::default())
            .await
            .unwrap(),
        Completion::Accepted(JobState::Succeeded)
    );
    let failure = JobFailure::new(ErrorClass::Trap, "late");
    assert_eq!(
        a.fail(&lease_a, &failure, &AttemptNotes::default())
            .await
            .unwrap(),
        Completion::Stale
    );

    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&b"from b"[..]));
    let outcomes: Vec<_> = status
        .record
        .history
        .iter()
        .map(|h| h.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["lease-lost", "succeeded"]);
}

/// Higher priorities are leased first, and jobs of one priority in the order enqueued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_follow_priority_then_fifo() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let mut expected = Vec::new();
    for (i, priority) in ["low", "normal", "high", "normal", "7", "low"]
        .iter()
        .enumerate()
    {
        let options = EnqueueOptions {
            priority: priority.parse().unwrap(),
            ..EnqueueOptions::default()
        };
        let id = client
            .enqueue(&f, i.to_string().as_bytes(), &options)
            .await
            .unwrap();
        expected.push((std::cmp::Reverse(options.priority), id));
    }
    expected.sort();
    let worker = WorkerQueue::connect(&redis.url(), "w").await.unwrap();
    let mut order = Vec::new();
    for _ in 0..expected.len() {
        order.extend(
            worker
                .lease(&[LeaseRequest::new(f.clone())], 1, TTL)
                .await
                .unwrap()
                .into_iter()
                .map(|l| l.info.id),
        );
    }
    assert_eq!(
        order,
        expected.into_iter().map(|(_, id)| id).collect::<Vec<_>>()
    );
    assert!(Priority::new(1001).is_err() && "urgent".parse::<Priority>().is_err());
}

/// A delayed job is not leased before its time, and is leased once it is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_job_waits_for_its_time() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let options = EnqueueOptions {
        delay: Duration::from_millis(700),
        ..EnqueueOptions::default()
    };
    let started = std::time::Instant::now();
    let id = client.enqueue(&f, b"later", &options).await.unwrap();
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Scheduled
    );
    let worker = WorkerQueue::connect(&redis.url(), "w").await.unwrap();
    let lease = eventually(Duration::from_secs(5), "the delayed job", || async {
        worker
            .lease(&[LeaseRequest::new(f.clone())], 1, TTL)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(650),
        "leased after {:?}",
        started.elapsed()
    );
    assert_eq!(lease.info.id, id);
}

/// Invalid options are refused with a message naming them, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_options_write_nothing() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let bad = [
        EnqueueOptions {
            max_attempts: Some(0),
            ..EnqueueOptions::default()
        },
        EnqueueOptions {
            timeout: Some(Duration::ZERO),
            ..EnqueueOptions::default()
        },
    ];
    for options in bad {
        let error = client
            .enqueue(&f, b"x", &options)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("invalid job option"), "{error}");
    }
    let too_big = vec![0u8; wasmgear_client::options::MAX_INPUT_BYTES + 1];
    let error = client
        .enqueue(&f, &too_big, &EnqueueOptions::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("larger than the limit"), "{error}");
    let ok = client
        .enqueue(&f, b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(ok.seq, 1, "a refused job must not use up a job number");
}

/// A worker serving several functions takes them in turn; with strict order it drains
/// the first before touching the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_are_served_in_turn_or_in_strict_order() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let (a, b) = (function("a"), function("b"));
    for f in [&a, &b, &a, &b] {
        client
            .enqueue(f, b"", &EnqueueOptions::default())
            .await
            .unwrap();
    }
    let lease_order = |strict: bool| {
        let url = redis.url();
        let (a, b) = (a.clone(), b.clone());
        async move {
            let worker = WorkerQueue::connect(&url, "w")
                .await
                .unwrap()
                .with_strict_order(strict);
            let mut order = Vec::new();
            for _ in 0..2 {
                for lease in worker
                    .lease(
                        &[LeaseRequest::new(b.clone()), LeaseRequest::new(a.clone())],
                        1,
                        TTL,
                    )
                    .await
                    .unwrap()
                {
                    order.push(lease.info.id.function.to_string());
                    worker
                        .complete(&lease, b"", &AttemptNotes::default())
                        .await
                        .unwrap();
                }
            }
            order
        }
    };
    assert_eq!(lease_order(true).await, ["b", "b"]);
    for _ in 0..2 {
        client
            .enqueue(&b, b"", &EnqueueOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(lease_order(false).await, ["b", "a"]);
}

/// A job scheduled at a time in the past is refused and nothing is written; one at a
/// future time waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_times_in_the_past_are_refused() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let future = EnqueueOptions {
        at: Some(std::time::SystemTime::now() + Duration::from_secs(3600)),
        ..EnqueueOptions::default()
    };
    let past = EnqueueOptions {
        at: Some(std::time::SystemTime::now() - Duration::from_secs(60)),
        ..EnqueueOptions::default()
    };
    let batch: Vec<(&[u8], EnqueueOptions)> = vec![(b"ok", future.clone()), (b"late", past)];
    let error = client.enqueue_many(&f, &batch).await.unwrap_err();
    // The queue's clock refuses it, not the call's form: a conflict (HTTP 409).
    assert_eq!(
        error.class(),
        wasmgear_client::ErrorClass::Conflict,
        "{error}"
    );
    let error = error.to_string();
    assert!(
        error.contains("job 2: scheduled time") && error.contains("in the past"),
        "{error}"
    );
    // Eleven years ahead of the clock: as much a conflict with the time.
    let far = EnqueueOptions {
        at: Some(std::time::SystemTime::now() + Duration::from_secs(11 * 365 * 86_400)),
        ..EnqueueOptions::default()
    };
    let error = client.enqueue(&f, b"far", &far).await.unwrap_err();
    assert_eq!(
        error.class(),
        wasmgear_client::ErrorClass::Conflict,
        "{error}"
    );
    assert!(
        error.to_string().contains("more than 10 years ahead"),
        "{error}"
    );
    let id = client.enqueue(&f, b"later", &future).await.unwrap();
    assert_eq!(
        id.seq, 1,
        "the refused batch must not have written anything"
    );
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Scheduled);
    let worker = WorkerQueue::connect(&redis.url(), "w").await.unwrap();
    assert!(
        worker
            .lease(&[LeaseRequest::new(f.clone())], 1, TTL)
            .await
            .unwrap()
            .is_empty()
    );
}

/// 10,000 jobs go in with one bulk call, each gets its own id, and all are leased once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_in_one_bulk_call() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let inputs: Vec<Vec<u8>> = (0..10_000).map(|i| i.to_string().into_bytes()).collect();
    let batch: Vec<(&[u8], EnqueueOptions)> = inputs
        .iter()
        .map(|i| (i.as_slice(), EnqueueOptions::default()))
        .collect();
    let ids = client.enqueue_many(&f, &batch).await.unwrap();
    assert_eq!(ids.len(), 10_000);
    assert_eq!(
        ids.iter().map(|id| id.seq).collect::<Vec<_>>(),
        (1..=10_000).collect::<Vec<_>>()
    );
    let worker = WorkerQueue::connect(&redis.url(), "w").await.unwrap();
    let mut leased = Vec::new();
    loop {
        let leases = worker
            .lease(&[LeaseRequest::new(f.clone())], 1000, TTL)
            .await
            .unwrap();
        if leases.is_empty() {
            break;
        }
        leased.extend(leases.into_iter().map(|l| (l.info.id.seq, l.input)));
    }
    assert_eq!(leased.len(), 10_000);
    for (seq, input) in leased {
        assert_eq!(
            input,
            (seq - 1).to_string().into_bytes(),
            "job {seq} got another job's input"
        );
    }
}

/// The input size limit is configurable and enforced before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_input_limit_is_configurable() {
    let redis = TestRedis::start();
    let client = redis.client().await.with_max_input_bytes(10);
    let f = function("echo");
    let error = client
        .enqueue(&f, b"eleven byte", &EnqueueOptions::default())
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("larger than the limit of 10 bytes"),
        "{error}"
    );
    assert_eq!(
        client
            .enqueue(&f, b"ten bytes!", &EnqueueOptions::default())
            .await
            .unwrap()
            .seq,
        1
    );
}

/// The common enqueue (ready now; no uniq key, tags or dependencies) writes its record
/// directly rather than through the general path: both must write the same record for the
/// same options, and a worker leases both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_common_enqueue_writes_the_record_the_general_path_does() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("shape");
    let options = EnqueueOptions {
        priority: Priority::new(-7).unwrap(),
        max_attempts: Some(4),
        timeout: Some(Duration::from_millis(1234)),
        retention: Duration::from_secs(77),
        failed_retention: Duration::from_secs(88),
        ..EnqueueOptions::default()
    };
    let plain = client.enqueue(&f, b"a", &options).await.unwrap();
    let tagged_options = EnqueueOptions {
        tags: vec!["t".into()],
        ..options.clone()
    };
    let tagged = client.enqueue(&f, b"b", &tagged_options).await.unwrap();

    let record = |raw: String| -> serde_json::Map<String, serde_json::Value> {
        let mut map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&raw).unwrap();
        // Times differ between the two calls; they must be there, as numbers.
        for time in ["created_ms", "ready_ms"] {
            assert!(map.remove(time).unwrap().is_u64(), "{raw}");
        }
        map
    };
    let mut raws = Vec::new();
    for seq in [plain.seq, tagged.seq] {
        raws.push(redis.record_json(&f, seq).await.unwrap());
    }
    let tagged_raw = raws.pop().unwrap();
    let plain_raw = raws.pop().unwrap();
    let mut general = record(tagged_raw);
    assert_eq!(general.remove("tags"), Some(serde_json::json!(["t"])));
    assert_eq!(record(plain_raw), general);

    let queue = WorkerQueue::connect(&redis.url(), "w").await.unwrap();
    let leases = queue
        .lease(&[LeaseRequest::new(f.clone())], 2, Duration::from_secs(30))
        .await
        .unwrap();
    let mut leased: Vec<_> = leases
        .iter()
        .map(|l| {
            (
                l.info.id.seq,
                l.info.max_attempts,
                l.info.timeout_ms,
                l.input.clone(),
            )
        })
        .collect();
    leased.sort();
    assert_eq!(
        leased,
        vec![
            (plain.seq, 4, 1234, b"a".to_vec()),
            (tagged.seq, 4, 1234, b"b".to_vec())
        ]
    );
}

/// The cap on finished jobs holds however many jobs one call finishes: a `complete` that
/// reports 250 jobs of a function keeping 3 leaves 3 once the next jobs are leased with it
/// (the housekeeping forgets at least as many as the call finished, not a fixed 100, with
/// one command per key for all of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_finishing_many_jobs_keeps_the_cap() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("capped");
    client
        .configure(&f, &[wasmgear_client::Setting::KeepFinished(Some(3))])
        .await
        .unwrap();
    let jobs = 250;
    let ids = client
        .enqueue_many(&f, &vec![(&b""[..], EnqueueOptions::default()); jobs + 1])
        .await
        .unwrap();
    let queue = WorkerQueue::connect(&redis.url(), "worker").await.unwrap();
    let leases = queue
        .lease(&[LeaseRequest::new(f.clone())], jobs, TTL)
        .await
        .unwrap();
    assert_eq!(leases.len(), jobs);
    let keys = wasmgear_client::queue_keys("complete", &f).unwrap();
    let mut call = redis::cmd("FCALL");
    call.arg("wg2_complete")
        .arg(keys.len())
        .arg(&keys[..])
        .arg(f.as_str())
        // The lease part: one more job.
        .arg(6)
        .arg(&[
            "call", "call-1", "worker", "worker", "lease", "1", "ttl", "30000",
        ])
        .arg(&["timeout", "1000", "attempts", "3"])
        .arg(jobs);
    for lease in &leases {
        call.arg(lease.info.id.seq)
            .arg(&lease.token)
            .arg("")
            .arg("")
            .arg("");
    }
    let mut conn = redis.raw().await;
    let deletes = wasmgear_testkit::command_calls(&mut conn, "hdel").await;
    let _: redis::Value = call.query_async(&mut conn).await.unwrap();
    // One HDEL per hash for all the jobs forgotten, not one per job and hash.
    let deletes = wasmgear_testkit::command_calls(&mut conn, "hdel").await - deletes;
    assert!(deletes <= 8, "{deletes} HDEL for one call");
    let q = client.queue(&f).await.unwrap();
    assert_eq!((q.succeeded, q.running), (3, 1), "{q:?}");
    let mut kept = 0;
    for id in &ids[..jobs] {
        kept += usize::from(client.status(id).await.is_ok());
    }
    assert_eq!(kept, 3, "records of finished jobs kept");
}

/// The members of the sorted set `key`.
async fn members(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap()
}

/// A listening worker whose lease finds nothing is handed the next job: `enqueue` leases
/// it to the worker in the same call (the job is running when `enqueue` returns) and
/// publishes the lease on the worker's channel, so the worker's next `lease` returns it
/// without a call to Redis. Nothing is handed while the function is paused; a lease call
/// takes the worker out of the idle workers; a worker that leaves hands back what it was
/// handed and did not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_is_handed_the_next_job() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("handed");
    let idle = format!("wg:{{{f}}}:idle");
    let mut conn = redis.raw().await;
    let queue = WorkerQueue::connect(&redis.url(), "w1").await.unwrap();
    queue.listen(std::slice::from_ref(&f)).await.unwrap();
    redis.until_subscribed("wg:handoff:w1", 1).await;
    let request = [LeaseRequest::new(f.clone())];
    assert!(queue.lease(&request, 4, TTL).await.unwrap().is_empty());
    assert_eq!(members(&mut conn, &idle).await, ["w1"]);

    let id = client
        .enqueue(&f, b"handed input", &EnqueueOptions::default())
        .await
        .unwrap();
    // Leased by the enqueue itself, to the idle worker.
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Running);
    assert_eq!(status.record.worker.as_deref(), Some("w1"));
    assert!(members(&mut conn, &idle).await.is_empty());
    // The worker hears of it and takes it without asking Redis.
    tokio::time::timeout(Duration::from_secs(10), queue.wait_for_work(TTL))
        .await
        .unwrap();
    let calls = wasmgear_testkit::command_calls(&mut conn, "fcall").await;
    let leases = eventually(Duration::from_secs(10), "the handed job", || async {
        let leases = queue.lease(&request, 4, TTL).await.unwrap();
        (!leases.is_empty()).then_some(leases)
    })
    .await;
    assert_eq!(
        wasmgear_testkit::command_calls(&mut conn, "fcall").await,
        calls
    );
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].info.id, id);
    assert_eq!(leases[0].input, b"handed input");
    assert_eq!(
        queue
            .complete(&leases[0], b"out", &AttemptNotes::default())
            .await
            .unwrap(),
        Completion::Accepted(JobState::Succeeded)
    );

    // Paused: the worker stays registered and the job waits in the queue.
    assert!(queue.lease(&request, 4, TTL).await.unwrap().is_empty());
    client
        .configure(&f, &[wasmgear_client::Setting::Paused(true)])
        .await
        .unwrap();
    let paused = client
        .enqueue(&f, b"", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        client.status(&paused).await.unwrap().record.state,
        JobState::Queued
    );
    assert_eq!(members(&mut conn, &idle).await, ["w1"]);
    client
        .configure(&f, &[wasmgear_client::Setting::Paused(false)])
        .await
        .unwrap();
    // A lease call takes the worker out first (here it leases the job). The worker asks
    // Redis once it has heard the `work` the resume published (until then its lease call
    // skips the function whose last lease found nothing).
    let leases = eventually(Duration::from_secs(10), "the resumed job", || async {
        let leases = queue.lease(&request, 4, TTL).await.unwrap();
        (!leases.is_empty()).then_some(leases)
    })
    .await;
    assert_eq!(leases.len(), 1);
    assert!(members(&mut conn, &idle).await.is_empty());
    // Finished with nothing next (as a worker's slot finishes): its next lease asks Redis
    // again, and so registers for the next hand-off.
    let (_, next) = queue
        .complete_and_lease(&leases[0], b"", &AttemptNotes::default(), &request[0], TTL)
        .await
        .unwrap();
    assert!(next.is_empty());

    // Handed, then the worker leases for another function only (it no longer serves this
    // one): the job is handed back, not run.
    assert!(queue.lease(&request, 4, TTL).await.unwrap().is_empty());
    assert_eq!(members(&mut conn, &idle).await, ["w1"]);
    let unserved = client
        .enqueue(&f, b"", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        client.status(&unserved).await.unwrap().record.state,
        JobState::Running
    );
    tokio::time::timeout(Duration::from_secs(10), queue.wait_for_work(TTL))
        .await
        .unwrap();
    let other = [LeaseRequest::new(function("other"))];
    eventually(Duration::from_secs(10), "the job handed back", || async {
        let leased = queue.lease(&other, 4, TTL).await.unwrap();
        assert!(leased.is_empty(), "{leased:?}");
        let record = client.status(&unserved).await.unwrap().record;
        (record.state == JobState::Queued).then_some(())
    })
    .await;
    let leases = queue.lease(&request, 4, TTL).await.unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].info.id, unserved);
    // Finished with nothing next (as a worker's slot finishes): its next lease asks Redis
    // again, and so registers for the next hand-off.
    let (_, next) = queue
        .complete_and_lease(&leases[0], b"", &AttemptNotes::default(), &request[0], TTL)
        .await
        .unwrap();
    assert!(next.is_empty());

    // Handed, then the worker leaves before running it: the job is handed back.
    assert!(queue.lease(&request, 4, TTL).await.unwrap().is_empty());
    assert_eq!(members(&mut conn, &idle).await, ["w1"]);
    let left = client
        .enqueue(&f, b"", &EnqueueOptions::default())
        .await
        .unwrap();
    assert_eq!(
        client.status(&left).await.unwrap().record.state,
        JobState::Running
    );
    tokio::time::timeout(Duration::from_secs(10), queue.wait_for_work(TTL))
        .await
        .unwrap();
    queue
        .advertise(
            &wasmgear_proto::WorkerAd::default(),
            std::slice::from_ref(&f),
            Duration::ZERO,
        )
        .await
        .unwrap();
    let record = client.status(&left).await.unwrap().record;
    assert_eq!((record.state, record.attempt), (JobState::Queued, 0));
    assert!(members(&mut conn, &idle).await.is_empty());
}

/// A lease call's hand-off arguments are checked: a channel with '|' or a wait that is
/// not a positive number is refused, and the worker is not registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_hand_off_arguments_are_refused() {
    let redis = TestRedis::start();
    // (A client loads the library.)
    let _client = redis.client().await;
    let f = function("handed");
    let keys = wasmgear_client::queue_keys("lease", &f).unwrap();
    let mut conn = redis.raw().await;
    for (channel, hold) in [("a|b", "1000"), ("ch", "0"), ("ch", "soon"), ("", "1000")] {
        let refused: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
            .arg("wg2_lease")
            .arg(keys.len())
            .arg(&keys[..])
            .arg(f.as_str())
            .arg("w1")
            .arg("call-1")
            .arg(1)
            .arg(30_000)
            .arg(1000)
            .arg(3)
            .arg(channel)
            .arg(hold)
            .query_async(&mut conn)
            .await;
        let error = refused.unwrap_err();
        assert_eq!(error.code(), Some("BADARGS"), "{channel} {hold}: {error}");
    }
    assert!(
        members(&mut conn, &format!("wg:{{{f}}}:idle"))
            .await
            .is_empty()
    );
}

/// A worker's completions go to Redis together, each asking for the jobs its slot runs
/// next: a full call of them asks for more than one call may lease (16 ahead for each of
/// 128 jobs). Every completion is still accepted at once, and the call leases what it may,
/// each job once, no completion getting more than it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_call_of_completions_leases_what_one_call_may() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("echo");
    let inputs: Vec<(&[u8], EnqueueOptions)> = (0..3000)
        .map(|_| (&b"x"[..], EnqueueOptions::default()))
        .collect();
    client.enqueue_many(&f, &inputs).await.unwrap();
    let queue = WorkerQueue::connect(&redis.url(), "w1").await.unwrap();
    queue.listen(std::slice::from_ref(&f)).await.unwrap();
    let first = queue
        .lease(&[LeaseRequest::new(f.clone())], 128, TTL)
        .await
        .unwrap();
    assert_eq!(first.len(), 128);
    let next = LeaseRequest {
        max: 16,
        ..LeaseRequest::new(f.clone())
    };
    let notes = AttemptNotes::default();
    let results = futures_util::future::join_all(
        first
            .iter()
            .map(|lease| queue.complete_and_lease(lease, b"", &notes, &next, TTL)),
    )
    .await;
    let mut leased = std::collections::HashSet::new();
    for result in results {
        let (completion, more) = result.expect("a completion refused");
        assert_eq!(completion, Completion::Accepted(JobState::Succeeded));
        assert!(more.len() <= 16, "{} leased for one completion", more.len());
        for lease in more {
            assert!(
                leased.insert(lease.info.id.clone()),
                "{} leased twice",
                lease.info.id
            );
        }
    }
    // More than one call's worth was asked for: at least one call leased its most.
    assert!(
        leased.len() >= wasmgear_proto::limits::MAX_CONCURRENCY as usize,
        "{} leased",
        leased.len()
    );
}
