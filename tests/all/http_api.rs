//! The HTTP API (`wasmgear serve`) end to end: the real binary serving, a real worker
//! running real plugins, a real Redis, and hyper's HTTP client.

use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use wasmgear_testkit::{
    TestRedis, WorkerProcess, eventually, eventually_sync, plugin_dir, stderr, wasmgear,
};

pub(crate) const TOKEN: &str = "t0ken-for-the-tests";

/// A `wasmgear serve` process on a free port.
pub(crate) struct Server {
    pub(crate) process: WorkerProcess,
    pub(crate) address: String,
}

impl Server {
    /// Starts `wasmgear serve --listen 127.0.0.1:0 EXTRA...` against `redis` with `env`,
    /// and waits until it says where it listens.
    pub(crate) fn start(redis: &TestRedis, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let url = redis.url();
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut all_env = vec![("WASMGEAR_REDIS_URL", url.as_str())];
        all_env.extend_from_slice(env);
        let process = WorkerProcess::spawn_command(&args, &all_env);
        // `serve` prints where it listens, on purpose, as the first line of its output once
        // it listens (the only way to learn the port it chose): that line is its readiness.
        let mut address = String::new();
        eventually_sync(Duration::from_secs(30), "the server to listen", || {
            let log = process.log();
            match log
                .lines()
                .find_map(|l| l.strip_prefix("serving the HTTP API on http://"))
            {
                Some(rest) => {
                    address = rest.split_whitespace().next().unwrap_or("").to_string();
                    true
                }
                None => false,
            }
        });
        Server { process, address }
    }

    /// With the tests' token.
    pub(crate) fn with_token(redis: &TestRedis) -> Self {
        Server::start(redis, &[], &[("WASMGEAR_API_TOKEN", TOKEN)])
    }
}

/// A response: status, content type, body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The error class of an error answer.
    fn class(&self) -> String {
        self.json()["error"]["class"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }
}

/// Opens a connection to `address` and sends one request.
pub(crate) async fn send_raw(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> hyper::Response<hyper::body::Incoming> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect to the server");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("HTTP handshake");
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", address);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let request = request
        .body(Full::new(Bytes::from(body)))
        .expect("a request");
    sender.send_request(request).await.expect("a response")
}

/// Sends a request and reads the whole answer.
pub(crate) async fn request(
    server: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let (content_type, bytes) = match body {
        Some(body) => (Some("application/json"), body.to_string().into_bytes()),
        None => (None, Vec::new()),
    };
    let response = send_raw(&server.address, method, path, token, content_type, bytes).await;
    answer(response).await
}

pub(crate) async fn answer(response: hyper::Response<hyper::body::Incoming>) -> Answer {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes()
        .to_vec();
    Answer {
        status,
        content_type,
        body,
    }
}

pub(crate) async fn get(server: &Server, path: &str) -> Answer {
    request(server, "GET", path, Some(TOKEN), None).await
}

pub(crate) async fn post(server: &Server, path: &str, body: Value) -> Answer {
    request(server, "POST", path, Some(TOKEN), Some(body)).await
}

/// Waits for job `id` through the long poll, asking again while it answers 202.
async fn wait_ended(server: &Server, id: &str) -> Value {
    eventually(Duration::from_secs(60), "the job to end", || async {
        let answer = get(server, &format!("/v1/jobs/{id}/wait?timeout_ms=5000")).await;
        match answer.status {
            200 => Some(answer.json()),
            202 => None,
            other => panic!(
                "wait answered {other}: {}",
                String::from_utf8_lossy(&answer.body)
            ),
        }
    })
    .await
}

/// The number of keys in Redis.
async fn key_count(redis: &TestRedis) -> u64 {
    redis::cmd("DBSIZE")
        .query_async(&mut redis.raw().await)
        .await
        .expect("DBSIZE")
}

/// Jobs go in as text, base64 and JSON, one at a time and in bulk, and come out as the
/// worker made them; `wasmgear status --json` and `wait --json` print the very object the
/// API answers for a job (a binary output as base64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_go_in_and_come_out_in_every_form() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let server = Server::with_token(&redis);

    let text = post(
        &server,
        "/v1/functions/echo/jobs",
        json!({ "input": "hello", "priority": 5, "tags": ["api"] }),
    )
    .await;
    assert_eq!(text.status, 201, "{}", String::from_utf8_lossy(&text.body));
    assert_eq!(text.json()["created"], true);
    let text_id = text.json()["id"].as_str().unwrap().to_string();
    let bytes = [0u8, 159, 146, 150, 255];
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    let binary = post(
        &server,
        "/v1/functions/echo/jobs",
        json!({ "input_base64": encoded }),
    )
    .await;
    let binary_id = binary.json()["id"].as_str().unwrap().to_string();
    let structured = post(
        &server,
        "/v1/functions/echo/jobs",
        json!({ "input_json": { "a": [1, 2] } }),
    )
    .await;
    let structured_id = structured.json()["id"].as_str().unwrap().to_string();

    let done = wait_ended(&server, &text_id).await;
    assert_eq!(done["state"], "succeeded");
    assert_eq!(done["output"], "hello");
    assert_eq!(done["priority"], 5);
    assert_eq!(done["tags"], json!(["api"]));
    let done = wait_ended(&server, &binary_id).await;
    assert_eq!(done["output_base64"], encoded.as_str());
    assert!(done.get("output").is_none(), "not UTF-8: no text output");
    let done = wait_ended(&server, &structured_id).await;
    assert_eq!(done["output"], r#"{"a":[1,2]}"#);

    // The same jobs as the CLI shows them: `status --json` and `wait --json` print what
    // the API answers, a binary output as base64.
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let mut apis = Vec::new();
    for id in [&text_id, &binary_id] {
        let out = wasmgear(&["status", id, "--json"], &env);
        let cli: Value = serde_json::from_slice(&out.stdout).expect("status --json");
        let api = get(&server, &format!("/v1/jobs/{id}")).await.json();
        assert_eq!(cli, api, "status --json of {id}");
        apis.push(api);
    }
    assert_eq!(apis[1]["output_base64"], encoded.as_str());
    assert!(apis[1].get("output").is_none(), "not UTF-8: no text output");
    let out = wasmgear(&["wait", &text_id, &binary_id, "--json"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let waited: Value = serde_json::from_slice(&out.stdout).expect("wait --json");
    assert_eq!(waited, Value::Array(apis), "wait --json");

    // Bulk: 500 jobs in one request, in order.
    let jobs: Vec<Value> = (0..500)
        .map(|i| json!({ "input": format!("n{i}") }))
        .collect();
    let bulk = post(&server, "/v1/functions/echo/bulk", json!({ "jobs": jobs })).await;
    assert_eq!(bulk.status, 201, "{}", String::from_utf8_lossy(&bulk.body));
    let ids: Vec<String> = bulk.json()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 500);
    for (i, id) in ids.iter().enumerate().step_by(50) {
        assert_eq!(wait_ended(&server, id).await["output"], format!("n{i}"));
    }
    eventually(Duration::from_secs(60), "every job to succeed", || async {
        let queues = get(&server, "/v1/queues").await.json();
        let echo = queues
            .as_array()?
            .iter()
            .find(|q| q["function"] == "echo")?
            .clone();
        (echo["succeeded"] == 503).then_some(())
    })
    .await;

    // A uniq key held by an unfinished job answers that job.
    let first = post(
        &server,
        "/v1/functions/later/jobs",
        json!({ "input": "x", "uniq": "once" }),
    )
    .await
    .json();
    let again = post(
        &server,
        "/v1/functions/later/jobs",
        json!({ "input": "y", "uniq": "once" }),
    )
    .await
    .json();
    assert_eq!(again["id"], first["id"]);
    assert_eq!(again["created"], false);

    // The operators' views.
    let queues = get(&server, "/v1/queues").await.json();
    let echo = queues
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["function"] == "echo")
        .expect("echo listed")
        .clone();
    assert_eq!(echo["succeeded"], 503);
    assert_eq!(echo["workers"], 1);
    let workers = get(&server, "/v1/workers").await.json();
    assert_eq!(workers.as_array().unwrap().len(), 1);
    let stats = get(&server, "/v1/functions/echo/stats").await;
    assert_eq!(stats.status, 200);
    assert_eq!(stats.json()["run"]["count"], 503);
}

/// Every bad request gets a JSON error of the right class and status, and changes
/// nothing in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_and_change_nothing() {
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let created = post(&server, "/v1/functions/echo/jobs", json!({ "input": "x" })).await;
    assert_eq!(created.status, 201);
    let before = key_count(&redis).await;

    let refused: Vec<(Answer, u16, &str)> = vec![
        (
            request(&server, "GET", "/v1/queues", None, None).await,
            401,
            "unauthorized",
        ),
        (
            request(&server, "GET", "/v1/queues", Some("wrong"), None).await,
            401,
            "unauthorized",
        ),
        (
            request(
                &server,
                "POST",
                "/v1/functions/echo/jobs",
                None,
                Some(json!({ "input": "x" })),
            )
            .await,
            401,
            "unauthorized",
        ),
        (
            answer(
                send_raw(
                    &server.address,
                    "POST",
                    "/v1/functions/echo/jobs",
                    Some(TOKEN),
                    Some("application/json"),
                    b"{\"input\": ".to_vec(),
                )
                .await,
            )
            .await,
            400,
            "bad_input",
        ),
        (
            answer(
                send_raw(
                    &server.address,
                    "POST",
                    "/v1/functions/echo/jobs",
                    Some(TOKEN),
                    Some("text/plain"),
                    b"{\"input\": \"x\"}".to_vec(),
                )
                .await,
            )
            .await,
            415,
            "bad_input",
        ),
        (
            post(
                &server,
                "/v1/functions/bad%20name/jobs",
                json!({ "input": "x" }),
            )
            .await,
            400,
            "bad_input",
        ),
        (
            post(
                &server,
                "/v1/functions/echo/bulk",
                json!({ "jobs": [{ "input": "ok" }, { "input": "x", "timeout_ms": 0 }] }),
            )
            .await,
            400,
            "bad_input",
        ),
        (get(&server, "/v1/jobs/echo:999").await, 404, "not_found"),
        (get(&server, "/v1/jobs/nonsense").await, 400, "bad_input"),
        (
            get(&server, "/v1/functions/unknown/stats").await,
            404,
            "not_found",
        ),
        (
            get(&server, "/v1/failures?function=unknown").await,
            404,
            "not_found",
        ),
        (get(&server, "/v1/no/such/route").await, 404, "not_found"),
        (
            get(&server, "/v1/jobs/echo:1/wait?timeout_ms=abc").await,
            400,
            "bad_input",
        ),
        (
            post(&server, "/v1/jobs/echo:999/cancel", json!({})).await,
            404,
            "not_found",
        ),
    ];
    for (i, (answer, status, class)) in refused.iter().enumerate() {
        assert_eq!(
            (answer.status, answer.class().as_str()),
            (*status, *class),
            "request {i}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        assert!(answer.content_type.starts_with("application/json"));
        assert!(
            !answer.json()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .is_empty()
        );
    }
    // Jobs with a bad field or option: 400, the error naming what is wrong.
    for body in [
        json!({ "input": "x", "input_json": 1 }),
        json!({ "input_base64": "not base64!" }),
        json!({ "input": "x", "priority": 5000 }),
        json!({ "input": "x", "attempts": 0 }),
        json!({ "inptu": "x" }),
    ] {
        let answer = post(&server, "/v1/functions/echo/jobs", body.clone()).await;
        assert_eq!(
            (answer.status, answer.class().as_str()),
            (400, "bad_input"),
            "{body}: {}",
            String::from_utf8_lossy(&answer.body)
        );
    }
    // Well-formed jobs the queue's state refuses: 409, the error saying why.
    for (body, why) in [
        (
            json!({ "input": "x", "after": ["echo:999"] }),
            "does not exist",
        ),
        (json!({ "input": "x", "at_ms": 1_000_000 }), "in the past"),
        // Eleven years ahead of the clock: a time it will be right for, as a past one was.
        (
            json!({ "input": "x", "at_ms": wasmgear_proto::units::now_ms() + 11 * 365 * 86_400_000 }),
            "more than 10 years ahead",
        ),
    ] {
        let answer = post(&server, "/v1/functions/echo/jobs", body.clone()).await;
        assert_eq!(
            (answer.status, answer.class().as_str()),
            (409, "conflict"),
            "{body}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        let message = answer.json()["error"]["message"].to_string();
        assert!(message.contains(why), "{body}: {message}");
    }
    // A body over the input limit (16 MiB) is refused before it is read whole.
    let oversize = vec![b'a'; 16 * 1024 * 1024 + 1024];
    let too_big = answer(
        send_raw(
            &server.address,
            "POST",
            "/v1/functions/echo/jobs",
            Some(TOKEN),
            Some("application/json"),
            oversize,
        )
        .await,
    )
    .await;
    assert_eq!(
        too_big.status,
        413,
        "{}",
        String::from_utf8_lossy(&too_big.body)
    );
    assert_eq!(
        key_count(&redis).await,
        before,
        "a refused request wrote something"
    );
}

/// The events of a Server-Sent Events text: each one's name and its data as JSON.
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let (mut kind, mut data) = (None, None);
            for line in block.lines() {
                if let Some(name) = line.strip_prefix("event: ") {
                    kind = Some(name.to_string());
                } else if let Some(json) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(json).ok();
                }
            }
            Some((kind?, data?))
        })
        .collect()
}

/// Events stream as Server-Sent Events; a long poll answers 202 while the job runs; a
/// running job is cancelled; a failed one is retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_waits_poll_and_jobs_are_cancelled_and_retried() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count", "fail"]);
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let server = Server::with_token(&redis);

    let events = send_raw(
        &server.address,
        "GET",
        "/v1/events?function=count",
        Some(TOKEN),
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(events.status(), 200);
    assert!(
        events.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut events = events.into_body();
    redis.until_subscribed("wg:{count}:events", 1).await;
    // The stream of every function (a pattern subscription) sees both functions' events.
    let all = send_raw(
        &server.address,
        "GET",
        "/v1/events",
        Some(TOKEN),
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(all.status(), 200);
    let mut all = all.into_body();
    redis.until_psubscribed(1).await;

    let id = post(
        &server,
        "/v1/functions/count/jobs",
        json!({ "input": "200 50" }),
    )
    .await
    .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The stream shows the job created, started and making progress.
    let mut seen = String::new();
    let progressed = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(frame)) = events.frame().await {
            if let Some(data) = frame.data_ref() {
                seen.push_str(&String::from_utf8_lossy(data));
            }
            if seen.contains("event: progress") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(progressed, Ok(true), "{seen}");
    assert!(seen.contains("event: create"), "{seen}");
    assert!(seen.contains(&format!("\"id\":\"{id}\"")), "{seen}");
    assert!(seen.contains("\"function\":\"count\""), "{seen}");

    // Still running: the long poll gives up with 202 and the job as it is.
    let polled = get(&server, &format!("/v1/jobs/{id}/wait?timeout_ms=100")).await;
    assert_eq!(polled.status, 202);
    assert_eq!(polled.json()["state"], "running");

    let cancelled = post(&server, &format!("/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(cancelled.json()["outcome"], "stopping");
    let done = wait_ended(&server, &id).await;
    assert_eq!(done["state"], "cancelled");
    let again = post(&server, &format!("/v1/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(again.json()["outcome"], "already-ended");

    // A failed job: in its failure group, its log readable, retried.
    let failed = post(
        &server,
        "/v1/functions/fail/jobs",
        json!({ "input": "boom", "attempts": 1 }),
    )
    .await
    .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(wait_ended(&server, &failed).await["state"], "failed");
    let groups = get(&server, "/v1/failures?function=fail").await.json();
    assert_eq!(groups[0]["count"], 1, "{groups}");
    let logs = get(&server, &format!("/v1/jobs/{failed}/logs")).await;
    assert_eq!(logs.status, 200);
    assert!(String::from_utf8_lossy(&logs.body).contains("attempt 1"));
    let retried = post(&server, &format!("/v1/jobs/{failed}/retry"), json!({})).await;
    assert_eq!(retried.json()["retried"], true);
    let done = wait_ended(&server, &failed).await;
    assert_eq!(done["state"], "failed");
    assert_eq!(done["attempt"], 2);
    // The stream of every function carried the jobs of both, each once created.
    let mut everything = String::new();
    let both = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(frame)) = all.frame().await {
            if let Some(data) = frame.data_ref() {
                everything.push_str(&String::from_utf8_lossy(data));
            }
            if everything.matches("event: finish").count() >= 3 {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(both, Ok(true), "{everything}");
    let events = sse_events(&everything);
    for (job, function) in [(&id, "count"), (&failed, "fail")] {
        let created: Vec<_> = events
            .iter()
            .filter(|(kind, data)| kind == "create" && data["id"] == job.as_str())
            .collect();
        assert_eq!(created.len(), 1, "{job}: {everything}");
        assert_eq!(created[0].1["function"], function, "{everything}");
    }
    // A job that succeeded cannot be retried.
    let fine = post(
        &server,
        "/v1/functions/count/jobs",
        json!({ "input": "1 1" }),
    )
    .await
    .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(wait_ended(&server, &fine).await["state"], "succeeded");
    let refused = post(&server, &format!("/v1/jobs/{fine}/retry"), json!({})).await;
    assert_eq!(
        (refused.status, refused.class().as_str()),
        (409, "conflict")
    );
}

/// The OpenAPI document is served without a token and names exactly the server's routes:
/// each one answers (not "no such route"), and an undocumented one does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_matches_the_routes() {
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let doc = request(&server, "GET", "/openapi.json", None, None).await;
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 26);
    for (path, operations) in paths {
        let mut concrete = path
            .replace("{function}", "echo")
            .replace("{id}", "echo:1")
            .replace("{group}", "acme");
        if concrete.ends_with("/wait") {
            concrete.push_str("?timeout_ms=10");
        }
        for method in operations.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let body = (method == "POST").then(|| json!({}));
            let response = if path == "/v1/events" {
                // A stream: its status and type are enough.
                let response = send_raw(
                    &server.address,
                    "GET",
                    &concrete,
                    Some(TOKEN),
                    None,
                    Vec::new(),
                )
                .await;
                assert_eq!(response.status(), 200, "{path}");
                continue;
            } else {
                request(&server, &method, &concrete, Some(TOKEN), body).await
            };
            let routed = !(response.status == 404
                && response.json()["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("no such route"))
                && response.status != 405;
            assert!(
                routed,
                "{method} {path}: {} {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            );
        }
    }
    let unknown = get(&server, "/v1/jobs").await;
    assert_eq!(unknown.status, 404);
}

/// `serve` refuses to start open to the network or without a token, takes its token from a
/// file, and stops on SIGTERM even with an event stream open and a long poll waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_an_open_api_and_stops_gracefully() {
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let open = wasmgear(
        &["serve", "--listen", "0.0.0.0:0", "--insecure-no-auth"],
        &env,
    );
    assert_eq!(open.status.code(), Some(2), "{}", stderr(&open));
    assert!(stderr(&open).contains("loopback"), "{}", stderr(&open));
    let no_token = wasmgear(&["serve", "--listen", "127.0.0.1:0"], &env);
    assert_eq!(no_token.status.code(), Some(2), "{}", stderr(&no_token));
    assert!(stderr(&no_token).contains("WASMGEAR_API_TOKEN"));

    // The token from a file (trimmed), instead of the environment; a file that cannot be
    // read is refused by name.
    let home = tempfile::tempdir().unwrap();
    let missing = home.path().join("no-such-token");
    let unreadable = wasmgear(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            missing.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(unreadable.status.code(), Some(2), "{}", stderr(&unreadable));
    assert!(
        stderr(&unreadable).contains("cannot read the token file"),
        "{}",
        stderr(&unreadable)
    );
    let token_file = home.path().join("token");
    std::fs::write(&token_file, "  t0ken-from-a-file\n").unwrap();
    let from_file = Server::start(&redis, &["--token-file", token_file.to_str().unwrap()], &[]);
    for (token, status) in [
        (Some("t0ken-from-a-file"), 200),
        (Some(TOKEN), 401),
        (None, 401),
    ] {
        let answer = request(&from_file, "GET", "/v1/queues", token, None).await;
        assert_eq!(answer.status, status, "{token:?}");
    }
    drop(from_file);

    // On loopback without a token: allowed, and open.
    let mut server = Server::start(&redis, &["--insecure-no-auth"], &[]);
    let queues = request(&server, "GET", "/v1/queues", None, None).await;
    assert_eq!(queues.status, 200);
    let stream = send_raw(&server.address, "GET", "/v1/events", None, None, Vec::new()).await;
    assert_eq!(stream.status(), 200);
    let mut body = stream.into_body();
    // A long poll on a job nobody runs, asked to wait two minutes: shutdown answers it at
    // once with the job as it is.
    let queued = request(
        &server,
        "POST",
        "/v1/functions/echo/jobs",
        None,
        Some(json!({ "input": "x" })),
    )
    .await
    .json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let address = server.address.clone();
    let poll = tokio::spawn(async move {
        let path = format!("/v1/jobs/{queued}/wait?timeout_ms=120000");
        answer(send_raw(&address, "GET", &path, None, None, Vec::new()).await).await
    });
    redis.until_subscribed("wg:{echo}:events", 1).await;
    server.process.signal("TERM");
    let polled = tokio::time::timeout(Duration::from_secs(20), poll)
        .await
        .expect("the long poll answers at shutdown")
        .unwrap();
    assert_eq!(polled.status, 202);
    assert_eq!(polled.json()["state"], "queued");
    assert_eq!(
        server.process.wait_exit(Duration::from_secs(20)),
        Some(0),
        "{}",
        server.process.log()
    );
    // The stream ended with the server.
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(Ok(_)) = body.frame().await {}
    })
    .await;
    assert!(ended.is_ok());
}

/// `/healthz` answers while the process is up; `/readyz` turns unhealthy (503) when Redis
/// stops and healthy again once it is back. Neither needs the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_redis() {
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let healthy = request(&server, "GET", "/healthz", None, None).await;
    assert_eq!(healthy.status, 200);
    let ready = request(&server, "GET", "/readyz", None, None).await;
    assert_eq!(
        ready.status,
        200,
        "{}",
        String::from_utf8_lossy(&ready.body)
    );
    assert_eq!(ready.json()["status"], "ready");

    redis.kill();
    let unready = eventually(Duration::from_secs(30), "readyz to say unready", || async {
        let answer = request(&server, "GET", "/readyz", None, None).await;
        (answer.status == 503).then_some(answer)
    })
    .await;
    assert_eq!(unready.json()["status"], "unready");
    assert!(!unready.json()["reason"].as_str().unwrap_or("").is_empty());
    assert_eq!(
        request(&server, "GET", "/healthz", None, None).await.status,
        200
    );

    redis.restart();
    eventually(
        Duration::from_secs(30),
        "readyz to say ready again",
        || async {
            let answer = request(&server, "GET", "/readyz", None, None).await;
            (answer.status == 200).then_some(())
        },
    )
    .await;
}

/// `wasmgear serve --help` says where the dashboard, the metrics and the health checks are;
/// at the start the server prints their URLs, and each of them answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_names_the_dashboard_metrics_and_health_checks() {
    for flag in ["-h", "--help"] {
        let help = wasmgear_testkit::stdout(&wasmgear(&["serve", flag], &[]));
        for path in ["/ui", "/metrics", "/healthz", "/readyz"] {
            assert!(
                help.contains(path),
                "serve {flag} does not name {path}:\n{help}"
            );
        }
    }
    let redis = TestRedis::start();
    // Without a token (on loopback) the dashboard opens without signing in.
    let server = Server::start(&redis, &["--insecure-no-auth"], &[]);
    let printed = server.process.log();
    let urls: Vec<&str> = printed
        .split_whitespace()
        .filter_map(|word| word.strip_prefix(&format!("http://{}", server.address)))
        .collect();
    for path in ["/ui", "/metrics", "/healthz", "/readyz"] {
        assert!(urls.contains(&path), "no URL of {path} printed:\n{printed}");
        let answer = request(&server, "GET", path, None, None).await;
        assert_eq!(
            answer.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&answer.body)
        );
    }
}
