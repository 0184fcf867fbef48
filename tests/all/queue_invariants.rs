//! The queue stays whole whatever the calls: an enqueue adds all or nothing, entries left
//! without a job are cleaned up, `retry` keeps a job's dependencies, delay and attempts (also
//! after its dependency is gone), a lease that ran out unconfirmed gives its attempt back, a
//! cancel asked for wins, a finished dependency is kept until its dependent is told, no lease
//! loses a job whatever it asks for, and every check that can refuse a call runs before its
//! first write.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState, Setting};
use wasmgear_proto::{ErrorClass, LeaseRequest};

use crate::support::hand::Hand;
use crate::support::jobs::{once, plain_jobs};
use crate::support::library::Library;
use wasmgear_testkit::{TestRedis, eventually, function};

/// The call from the issue: with one finished job kept, enqueueing a tagged job, a job
/// after a job of another function and a uniq job after a finished job of this function
/// adds all three or nothing, and never leaves an entry without a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_is_all_or_nothing() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("fx");
    let other = function("other");
    client
        .configure(&f, &[Setting::KeepFinished(Some(1))])
        .await
        .unwrap();
    let f1 = client
        .enqueue(&f, b"1", &EnqueueOptions::default())
        .await
        .unwrap();
    let _f2 = client
        .enqueue(&f, b"2", &EnqueueOptions::default())
        .await
        .unwrap();
    for _ in 0..2 {
        let lease = hand.next(&f).await;
        hand.succeed(&lease, b"").await;
    }
    let dependency = client
        .enqueue(&other, b"o", &EnqueueOptions::default())
        .await
        .unwrap();
    let tagged = EnqueueOptions {
        tags: vec!["t".into()],
        ..EnqueueOptions::default()
    };
    let after_other = EnqueueOptions {
        after: vec![dependency.clone()],
        ..EnqueueOptions::default()
    };
    let uniq_after = EnqueueOptions {
        uniq: Some("u".into()),
        after: vec![f1.clone()],
        ..EnqueueOptions::default()
    };
    let jobs = [
        (&b"x"[..], tagged),
        (&b"w"[..], after_other),
        (&b"y"[..], uniq_after),
    ];
    let result = client.submit(&f, &jobs).await;
    let mut conn = redis.raw().await;
    let records: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg("wg:{fx}:jobs")
        .query_async(&mut conn)
        .await
        .unwrap();
    // Every entry of every index has a record.
    for set in ["ready", "scheduled", "leased", "waiting", "expires"] {
        let members: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("wg:{{fx}}:{set}"))
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .unwrap();
        for number in members {
            assert!(
                records.contains_key(&number),
                "{set} holds {number} without a record"
            );
        }
    }
    let tagged: Vec<String> = redis::cmd("ZRANGE")
        .arg("wg:{fx}:tagged")
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    for member in tagged {
        let number = member
            .rsplit('\0')
            .next()
            .unwrap()
            .trim_start_matches('0')
            .to_string();
        assert!(
            records.contains_key(&number),
            "tagged holds {number} without a record"
        );
    }
    let holders: Vec<String> = redis::cmd("HVALS")
        .arg("wg:{fx}:uniq")
        .query_async(&mut conn)
        .await
        .unwrap();
    for number in holders {
        assert!(
            records.contains_key(&number),
            "uniq holds {number} without a record"
        );
    }
    let enqueued = result.expect("the three jobs are valid");
    assert_eq!(enqueued.len(), 3);
    for job in &enqueued {
        assert!(records.contains_key(&job.id.seq.to_string()));
    }
    // And the leases hand out the ready ones with their inputs.
    let leases = hand.take(&f, 10).await;
    let inputs: Vec<&[u8]> = leases.iter().map(|l| l.input.as_slice()).collect();
    assert_eq!(inputs, vec![&b"x"[..], &b"y"[..]]);
}

/// Waiting entries without a job behind them are cleaned up, and a re-check round ends
/// however many jobs are due, on the queue's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relink_safety_net_ends_and_cleans_orphans() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let (up, down) = (function("up"), function("down"));
    let a = client
        .enqueue(&up, b"a", &EnqueueOptions::default())
        .await
        .unwrap();
    let after_a = EnqueueOptions {
        after: vec![a.clone()],
        ..EnqueueOptions::default()
    };
    let b = client.enqueue(&down, b"b", &after_a).await.unwrap();
    let mut conn = redis.raw().await;
    // 250 orphans, and the real waiting job, all due.
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("wg:{down}:waiting");
    for n in 1000..1250 {
        zadd.arg(0).arg(n);
    }
    zadd.arg(0).arg(b.seq);
    let _: i64 = zadd.query_async(&mut conn).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        hand.queue.relink(std::slice::from_ref(&down)),
    )
    .await
    .expect("relink returns")
    .unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        hand.queue.relink(std::slice::from_ref(&down)),
    )
    .await
    .expect("relink returns")
    .unwrap();
    let left: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg("wg:{down}:waiting")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left.len(), 1, "the orphans are gone: {}", left.len());
    assert_eq!(left[0].0, b.seq.to_string());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    assert!(left[0].1 > now_ms, "the next re-check is pushed out");
    assert_eq!(
        client.status(&b).await.unwrap().record.state,
        JobState::Waiting
    );
    hand.succeed(&hand.next(&up).await, b"").await;
    assert_eq!(
        client.status(&b).await.unwrap().record.state,
        JobState::Queued
    );
}

/// `retry` of a cancelled job waits again for its dependencies (in this function and in
/// others), keeps its scheduled time, and gives a job enqueued without a number of attempts
/// the plugin's default again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_keeps_dependencies_delay_and_default_attempts() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let (f, g) = (function("rf"), function("rg"));

    // Dependencies in this function and in another.
    let here = client
        .enqueue(&f, b"here", &EnqueueOptions::default())
        .await
        .unwrap();
    let there = client
        .enqueue(&g, b"there", &EnqueueOptions::default())
        .await
        .unwrap();
    let both = EnqueueOptions {
        after: vec![here.clone(), there.clone()],
        ..EnqueueOptions::default()
    };
    let dependent = client.enqueue(&f, b"dependent", &both).await.unwrap();
    client.cancel(&dependent).await.unwrap();
    assert!(client.retry(&dependent).await.unwrap());
    assert_eq!(
        client.status(&dependent).await.unwrap().record.state,
        JobState::Waiting,
        "the retried job waits for its dependencies"
    );
    let here_lease = hand.next(&f).await;
    assert_eq!(here_lease.info.id, here, "only the dependency runs");
    assert!(
        hand.take(&f, 10).await.is_empty(),
        "the dependent must not run yet"
    );
    hand.succeed(&here_lease, b"").await;
    assert!(
        hand.take(&f, 10).await.is_empty(),
        "it still waits for {there}"
    );
    hand.succeed(&hand.next(&g).await, b"").await;
    assert_eq!(hand.next(&f).await.info.id, dependent);

    // A failed dependency in this function: the retry is refused, nothing changes.
    let doomed = client
        .enqueue(&f, b"doomed", &EnqueueOptions::default())
        .await
        .unwrap();
    let after_doomed = EnqueueOptions {
        after: vec![doomed.clone()],
        ..EnqueueOptions::default()
    };
    let orphan = client.enqueue(&f, b"orphan", &after_doomed).await.unwrap();
    hand.fail(&hand.next(&f).await, ErrorClass::GuestError, false)
        .await;
    assert_eq!(
        client.status(&orphan).await.unwrap().record.state,
        JobState::Cancelled
    );
    let refused = client.retry(&orphan).await.unwrap_err().to_string();
    assert!(
        refused.contains(&format!("dependency {doomed} has failed")),
        "{refused}"
    );
    assert_eq!(
        client.status(&orphan).await.unwrap().record.state,
        JobState::Cancelled
    );

    // A delayed job keeps its time.
    let later = EnqueueOptions {
        delay: Duration::from_secs(3600),
        ..EnqueueOptions::default()
    };
    let delayed = client.enqueue(&f, b"later", &later).await.unwrap();
    let run_at = client
        .status(&delayed)
        .await
        .unwrap()
        .record
        .run_at_ms
        .unwrap();
    client.cancel(&delayed).await.unwrap();
    assert!(client.retry(&delayed).await.unwrap());
    let record = client.status(&delayed).await.unwrap().record;
    assert_eq!(record.state, JobState::Scheduled);
    assert_eq!(record.run_at_ms, Some(run_at));

    // Default attempts: cancelled before its first lease, retried, then leased with the
    // plugin's default of 5.
    let plain = client
        .enqueue(&g, b"plain", &EnqueueOptions::default())
        .await
        .unwrap();
    client.cancel(&plain).await.unwrap();
    assert!(client.retry(&plain).await.unwrap());
    let request = LeaseRequest {
        default_max_attempts: 5,
        ..LeaseRequest::new(g.clone())
    };
    let leases = hand
        .queue
        .lease(&[request], 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(leases[0].info.id, plain);
    assert_eq!(
        leases[0].info.max_attempts, 5,
        "the plugin's default, not 1"
    );

    // A job that ran had its dependencies succeed first: after they are forgotten, it is
    // retried at once, alone or with its failure group.
    let h = function("rh");
    let brief = EnqueueOptions {
        retention: Duration::from_secs(1),
        ..EnqueueOptions::default()
    };
    let first = client.enqueue(&h, b"first", &brief).await.unwrap();
    let after_first = EnqueueOptions {
        after: vec![first.clone()],
        ..once(Duration::from_secs(30))
    };
    let ran = client.enqueue(&h, b"ran", &after_first).await.unwrap();
    hand.succeed(&hand.next(&h).await, b"").await;
    let lease = hand.next(&h).await;
    assert_eq!(lease.info.id, ran);
    hand.fail(&lease, ErrorClass::GuestError, false).await;
    // A lease that finds nothing still forgets `first` once its retention is over.
    eventually(
        Duration::from_secs(10),
        "the dependency to be forgotten",
        || async {
            let none = hand
                .queue
                .lease(&[LeaseRequest::new(h.clone())], 1, Duration::from_secs(30))
                .await
                .unwrap();
            assert!(none.is_empty(), "{ran} failed for good");
            client.status(&first).await.is_err().then_some(())
        },
    )
    .await;
    assert!(client.retry(&ran).await.unwrap());
    assert_eq!(
        client.status(&ran).await.unwrap().record.state,
        JobState::Queued
    );
    hand.fail(&hand.next(&h).await, ErrorClass::GuestError, false)
        .await;
    let groups = client.failure_groups(Some(&h)).await.unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    let moved = client.retry_group(&h, &groups[0].group, 10).await.unwrap();
    assert_eq!(moved, vec![ran.clone()]);
    assert_eq!(
        client.status(&ran).await.unwrap().record.state,
        JobState::Queued
    );
}

/// A lease that runs out before its worker showed it had the job (its reply was lost, or
/// the worker died at once) does not use up an attempt, however often; once a heartbeat
/// confirmed it, it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_lease_gives_its_attempt_back() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("uf");
    let id = client
        .enqueue(&f, b"x", &once(Duration::from_secs(30)))
        .await
        .unwrap();
    let short = Duration::from_millis(200);
    let lease_short = || async {
        hand.queue
            .lease(&[LeaseRequest::new(f.clone())], 1, short)
            .await
            .unwrap()
    };
    let first = lease_short().await;
    assert_eq!(first[0].info.attempt, 1);
    // Never confirmed: after expiry it is leased again as attempt 1, not failed.
    let again = eventually(Duration::from_secs(10), "the lease to expire", || async {
        let leases = lease_short().await;
        (!leases.is_empty()).then_some(leases)
    })
    .await;
    assert_eq!(again[0].info.id, id);
    assert_eq!(again[0].info.attempt, 1, "the lost lease did not count");
    // However often (issue 36: a job is never failed by leases that ran out unconfirmed).
    let third = eventually(
        Duration::from_secs(10),
        "the lease to expire again",
        || async {
            let leases = lease_short().await;
            (!leases.is_empty()).then_some(leases)
        },
    )
    .await;
    assert_eq!(
        third[0].info.attempt, 1,
        "the second lost lease did not count"
    );
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Running
    );

    // Confirmed by a heartbeat: the expiry counts at once.
    let confirmed = client
        .enqueue(&f, b"y", &once(Duration::from_secs(30)))
        .await
        .unwrap();
    let lease = lease_short().await.remove(0);
    assert_eq!(lease.info.id, confirmed);
    hand.queue.heartbeat(&lease, short).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the confirmed job to fail",
        || async {
            let _ = lease_short().await;
            let state = client.status(&confirmed).await.unwrap().record.state;
            (state == JobState::Failed).then_some(())
        },
    )
    .await;
}

/// Once a running job's cancel was asked for, the cancel wins: a result reported after it
/// ends the job `cancelled` (its output dropped), and an enqueue with its uniq key makes a
/// new job instead of joining it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_cancel_wins_and_frees_the_uniq_key() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("cf");
    let keyed = EnqueueOptions {
        uniq: Some("k".into()),
        ..EnqueueOptions::default()
    };
    let id = client.enqueue(&f, b"x", &keyed).await.unwrap();
    let lease = hand.next(&f).await;
    assert_eq!(
        client.cancel(&id).await.unwrap(),
        wasmgear_client::CancelOutcome::Stopping
    );
    let fresh = client.enqueue(&f, b"y", &keyed).await.unwrap();
    assert_ne!(
        fresh, id,
        "a job being cancelled does not hold its uniq key"
    );
    let done = hand
        .queue
        .complete(&lease, b"late output", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        done,
        wasmgear_proto::Completion::Accepted(JobState::Cancelled)
    );
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Cancelled);
    assert_eq!(status.output, None);
    // The new holder keeps the key.
    assert_eq!(client.enqueue(&f, b"z", &keyed).await.unwrap(), fresh);
}

/// A finished job outlives its retention while a dependent in another function has not
/// ended: told of its end or not (here the notify was lost), the dependent's re-check
/// still finds it, and the dependent reads it when it runs; once the dependent has
/// succeeded, it is forgotten as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_is_kept_until_its_dependent_has_succeeded() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let (up, down) = (function("up"), function("down"));
    let short = EnqueueOptions {
        retention: Duration::from_secs(1),
        ..EnqueueOptions::default()
    };
    let a = client.enqueue(&up, b"a", &short).await.unwrap();
    let after_a = EnqueueOptions {
        after: vec![a.clone()],
        ..EnqueueOptions::default()
    };
    let b = client.enqueue(&down, b"b", &after_a).await.unwrap();

    // The dependent's function cannot be reached while `a` completes: `resolve` fails there
    // (its jobs hash is briefly of the wrong type), so the news is lost.
    let mut conn = redis.raw().await;
    let _: () = redis::cmd("RENAME")
        .arg("wg:{down}:jobs")
        .arg("wg:{down}:jobs-away")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("wg:{down}:jobs")
        .arg("in the way")
        .query_async(&mut conn)
        .await
        .unwrap();
    hand.succeed(&hand.next(&up).await, b"").await;
    let _: () = redis::cmd("DEL")
        .arg("wg:{down}:jobs")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("wg:{down}:jobs-away")
        .arg("wg:{down}:jobs")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        client.status(&b).await.unwrap().record.state,
        JobState::Waiting
    );

    // A job finished after `a` with the same retention: once it is forgotten, `a`'s
    // retention is over too.
    let c = client.enqueue(&up, b"c", &short).await.unwrap();
    hand.succeed(&hand.next(&up).await, b"").await;
    eventually(Duration::from_secs(20), "the retention to pass", || async {
        // Enqueueing runs the housekeeping.
        client.enqueue(&up, b"tick", &short).await.unwrap();
        client.status(&c).await.is_err().then_some(())
    })
    .await;
    assert!(
        client.status(&a).await.is_ok(),
        "{a} must wait for its dependent"
    );

    // The dependent's re-check finds `a` succeeded.
    let _: () = redis::cmd("ZADD")
        .arg("wg:{down}:waiting")
        .arg(0)
        .arg(b.seq)
        .query_async(&mut conn)
        .await
        .unwrap();
    hand.queue
        .relink(std::slice::from_ref(&down))
        .await
        .unwrap();
    assert_eq!(
        client.status(&b).await.unwrap().record.state,
        JobState::Queued
    );
    // Told now, still held: `b` reads `a`'s output when it runs.
    client.enqueue(&up, b"tick", &short).await.unwrap();
    assert!(
        client.status(&a).await.is_ok(),
        "{a} must wait for its dependent to succeed"
    );
    hand.succeed(&hand.next(&down).await, b"").await;
    // `b` succeeded: `a` goes at the next housekeeping past its retention.
    eventually(
        Duration::from_secs(10),
        "the released dependency to go",
        || async {
            client.enqueue(&up, b"tick", &short).await.unwrap();
            client.status(&a).await.is_err().then_some(())
        },
    )
    .await;
}

const WAIT: Duration = Duration::from_secs(30);

/// A lease that runs out unconfirmed (the worker never had the job) gives its attempt back
/// every time: a job with one attempt is never failed by such leases, however many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_never_failed_by_leases_that_ran_out_unconfirmed() {
    let redis = TestRedis::start();
    let f = function("unconfirmed");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let id = client.enqueue(&f, b"x", &options).await.unwrap();
    for round in 0..4 {
        // A lease of 50 ms that nobody confirms: leased again once it has run out.
        let call = format!("w/{round}");
        eventually(WAIT, "the job to be leased again", || async {
            let (leases, ..): (Vec<Vec<u8>>, i64, i64, redis::Value, String) = library
                .ok("lease", &["w", &call, "1", "50", "1000", "3"])
                .await;
            (!leases.is_empty()).then_some(())
        })
        .await;
        let state = client.status(&id).await.unwrap().record.state;
        assert_eq!(state, JobState::Running, "round {round}");
    }
    let record = library.record(id.seq).await.unwrap();
    assert_eq!(record["attempt"], 1, "{record}");
    assert_eq!(record["given_back"], 3, "{record}");
}

/// A lease asks for at most MAX_CONCURRENCY jobs (more is refused, changing nothing); a
/// lease of that many reads every job before it leaves the ready set, and every job is in
/// exactly one set afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lease_loses_jobs_whatever_it_asks_for() {
    let redis = TestRedis::start();
    let f = function("many");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    let jobs = 3000;
    let inputs: Vec<(&[u8], EnqueueOptions)> = (0..jobs)
        .map(|_| (&b"x"[..], EnqueueOptions::default()))
        .collect();
    client.enqueue_many(&f, &inputs).await.unwrap();
    let before = library.dump().await;
    let refused = library
        .call::<redis::Value>("lease", &["w", "w/big", "9000", "30000", "1000", "3"])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some("BADARGS"), "{refused}");
    assert_eq!(
        library.dump().await,
        before,
        "a refused lease changed something"
    );
    let most = wasmgear_proto::limits::MAX_CONCURRENCY.to_string();
    let (leases, ..): (Vec<Vec<u8>>, i64, i64, redis::Value, String) = library
        .ok("lease", &["w", "w/most", &most, "30000", "1000", "3"])
        .await;
    assert_eq!(
        leases.len() as u64,
        2 * wasmgear_proto::limits::MAX_CONCURRENCY
    );
    let ready = library.members("ready").await;
    let leased = library.members("leased").await;
    assert_eq!(ready.len() + leased.len(), jobs);
    let all: std::collections::HashSet<&String> = ready.iter().chain(&leased).collect();
    assert_eq!(all.len(), jobs, "a job is in two sets");
}

/// Every number a call takes is checked before its first write: values `tonumber` lets
/// through (`inf`, `nan`, `1e999`, `0x10`, ` 7`, `1.5`) and values out of range are refused
/// with an error naming them, and the queue is left exactly as it was, in every function
/// that takes numbers. (A batch whose last job is bad writes none of the jobs before it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refused_call_changes_nothing() {
    let redis = TestRedis::start();
    let f = function("checked");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    // Some state to leave alone: a queued job, a running one (its token), a failed one.
    client.enqueue_many(&f, &plain_jobs(b"q", 3)).await.unwrap();
    let (number, token) = library
        .lease_rows(&["w", "w/1", "1", "30000", "1000", "3"])
        .await
        .remove(0);
    const BAD: &[&str] = &[
        "inf",
        "-inf",
        "nan",
        "1e999",
        "0x10",
        " 7",
        "1.5",
        "",
        "99999999999999999999",
    ];
    let mut refused: Vec<(String, Vec<String>)> = Vec::new();
    let numeric_options = [
        "priority",
        "attempts",
        "timeout",
        "retention",
        "failed_retention",
        "delay",
        "at",
        "tick",
    ];
    for option in numeric_options {
        for bad in BAD {
            let mut args: Vec<String> = ["1", "call", "bad-call", "5"].map(String::from).to_vec();
            // Jobs that write before the bad one would in a call that checked late.
            for job in [
                vec!["1", "uniq", "u1", "in"],
                vec!["1", "tag", "t1", "in"],
                vec!["1", "once", "o1", "in"],
                vec!["0", "in"],
            ] {
                args.extend(job.into_iter().map(String::from));
            }
            let mut job: Vec<String> = vec!["1".into(), option.into(), bad.to_string()];
            if option == "tick" {
                job = vec![
                    "2".into(),
                    "schedule".into(),
                    "s".into(),
                    option.into(),
                    bad.to_string(),
                ];
            }
            args.extend(job);
            args.push("in".into());
            refused.push(("enqueue".into(), args));
        }
    }
    let calls: Vec<(&str, Vec<&str>)> = vec![
        (
            "enqueue",
            vec!["1", "call", "c", "1", "1", "priority", "1001", "x"],
        ),
        ("enqueue", vec!["1", "call", "c", "1", "1", "uniq", "", "x"]),
        ("lease", vec!["w", "w/2", "0x10", "30000", "1000", "3"]),
        ("lease", vec!["w", "w/2", "1", "inf", "1000", "3"]),
        ("lease", vec!["w", "w/2", "1", "30000", "nan", "3"]),
        ("lease", vec!["w", "w/2", "1", "30000", "1000", "1e999"]),
        (
            "lease",
            vec![
                "w", "w/2", "1", "30000", "1000", "3", "ch", "inf", "1", "", "0",
            ],
        ),
        ("complete", vec!["1", "lease", "inf", "0"]),
        (
            "complete",
            vec![
                "5", "call", "c", "lease", "1", "worker", "w", "ttl", "nan", "timeout", "1", "0",
            ],
        ),
        ("complete", vec!["0", "1", "x1", "tok", "", "", ""]),
        (
            "fail",
            vec![&number, &token, "trap", "boom", "1", "inf", "", ""],
        ),
        (
            "fail",
            vec![&number, &token, "trap", "boom", "2", "10", "", ""],
        ),
        ("heartbeat", vec![&number, &token, "1e999"]),
        ("progress", vec![&number, &token, "1.5", "10", ""]),
        ("priority", vec!["2", "nan"]),
        ("priority", vec!["2", "5000"]),
        ("configure", vec!["concurrency", "abc"]),
        ("configure", vec!["concurrency", "inf"]),
        ("configure", vec!["no_such_setting", "1"]),
        ("configure", vec!["paused", "yes"]),
        ("retry", vec!["group", "trap", "inf"]),
        ("recheck", vec!["1e999"]),
        ("resolve", vec!["2", "other:1", "bogus"]),
        ("link", vec!["2", "not-an-id"]),
        ("adopt", vec!["2", "not-an-id"]),
    ];
    for (name, args) in calls {
        refused.push((name.into(), args.into_iter().map(String::from).collect()));
    }
    // A job with the most tags refuses one more.
    let tags: Vec<String> = (0..wasmgear_proto::limits::MAX_TAGS)
        .map(|i| format!("t{i}"))
        .collect();
    let mut add = vec!["2".to_string(), "add".into()];
    add.extend(tags.iter().cloned());
    let _: Vec<String> = library
        .ok("tag", &add.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    refused.push((
        "tag".into(),
        vec!["2".into(), "add".into(), "one-more".into()],
    ));
    let before = library.dump().await;
    for (name, args) in &refused {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let error = library
            .call::<redis::Value>(name, &args)
            .await
            .expect_err(&format!("{name} {args:?} was not refused"));
        assert!(
            matches!(error.code(), Some("BADARGS" | "BADJOB")),
            "{name} {args:?}: {error}"
        );
        assert_eq!(
            library.dump().await,
            before,
            "{name} {args:?} was refused ({error}) but changed the queue"
        );
    }
}

/// A job handed back unrun (a stopping worker) keeps the time it was first leased: when it
/// later fails, `retry` runs it again even after its dependency is gone (it has been leased,
/// so its dependencies had succeeded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_handed_back_can_be_retried_after_its_dependency_is_gone() {
    let redis = TestRedis::start();
    let f = function("handback");
    let library = Library::new(redis.raw().await, &f);
    let client = redis.client().await;
    client
        .configure(&f, &[wasmgear_client::Setting::KeepFinished(Some(1))])
        .await
        .unwrap();
    let dependency = client
        .enqueue(&f, b"d", &EnqueueOptions::default())
        .await
        .unwrap();
    let lease_one = |call: &'static str| {
        let library = library.clone();
        async move {
            library
                .lease_rows(&["w", call, "1", "30000", "1000", "3"])
                .await
                .remove(0)
        }
    };
    let (d, d_token) = lease_one("w/1").await;
    let _: redis::Value = library
        .ok("complete", &["0", "1", &d, &d_token, "", "", ""])
        .await;
    let options = EnqueueOptions {
        after: vec![dependency.clone()],
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let job = client.enqueue(&f, b"j", &options).await.unwrap();
    let (j, j_token) = lease_one("w/2").await;
    let _: (i64, String, redis::Value) = library.ok("release", &[&j, &j_token]).await;
    let (j2, j2_token) = lease_one("w/3").await;
    assert_eq!(j2, j);
    let _: (i64, String, redis::Value) = library
        .ok("fail", &[&j, &j2_token, "trap", "boom", "0", "0", "", ""])
        .await;
    // The dependency is forgotten (one finished job kept): the next call's housekeeping.
    client
        .enqueue(&function("other"), b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    let _: redis::Value = library
        .ok("lease", &["w", "w/4", "1", "30000", "1000", "3"])
        .await;
    assert_eq!(library.state(dependency.seq).await, "missing");
    client.retry(&job).await.unwrap();
    assert_eq!(
        client.status(&job).await.unwrap().record.state,
        JobState::Queued
    );
}
