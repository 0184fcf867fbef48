//! Batches: jobs of any functions with callbacks, run by three real worker processes.

use std::collections::BTreeMap;
use std::time::Duration;

use wasmgear_client::{
    BatchSpec, Callback, Client, EnqueueOptions, FunctionName, JobId, JobState, QueueError,
};
use wasmgear_testkit::{TestRedis, WorkerProcess, artifact, eventually, function};

const WAIT: Duration = Duration::from_secs(120);

/// Three workers serving `echo`, `fail` and the callbacks' functions (`on_ok` and
/// `on_done`, both `echo`: a callback's output is its input).
fn workers(redis: &TestRedis) -> (Vec<WorkerProcess>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for (plugin, name) in [
        ("echo", "echo"),
        ("fail", "fail"),
        ("echo", "on_ok"),
        ("echo", "on_done"),
    ] {
        std::fs::copy(artifact(plugin), dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    let workers = (0..3)
        .map(|_| {
            WorkerProcess::builder(&redis.url())
                .plugins(dir.path())
                .args(&["--concurrency", "4"])
                .start()
        })
        .collect();
    (workers, dir)
}

fn spec(name: &str) -> BatchSpec {
    BatchSpec {
        name: name.into(),
        on_success: Some(Callback {
            function: function("on_ok"),
            data: Some(serde_json::json!({ "note": name })),
        }),
        on_complete: Some(Callback {
            function: function("on_done"),
            data: None,
        }),
    }
}

/// Every job of `function` there is (the callbacks' functions have no other jobs): their
/// outputs, as JSON.
async fn callbacks(client: &Client, function: &FunctionName) -> Vec<serde_json::Value> {
    let mut outputs = Vec::new();
    for seq in 1.. {
        let id = JobId {
            function: function.clone(),
            seq,
        };
        match client.wait(&id, Some(WAIT), |_| {}).await {
            Ok(status) => {
                assert_eq!(status.record.state, JobState::Succeeded);
                outputs.push(serde_json::from_slice(&status.output.unwrap()).unwrap());
            }
            Err(QueueError::NoSuchJob(_)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    outputs
}

/// Twenty batches of short jobs, ending together on three workers, half of them with a
/// failing job: each batch gets exactly one `on_complete` callback, and exactly one
/// `on_success` if (and only if) every job succeeded; each callback's input has the counts
/// and the failed jobs' ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_batch_gets_exactly_one_callback_of_each_kind_under_three_workers() {
    let redis = TestRedis::start();
    let (_workers, _plugins) = workers(&redis);
    let client = redis.client().await;
    let mut batches = BTreeMap::new();
    for b in 0..20 {
        let mut jobs: Vec<(FunctionName, Vec<u8>)> = (0..10)
            .map(|j| (function("echo"), format!("{b}-{j}").into_bytes()))
            .collect();
        let failing = b % 2 == 1;
        if failing {
            jobs.push((function("fail"), b"no".to_vec()));
        }
        let once = EnqueueOptions {
            max_attempts: Some(1),
            ..EnqueueOptions::default()
        };
        let borrowed: Vec<(FunctionName, &[u8], EnqueueOptions)> = jobs
            .iter()
            .map(|(f, input)| (f.clone(), input.as_slice(), once.clone()))
            .collect();
        let (id, ids) = client
            .batch(&spec(&format!("b{b}")), &borrowed)
            .await
            .unwrap();
        batches.insert(id, (failing, ids));
    }
    // Every batch ends; then the callbacks are all there.
    for id in batches.keys() {
        eventually(
            WAIT,
            "the batch to end with its callbacks enqueued",
            || async {
                let status = client.batch_status(id).await.unwrap();
                (status.ended_ms.is_some()
                    && status.on_complete.as_deref().is_some_and(|c| c != "due"))
                .then_some(())
            },
        )
        .await;
    }
    let completes = callbacks(&client, &function("on_done")).await;
    let successes = callbacks(&client, &function("on_ok")).await;
    assert_eq!(completes.len(), 20, "{completes:?}");
    assert_eq!(successes.len(), 10, "{successes:?}");
    for (id, (failing, ids)) in &batches {
        let complete: Vec<_> = completes
            .iter()
            .filter(|c| c["batch"] == id.as_str())
            .collect();
        assert_eq!(complete.len(), 1, "batch {id}");
        let complete = complete[0];
        assert_eq!(complete["total"], ids.len());
        let success: Vec<_> = successes
            .iter()
            .filter(|c| c["batch"] == id.as_str())
            .collect();
        if *failing {
            assert!(success.is_empty(), "batch {id}");
            assert_eq!(complete["failed"], 1);
            assert_eq!(complete["succeeded"], 10);
            assert_eq!(
                complete["failed_ids"],
                serde_json::json!([ids.last().unwrap().to_string()])
            );
        } else {
            assert_eq!(success.len(), 1, "batch {id}");
            assert_eq!(success[0]["succeeded"], 10);
            assert_eq!(success[0]["data"]["note"], complete["name"]);
        }
        let status = client.batch_status(id).await.unwrap();
        assert_eq!(status.pending, 0);
        assert!(!status.open);
    }
}

/// A batch filled in two calls while open: its status counts what was added and what has
/// ended; a job added to a closed batch is refused before anything is written; a closed
/// batch with no job left fires its callbacks at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_filled_while_open_and_closed_once() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let id = client.open_batch(&spec("filled")).await.unwrap();
    let later = EnqueueOptions {
        delay: Duration::from_secs(3600),
        ..EnqueueOptions::default()
    };
    let first = client
        .add_to_batch(&id, &[(function("echo"), b"a".as_slice(), later.clone())])
        .await
        .unwrap();
    client
        .add_to_batch(
            &id,
            &[
                (function("echo"), b"b".as_slice(), later.clone()),
                (function("fail"), b"c".as_slice(), later.clone()),
            ],
        )
        .await
        .unwrap();
    let status = client.batch_status(&id).await.unwrap();
    assert_eq!((status.open, status.total, status.pending), (true, 3, 3));
    client.close_batch(&id).await.unwrap();
    let refused = client
        .add_to_batch(
            &id,
            &[(function("echo"), b"late".as_slice(), later.clone())],
        )
        .await
        .unwrap_err();
    assert!(matches!(refused, QueueError::Conflict(_)), "{refused:?}");
    // The refused job was never written (its number was reserved, not used).
    assert!(matches!(
        client
            .status(&JobId {
                function: function("echo"),
                seq: 4
            })
            .await,
        Err(QueueError::NoSuchJob(_))
    ));
    assert_eq!(
        client.cancel(&first[0]).await.unwrap(),
        wasmgear_client::CancelOutcome::Cancelled
    );
    let status = client.batch_status(&id).await.unwrap();
    assert_eq!((status.cancelled, status.pending), (1, 2));
    assert!(matches!(
        client.batch_status("abc123").await,
        Err(QueueError::NoSuchBatch(_))
    ));

    let (_workers, _plugins) = workers(&redis);
    let (empty, _) = client.batch(&spec("empty"), &[]).await.unwrap();
    let status = client.batch_status(&empty).await.unwrap();
    assert!(status.ended_ms.is_some());
    let ok: JobId = status.on_success.unwrap().parse().unwrap();
    let output = client
        .wait(&ok, Some(WAIT), |_| {})
        .await
        .unwrap()
        .output
        .unwrap();
    let input: serde_json::Value = serde_json::from_slice(&output).unwrap();
    assert_eq!(
        (input["total"].as_u64(), input["callback"].as_str()),
        (Some(0), Some("success"))
    );
}

/// The CLI (`wasmgear batch run`, `status`) and the HTTP API (`POST /v1/batches`, adding
/// while open, closing, `GET /v1/batches/{id}`) make the same batches, callbacks included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_the_http_api_run_batches_with_callbacks() {
    use crate::http_api::{Server, get, post};
    use wasmgear_testkit::{stderr, stdout, wasmgear_with_stdin};
    let redis = TestRedis::start();
    let (_workers, _plugins) = workers(&redis);
    let client = redis.client().await;
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let lines = "{\"function\": \"echo\", \"input\": \"one\"}\n{\"function\": \"echo\", \"input\": \"two\"}\n";
    let out = wasmgear_with_stdin(
        &[
            "batch",
            "run",
            "--name",
            "cli",
            "--on-complete",
            "on_done",
            "--data",
            "{\"k\": 1}",
            "--json",
        ],
        &env,
        lines.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let made: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let id = made["id"].as_str().unwrap().to_string();
    assert_eq!(made["jobs"].as_array().unwrap().len(), 2);
    let done = eventually(WAIT, "the CLI batch's callback", || async {
        client
            .batch_status(&id)
            .await
            .unwrap()
            .on_complete
            .filter(|c| c != "due")
    })
    .await;
    let done: JobId = done.parse().unwrap();
    let input: serde_json::Value = serde_json::from_slice(
        &client
            .wait(&done, Some(WAIT), |_| {})
            .await
            .unwrap()
            .output
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (input["succeeded"].as_u64(), input["data"]["k"].as_u64()),
        (Some(2), Some(1))
    );
    let out = wasmgear_testkit::wasmgear(&["batch", "status", &id], &env);
    assert!(
        stdout(&out).contains("2 in all: 0 pending, 2 succeeded, 0 failed, 0 cancelled"),
        "{}",
        stdout(&out)
    );

    let server = Server::with_token(&redis);
    // A body that is not an object is refused, nothing opened.
    let refused = post(&server, "/v1/batches", serde_json::json!([])).await;
    assert_eq!(refused.status, 400, "{}", refused.json());
    let opened = post(
        &server,
        "/v1/batches",
        serde_json::json!({ "name": "api", "open": true,
            "on_success": { "function": "on_ok" },
            "jobs": [ { "function": "echo", "input": "x" } ] }),
    )
    .await;
    assert_eq!(opened.status, 201, "{}", opened.json());
    let id = opened.json()["id"].as_str().unwrap().to_string();
    let added = post(
        &server,
        &format!("/v1/batches/{id}/jobs"),
        serde_json::json!({ "jobs": [ { "function": "echo", "input_json": [1, 2] } ] }),
    )
    .await;
    assert_eq!(added.status, 201);
    let status = get(&server, &format!("/v1/batches/{id}")).await.json();
    assert_eq!(
        (status["open"].as_bool(), status["total"].as_u64()),
        (Some(true), Some(2))
    );
    let closed = post(
        &server,
        &format!("/v1/batches/{id}/close"),
        serde_json::json!({}),
    )
    .await;
    assert_eq!(closed.status, 200);
    let late = post(
        &server,
        &format!("/v1/batches/{id}/jobs"),
        serde_json::json!({ "jobs": [ { "function": "echo" } ] }),
    )
    .await;
    assert_eq!(late.status, 409);
    eventually(WAIT, "the API batch's on_success", || async {
        let status = get(&server, &format!("/v1/batches/{id}")).await.json();
        status["on_success"]
            .as_str()
            .filter(|s| *s != "due")
            .map(str::to_string)
    })
    .await;
    assert_eq!(get(&server, "/v1/batches/0123abcd").await.status, 404);
}

/// The dashboard shows a batch (its counts and callbacks, linked), lists those not ended,
/// finds one by id, and a batch's job links back to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_batches() {
    use crate::dashboard::{send, sign_in};
    use crate::http_api::Server;
    let redis = TestRedis::start();
    let client = redis.client().await;
    let later = EnqueueOptions {
        delay: Duration::from_secs(3600),
        ..EnqueueOptions::default()
    };
    let (waiting, ids) = client
        .batch(
            &spec("shown"),
            &[(function("echo"), b"x".as_slice(), later)],
        )
        .await
        .unwrap();
    let server = Server::with_token(&redis);
    let cookie = sign_in(&server).await;
    let get = |path: String| {
        let (server, cookie) = (&server, cookie.clone());
        async move { send(server, "GET", &path, &[("cookie", &cookie)], "").await }
    };
    let list = get("/ui/batches".into()).await;
    assert!(
        list.body
            .contains(&format!("href=\"/ui/batches/{waiting}\"")),
        "{}",
        list.body
    );
    let found = get(format!("/ui/batches?id={waiting}")).await;
    assert_eq!(found.status, 303);
    let page = get(format!("/ui/batches/{waiting}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("<td>1</td>") && page.body.contains("closed"),
        "{}",
        page.body
    );
    let job = get(format!(
        "/ui/jobs/{}",
        ids[0].to_string().replace(':', "%3A")
    ))
    .await;
    assert!(
        job.body
            .contains(&format!("href=\"/ui/batches/{waiting}\"")),
        "{}",
        job.body
    );

    let (_workers, _plugins) = workers(&redis);
    let (done, _) = client
        .batch(
            &spec("done"),
            &[(function("echo"), b"y".as_slice(), EnqueueOptions::default())],
        )
        .await
        .unwrap();
    let callback = eventually(WAIT, "the callbacks", || async {
        client
            .batch_status(&done)
            .await
            .unwrap()
            .on_success
            .filter(|c| c != "due")
    })
    .await;
    let page = get(format!("/ui/batches/{done}")).await;
    assert!(
        page.body
            .contains(&format!("/ui/jobs/{}", callback.replace(':', "%3A"))),
        "{}",
        page.body
    );
    assert_eq!(get("/ui/batches/nothex".into()).await.status, 400);
    assert_eq!(get("/ui/batches/0123abcd".into()).await.status, 404);
}
