//! `--min-replicas`: a write of jobs is reported done only once that many replicas confirmed
//! it (`WAIT`), or fails saying so, written once however often it was sent; a function's
//! own setting asks it of every producer. Against a real primary and replica.

use std::time::Duration;

use wasmgear_client::{Client, EnqueueOptions, MinReplicas, QueueError, Setting};
use wasmgear_proto::keys::FunctionKeys;
use wasmgear_testkit::sentinel::{TestReplicaSet, cli};
use wasmgear_testkit::{eventually_sync, function, stderr, wasmgear};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_wait_for_the_replicas_asked_for() {
    let set = TestReplicaSet::start(1, 0);
    let url = set.node(0).url();
    let echo = function("echo");
    let jobs_key = FunctionKeys::new(&echo).jobs();
    // (Two seconds: on a loaded machine a replica may take more than the 200 ms this once
    // allowed; the wait ends as soon as it confirms.)
    let min = |n| MinReplicas::new(n, Duration::from_secs(2)).unwrap();
    let confirmed = Client::connect(&url)
        .await
        .unwrap()
        .with_min_replicas(min(1));
    let first = confirmed
        .enqueue(&echo, b"kept", &EnqueueOptions::default())
        .await
        .expect("one replica confirms");
    // Confirmed means the replica has it already.
    let on_replica = cli(
        set.node(1).port(),
        &["hexists", &jobs_key, &first.seq.to_string()],
    );
    assert_eq!(on_replica.trim(), "1", "the job on the replica");

    // The replica goes: the write is on the primary, once, and the call says what happened.
    set.node(1).kill();
    let primary = set.node(0).port();
    eventually_sync(
        Duration::from_secs(30),
        "the primary to drop its replica",
        || cli(primary, &["info", "replication"]).contains("connected_slaves:0"),
    );
    let error = confirmed
        .enqueue(&echo, b"unconfirmed", &EnqueueOptions::default())
        .await
        .expect_err("no replica to confirm");
    let QueueError::NotReplicated {
        wanted,
        confirmed: got,
        ..
    } = &error
    else {
        panic!("{error}")
    };
    assert_eq!((*wanted, *got), (1, 0));
    assert!(
        error
            .to_string()
            .starts_with("the enqueue of a job of echo was written to the Redis primary, but only 0 of the 1 replicas"),
        "{error}"
    );
    assert_eq!(
        cli(primary, &["hlen", &jobs_key]).trim(),
        "2",
        "written once, sent three times"
    );

    // A function's own setting asks it of a producer that asks for none.
    let plain = Client::connect(&url).await.unwrap();
    plain
        .enqueue(&echo, b"plain", &EnqueueOptions::default())
        .await
        .expect("none asked");
    let config = plain
        .configure(&echo, &[Setting::MinReplicas(Some(1))])
        .await
        .unwrap();
    assert_eq!(config.min_replicas, Some(1));
    let error = plain
        .enqueue(&echo, b"asked by the function", &EnqueueOptions::default())
        .await
        .expect_err("the function asks for a replica");
    assert!(
        matches!(error, QueueError::NotReplicated { wanted: 1, .. }),
        "{error}"
    );
    assert!(
        plain
            .configure(&echo, &[Setting::MinReplicas(Some(17))])
            .await
            .is_err(),
        "more than 16 replicas"
    );

    // The CLI: the error and its exit code; the function's setting shown and cleared.
    let out = wasmgear(
        &[
            "enqueue",
            "echo",
            "x",
            "--redis",
            &url,
            "--min-replicas-timeout",
            "100ms",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("replicas asked for confirmed it within 100 ms"),
        "{}",
        stderr(&out)
    );
    let out = wasmgear(&["config", "echo", "--redis", &url], &[]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("replicas     1 must confirm each enqueue and completion"),
        "{out:?}"
    );
    let out = wasmgear(
        &["config", "echo", "--redis", &url, "--min-replicas", "none"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = wasmgear(&["enqueue", "echo", "x", "--redis", &url], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = wasmgear(
        &[
            "enqueue",
            "echo",
            "x",
            "--redis",
            &url,
            "--min-replicas",
            "1",
            "--min-replicas-timeout",
            "100ms",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));

    // Bad input is refused before anything is written.
    let before = cli(primary, &["hlen", &jobs_key]);
    for args in [
        &["enqueue", "echo", "x", "--min-replicas", "17"][..],
        &["enqueue", "echo", "x", "--min-replicas-timeout", "0s"][..],
        &["config", "echo", "--min-replicas", "0"][..],
    ] {
        let mut all = args.to_vec();
        all.extend(["--redis", &url]);
        let out = wasmgear(&all, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("min-replicas"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert_eq!(
        cli(primary, &["hlen", &jobs_key]),
        before,
        "refused calls wrote nothing"
    );
}

/// The HTTP API's writes wait for the replicas `serve --min-replicas` asks for: with none
/// there, an enqueue is refused with 503 and says why (the job is on the primary, once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_waits_for_the_replicas_serve_asks_for() {
    use crate::http_api::{Server, TOKEN, post};
    let redis = wasmgear_testkit::TestRedis::start();
    let server = Server::start(
        &redis,
        &["--min-replicas", "1", "--min-replicas-timeout", "100ms"],
        &[("WASMGEAR_API_TOKEN", TOKEN)],
    );
    let refused = post(
        &server,
        "/v1/functions/echo/jobs",
        serde_json::json!({ "input": "hello" }),
    )
    .await;
    let body = String::from_utf8_lossy(&refused.body).into_owned();
    assert_eq!(refused.status, 503, "{body}");
    assert!(body.contains("0 of the 1 replicas asked for"), "{body}");
    let jobs = cli(
        redis.port(),
        &["hlen", &FunctionKeys::new(&function("echo")).jobs()],
    );
    assert_eq!(jobs.trim(), "1", "written once");
}
