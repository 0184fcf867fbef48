//! Checkpoints (issue 43): the bytes a running job saves for its next attempt to resume
//! from. The queue keeps the latest one its lease holder saved, until the job succeeds,
//! its record is forgotten or a retry asks for a fresh start; the `resume` plugin resumes
//! after a failure, after its worker was SIGKILLed and after its lease was lost; a
//! plugin's manifest caps their size.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobState, QueueError, RetryOptions};
use wasmgear_proto::ErrorClass;
use wasmgear_proto::limits::MAX_CHECKPOINT_BYTES;
use wasmgear_testkit::{
    TestRedis, TestWorker, WorkerProcess, artifact, eventually, function, plugin_dir, stderr,
    stdout, wasmgear,
};

use crate::support::hand::Hand;

const WAIT: Duration = Duration::from_secs(60);

/// Waits until job `id`'s lease has run out: what its holder had sent before it was cut
/// off (or killed) has reached Redis by then, and nothing of it comes after.
async fn lease_ran_out(client: &wasmgear_client::Client, id: &wasmgear_proto::JobId) {
    eventually(WAIT, "the job's lease to run out", || async {
        let record = client.status(id).await.unwrap().record;
        record
            .lease_until_ms
            .is_some_and(|until| until < wasmgear_proto::units::now_ms())
            .then_some(())
    })
    .await;
}

/// How many checkpoints function `f` keeps in Redis (its `checkpoints` hash).
async fn checkpoints_kept(redis: &TestRedis, f: &wasmgear_proto::FunctionName) -> u64 {
    redis::cmd("HLEN")
        .arg(wasmgear_proto::keys::FunctionKeys::new(f).checkpoints())
        .query_async(&mut redis.raw().await)
        .await
        .unwrap()
}

/// The position the `resume` plugin saved last for job `id`, if any.
async fn position(client: &wasmgear_client::Client, id: &wasmgear_proto::JobId) -> Option<u64> {
    let saved = client.checkpoint(id).await.unwrap()?;
    Some(String::from_utf8(saved).unwrap().parse().unwrap())
}

/// The lease holder's saves replace each other; the record tells of the latest (its size
/// and when); a retried attempt reads it, and the lease before can no longer write it; the
/// job's success drops it. A checkpoint over the queue's ceiling is refused before any call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_holders_latest_checkpoint_is_kept_until_the_job_succeeds() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("long");
    let options = EnqueueOptions {
        max_attempts: Some(3),
        ..EnqueueOptions::default()
    };
    let id = client.enqueue(&f, b"", &options).await.unwrap();
    assert_eq!(client.checkpoint(&id).await.unwrap(), None);
    let first = hand.next(&f).await;
    assert_eq!(hand.queue.checkpoint(&first).await.unwrap(), None);
    let before = wasmgear_proto::units::now_ms();
    assert!(hand.queue.save_checkpoint(&first, b"step 1").await.unwrap());
    assert!(
        hand.queue
            .save_checkpoint(&first, b"step 22")
            .await
            .unwrap()
    );
    assert_eq!(
        client.checkpoint(&id).await.unwrap().as_deref(),
        Some(&b"step 22"[..])
    );
    let told = client.status(&id).await.unwrap().record.checkpoint.unwrap();
    assert_eq!(told.bytes, 7);
    assert!(told.ms >= before.saturating_sub(1000) && told.ms <= before + 60_000);
    // Over the ceiling: refused here, and nothing changed.
    let refused = hand
        .queue
        .save_checkpoint(&first, &vec![0; MAX_CHECKPOINT_BYTES as usize + 1])
        .await
        .unwrap_err();
    assert!(matches!(refused, QueueError::BadOption(_)), "{refused}");
    assert!(refused.to_string().contains("over the limit"), "{refused}");
    assert_eq!(
        client.checkpoint(&id).await.unwrap().as_deref(),
        Some(&b"step 22"[..])
    );

    // A retried attempt resumes from it; the first lease writes no more.
    assert_ne!(
        hand.fail(&first, ErrorClass::GuestError, true).await,
        JobState::Failed
    );
    let second = eventually(WAIT, "the retried attempt", || async {
        hand.take(&f, 1).await.pop()
    })
    .await;
    assert_eq!(second.info.attempt, 2);
    assert_eq!(
        hand.queue.checkpoint(&second).await.unwrap().as_deref(),
        Some(&b"step 22"[..])
    );
    assert!(!hand.queue.save_checkpoint(&first, b"stale").await.unwrap());
    assert!(
        hand.queue
            .save_checkpoint(&second, b"step 40")
            .await
            .unwrap()
    );
    assert_eq!(
        client.checkpoint(&id).await.unwrap().as_deref(),
        Some(&b"step 40"[..])
    );

    hand.succeed(&second, b"done").await;
    assert_eq!(client.checkpoint(&id).await.unwrap(), None);
    let status = client.status(&id).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.record.checkpoint, None);
    assert_eq!(checkpoints_kept(&redis, &f).await, 0);
}

/// A failed job keeps its checkpoint: `retry` resumes from it, `retry --fresh` (and the
/// client's `fresh`) drops it; a failed job's checkpoint goes with its record when that is
/// forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_keeps_its_checkpoint_for_retry_and_fresh_drops_it() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("long");
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let once = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let id = client.enqueue(&f, b"", &once).await.unwrap();
    let lease = hand.next(&f).await;
    assert!(hand.queue.save_checkpoint(&lease, b"half").await.unwrap());
    assert_eq!(
        hand.fail(&lease, ErrorClass::GuestError, false).await,
        JobState::Failed
    );
    let shown = stdout(&wasmgear(&["status", &id.to_string()], &env));
    assert!(shown.contains("checkpoint 4 bytes, saved "), "{shown}");

    // A plain retry resumes.
    assert!(client.retry(&id).await.unwrap());
    let again = hand.next(&f).await;
    assert_eq!(
        hand.queue.checkpoint(&again).await.unwrap().as_deref(),
        Some(&b"half"[..])
    );
    assert_eq!(
        hand.fail(&again, ErrorClass::GuestError, false).await,
        JobState::Failed
    );
    // The CLI's --fresh starts over.
    let out = wasmgear(&["retry", &id.to_string(), "--fresh"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(client.checkpoint(&id).await.unwrap(), None);
    assert_eq!(client.status(&id).await.unwrap().record.checkpoint, None);
    let fresh = hand.next(&f).await;
    assert_eq!(hand.queue.checkpoint(&fresh).await.unwrap(), None);
    assert!(hand.queue.save_checkpoint(&fresh, b"again").await.unwrap());
    assert_eq!(
        hand.fail(&fresh, ErrorClass::GuestError, false).await,
        JobState::Failed
    );
    // The client's fresh does the same.
    assert!(
        client
            .retry_with(&id, RetryOptions { fresh: true })
            .await
            .unwrap()
    );
    assert_eq!(client.checkpoint(&id).await.unwrap(), None);

    // Forgotten with its record.
    let brief = EnqueueOptions {
        max_attempts: Some(1),
        // (A failed job is kept the longer of its two retentions.)
        retention: Duration::from_secs(1),
        failed_retention: Duration::from_secs(1),
        ..EnqueueOptions::default()
    };
    let g = function("brief");
    let gone = client.enqueue(&g, b"", &brief).await.unwrap();
    let lease = hand.next(&g).await;
    assert!(hand.queue.save_checkpoint(&lease, b"lost").await.unwrap());
    hand.fail(&lease, ErrorClass::GuestError, false).await;
    eventually(
        WAIT,
        "the failed job to be forgotten, its checkpoint with it",
        || async {
            // (Calls on the function forget what is due.)
            client
                .enqueue(&g, b"", &EnqueueOptions::default())
                .await
                .unwrap();
            let forgotten = matches!(client.status(&gone).await, Err(QueueError::NoSuchJob(_)));
            (forgotten && checkpoints_kept(&redis, &g).await == 0).then_some(())
        },
    )
    .await;
}

/// The example plugin on a real worker: `resume 10` fails on purpose after 5 steps on its
/// first attempt; the second resumes from the checkpoint, and the job's checkpoint goes
/// when it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_attempt_resumes_from_the_last_checkpoint() {
    let redis = TestRedis::start();
    let worker = TestWorker::start(&redis, &["resume"]).await;
    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(3),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("resume"), b"10", &options)
        .await
        .unwrap();
    let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded, "{status:?}");
    assert_eq!(status.output.as_deref(), Some(&b"resumed from 5"[..]));
    assert_eq!(status.record.attempt, 2);
    let outcomes: Vec<&str> = status
        .record
        .history
        .iter()
        .map(|a| a.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["guest-error", "succeeded"], "{status:?}");
    assert_eq!(status.record.checkpoint, None);
    assert_eq!(client.checkpoint(&id).await.unwrap(), None);
    drop(worker);
}

/// Runs `resume 60 100` on `first` (a worker process), waits for a few checkpoints to land,
/// has `lose` take the job from it (a kill, a network cut), waits for the job's lease to run
/// out, and has a second worker on `redis` take the job over: the job succeeds, resumed from
/// the last checkpoint that landed. Returns the job's final status and the second worker.
async fn resumed_elsewhere(
    redis: &TestRedis,
    plugins: &std::path::Path,
    first: &mut WorkerProcess,
    lose: impl FnOnce(&mut WorkerProcess),
) -> (wasmgear_client::JobStatus, WorkerProcess) {
    let client = redis.client().await;
    let id = client
        .enqueue(&function("resume"), b"60 100", &EnqueueOptions::default())
        .await
        .unwrap();
    eventually(WAIT, "a few checkpoints to land", || async {
        (position(&client, &id).await? >= 3).then_some(())
    })
    .await;
    lose(first);
    lease_ran_out(&client, &id).await;
    let landed = position(&client, &id).await.unwrap();
    // Lost before it failed on purpose (at 30): the next attempt goes on from there.
    assert!((3..30).contains(&landed), "{landed}");

    let second = WorkerProcess::builder(&redis.url())
        .plugins(plugins)
        .args(&["--lease-ttl", "1s"])
        .start();
    let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded, "{status:?}");
    assert_eq!(
        status.output.as_deref(),
        Some(format!("resumed from {landed}").as_bytes())
    );
    let outcomes: Vec<&str> = status
        .record
        .history
        .iter()
        .map(|a| a.outcome.as_str())
        .collect();
    assert_eq!(outcomes, ["lease-lost", "succeeded"], "{status:?}");
    (status, second)
}

/// A worker SIGKILLed mid-job: the worker that reclaims the job resumes from the last
/// checkpoint that reached the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_job_resumes_from_the_last_checkpoint_that_landed() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["resume"]);
    let mut first = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .args(&["--lease-ttl", "1s"])
        .start();
    resumed_elsewhere(&redis, plugins.path(), &mut first, |first| {
        first.signal("KILL");
        assert!(first.wait_exit(Duration::from_secs(10)).is_some());
    })
    .await;
}

/// A worker cut off from Redis loses the job's lease; the worker that takes the job over
/// resumes from the last checkpoint that landed, and when the first one is back its late
/// checkpoint writes change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_resumes_from_the_last_checkpoint_and_the_old_holder_writes_nothing() {
    let redis = TestRedis::start();
    let proxy = wasmgear_testkit::proxy::Proxy::start(redis.port()).await;
    let plugins = plugin_dir(&["resume"]);
    let client = redis.client().await;
    let mut cut_off = WorkerProcess::builder(&proxy.url())
        .plugins(plugins.path())
        .args(&["--lease-ttl", "1s"])
        .metrics()
        .start();
    let (status, _other) =
        resumed_elsewhere(&redis, plugins.path(), &mut cut_off, |_| proxy.cut()).await;
    let id = status.id.clone();
    // The first worker comes back: what it held back is refused (its lease is gone).
    proxy.heal();
    eventually(
        WAIT,
        "the cut-off worker to hear its lease is lost",
        || async {
            (cut_off.metric(
                "wasmgear_jobs_finished_total",
                &[("function", "resume"), ("state", "refused")],
            ) >= 1.0)
                .then_some(())
        },
    )
    .await;
    let after = client.status(&id).await.unwrap();
    assert_eq!(after.record.state, JobState::Succeeded);
    assert_eq!(after.record.checkpoint, None);
    assert_eq!(client.checkpoint(&id).await.unwrap(), None);
    assert_eq!(after.output, status.output);
}

/// A plugin's manifest caps its checkpoints (`[limits] checkpoint`): with a cap of one byte,
/// `resume 12` saves positions 1 to 9, and the save of `10` is refused, which fails the job
/// for good with a message naming the limit; the last checkpoint kept is `9`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_over_the_manifests_cap_is_refused_and_fails_the_job() {
    let redis = TestRedis::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("resume"), dir.path().join("resume.wasm")).unwrap();
    std::fs::write(dir.path().join("resume.toml"), "[limits]\ncheckpoint = 1\n").unwrap();
    let worker = TestWorker::start_on(&redis.url(), dir, Default::default()).await;
    let client = redis.client().await;
    let options = EnqueueOptions {
        max_attempts: Some(3),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("resume"), b"12", &options)
        .await
        .unwrap();
    let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Failed, "{status:?}");
    let error = status.record.error.clone().unwrap();
    assert!(
        error
            .message
            .contains("a checkpoint of 2 bytes is over this plugin's limit of 1 bytes"),
        "{error:?}"
    );
    // Not retried: a refused save is the plugin's bug (attempt 2 of 3 was the last).
    assert_eq!(status.record.attempt, 2, "{status:?}");
    assert_eq!(position(&client, &id).await, Some(9));
    drop(worker);
}

/// The HTTP API and the dashboard: a failed job's record shows its checkpoint; the API's
/// retry takes `fresh` (a value that is not a boolean is refused and changes nothing) or
/// resumes without it; the dashboard shows the checkpoint and offers both retries, and the
/// one from the beginning drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_and_the_dashboard_show_checkpoints_and_retry_fresh_or_resuming() {
    use crate::dashboard::{FORM, csrf_of, send, sign_in};
    use crate::http_api::{Server, get, post};

    let redis = TestRedis::start();
    let plugins = plugin_dir(&["resume"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let server = Server::with_token(&redis);
    let client = redis.client().await;
    let once = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    // Three jobs whose only attempt fails on purpose after 5 of 10 steps, keeping `5`.
    let mut failed = Vec::new();
    for _ in 0..3 {
        let id = client
            .enqueue(&function("resume"), b"10", &once)
            .await
            .unwrap();
        let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
        assert_eq!(status.record.state, JobState::Failed, "{status:?}");
        failed.push(id.to_string());
    }
    let resumed_from = |id: String| {
        let client = &client;
        async move {
            let id: wasmgear_proto::JobId = id.parse().unwrap();
            let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
            assert_eq!(status.record.state, JobState::Succeeded, "{status:?}");
            String::from_utf8(status.output.unwrap()).unwrap()
        }
    };

    let job = get(&server, &format!("/v1/jobs/{}", failed[0]))
        .await
        .json();
    assert_eq!(job["checkpoint"]["bytes"], 1, "{job}");
    let bad = post(
        &server,
        &format!("/v1/jobs/{}/retry?fresh=maybe", failed[0]),
        serde_json::json!({}),
    )
    .await;
    assert_eq!(bad.status, 400);
    assert_eq!(
        client
            .status(&failed[0].parse().unwrap())
            .await
            .unwrap()
            .record
            .state,
        JobState::Failed
    );
    let fresh = post(
        &server,
        &format!("/v1/jobs/{}/retry?fresh=true", failed[0]),
        serde_json::json!({}),
    )
    .await;
    assert_eq!(fresh.json()["retried"], true);
    assert_eq!(resumed_from(failed[0].clone()).await, "resumed from 0");
    let plain = post(
        &server,
        &format!("/v1/jobs/{}/retry", failed[1]),
        serde_json::json!({}),
    )
    .await;
    assert_eq!(plain.json()["retried"], true);
    assert_eq!(resumed_from(failed[1].clone()).await, "resumed from 5");

    let cookie = sign_in(&server).await;
    let signed_in = ("cookie", cookie.as_str());
    let path = format!("/ui/jobs/{}", failed[2]);
    let page = send(&server, "GET", &path, &[signed_in], "").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("<th scope=\"row\">checkpoint</th><td>1 byte, saved "),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("Retry from the checkpoint"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("Retry from the beginning"),
        "{}",
        page.body
    );
    let csrf = csrf_of(&page.body);
    let retried = send(
        &server,
        "POST",
        &format!("{path}/retry"),
        &[FORM, signed_in],
        &format!("csrf={csrf}&fresh=1"),
    )
    .await;
    assert_eq!(retried.status, 303, "{}", retried.body);
    assert_eq!(resumed_from(failed[2].clone()).await, "resumed from 0");
}
