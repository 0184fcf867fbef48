//! Section `clients`: enqueues per second through the Python and Node client libraries and
//! through the HTTP API (`wasmgear serve`), next to BullMQ's `add` and `addBulk`; and what
//! waiting for a job through the HTTP API costs against a direct wait.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;
use wasmgear_client::{Client, EnqueueOptions};
use wasmgear_proto::FunctionName;

use super::{Plan, Row, ms, per_s, percentiles, row, start_node, times};

/// What one language's client did: enqueues/s one at a time and in bulk.
struct Rates {
    single: f64,
    bulk: f64,
}

/// Runs `program script url single bulk` and reads the rates it prints as JSON.
fn run_driver(program: &str, script: &str, url: &str, plan: &Plan) -> Option<Rates> {
    let out = std::process::Command::new(program)
        .arg(super::common::repo().join(script))
        .arg(url)
        .arg(plan.single.to_string())
        .arg(plan.jobs.to_string())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| eprintln!("cannot run {program} {script}: {e}"))
        .ok()?;
    if !out.status.success() {
        eprintln!("{program} {script} failed");
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(Rates {
        single: json["single_per_s"].as_f64()?,
        bulk: json["bulk_per_s"].as_f64()?,
    })
}

/// One HTTP/1.1 connection kept open, as a client of the API would keep it.
struct Http {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
}

impl Http {
    async fn connect(address: &str) -> Http {
        let stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection);
        Http {
            sender,
            host: address.to_string(),
        }
    }

    /// Sends a request; the status and the body.
    async fn send(&mut self, method: &str, path: &str, body: Option<String>) -> (u16, Bytes) {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .unwrap();
        self.sender.ready().await.unwrap();
        let response = self.sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    }

    /// Enqueues one job of `function`; its id.
    async fn enqueue(&mut self, function: &str) -> String {
        let (status, body) = self
            .send(
                "POST",
                &format!("/v1/functions/{function}/jobs"),
                Some(r#"{"input":"x"}"#.to_string()),
            )
            .await;
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        answer["id"].as_str().unwrap().to_string()
    }
}

pub(super) async fn clients(
    plan: &Plan,
    url: &str,
    bullmq: Option<&serde_json::Value>,
    rows: &mut Vec<Row>,
) {
    let peer = |key: &str| bullmq.and_then(|b| b.get(key)?.as_f64());
    let (add, add_bulk) = (peer("add_single_per_s"), peer("add_bulk_per_s"));
    let mut push = |what: String, ours: f64, theirs: Option<f64>| {
        rows.push(row(
            what,
            per_s(ours),
            theirs.map_or("-".into(), per_s),
            theirs.map_or("-".into(), |b| times(ours, b)),
        ));
    };

    let python = std::env::var("HOME").unwrap_or_default()
        + "/.cache/wasmgear-tools/python-client-venv/bin/python";
    let drivers = [
        ("Python client", python.as_str(), "bench/clients/enqueue.py"),
        ("Node.js client", "node", "bench/clients/enqueue.js"),
    ];
    for (label, program, script) in drivers {
        let Some(rates) = run_driver(program, script, url, plan) else {
            continue;
        };
        push(
            format!("enqueue one at a time, {label} (BullMQ add)"),
            rates.single,
            add,
        );
        push(
            format!("enqueue {} in bulk, {label} (BullMQ addBulk)", plan.jobs),
            rates.bulk,
            add_bulk,
        );
    }

    // The CLI's bulk: `wasmgear bulk FILE` of JSON lines, the process timed whole (start,
    // connect, check every line, enqueue, print the ids).
    let lines = tempfile::NamedTempFile::new().unwrap();
    let line = "{\"function\":\"bench-cli-bulk\",\"input\":\"x\"}\n";
    std::fs::write(lines.path(), line.repeat(plan.jobs)).unwrap();
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wasmgear"))
        .arg("bulk")
        .arg(lines.path())
        .env("WASMGEAR_REDIS_URL", url)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    let took = started.elapsed();
    if out.status.success() && out.stdout.iter().filter(|b| **b == b'\n').count() == plan.jobs {
        push(
            format!(
                "enqueue {} in bulk, CLI: wasmgear bulk FILE, the whole process (BullMQ addBulk)",
                plan.jobs
            ),
            plan.jobs as f64 / took.as_secs_f64(),
            add_bulk,
        );
    } else {
        eprintln!("wasmgear bulk failed: {}", out.status);
    }

    // The HTTP API, served from this process, over one kept-alive connection.
    let client = Client::connect(url).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(wasmgear_server::serve(
        listener,
        client.clone(),
        wasmgear_server::Auth::None,
        shutdown.clone(),
        wasmgear_client::options::MAX_INPUT_BYTES,
    ));
    let mut http = Http::connect(&address).await;
    let started = Instant::now();
    for _ in 0..plan.single {
        http.enqueue("bench-http-single").await;
    }
    push(
        "enqueue one at a time, HTTP API, one connection (BullMQ add)".into(),
        plan.single as f64 / started.elapsed().as_secs_f64(),
        add,
    );
    let batch = format!(
        r#"{{"jobs":[{}]}}"#,
        vec![r#"{"input":"x"}"#; 1000].join(",")
    );
    let started = Instant::now();
    for _ in 0..plan.jobs.div_ceil(1000) {
        let (status, body) = http
            .send(
                "POST",
                "/v1/functions/bench-http-bulk/bulk",
                Some(batch.clone()),
            )
            .await;
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    }
    push(
        format!(
            "enqueue {} in bulk, HTTP API, 1000 per request (BullMQ addBulk)",
            plan.jobs.div_ceil(1000) * 1000
        ),
        (plan.jobs.div_ceil(1000) * 1000) as f64 / started.elapsed().as_secs_f64(),
        add_bulk,
    );

    // Enqueue and wait for one echo job at a time, an idle worker serving it: directly with
    // the Rust client, and through the API (POST, then the long poll).
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasmgear_test_artifacts::ECHO,
        plugins.path().join("echo-wait.wasm"),
    )
    .unwrap();
    let node = start_node(url, plugins.path(), 1).await;
    let echo = FunctionName::new("echo-wait").unwrap();
    let (mut direct, mut through_http) = (Vec::new(), Vec::new());
    for _ in 0..plan.latency {
        let started = Instant::now();
        let id = client
            .enqueue(&echo, b"x", &EnqueueOptions::default())
            .await
            .unwrap();
        client
            .wait(&id, Some(Duration::from_secs(30)), |_| {})
            .await
            .unwrap();
        direct.push(started.elapsed());
        let started = Instant::now();
        let id = http.enqueue("echo-wait").await;
        let (status, _) = http
            .send("GET", &format!("/v1/jobs/{id}/wait?timeout_ms=30000"), None)
            .await;
        assert_eq!(status, 200);
        through_http.push(started.elapsed());
    }
    node.stop().await;
    let (direct_p50, direct_p99) = percentiles(&mut direct);
    let (http_p50, http_p99) = percentiles(&mut through_http);
    rows.push(row(
        "enqueue + wait for an echo job, p50 / p99: HTTP API (peer: the Rust client directly)",
        format!("{} / {}", ms(http_p50), ms(http_p99)),
        format!("{} / {}", ms(direct_p50), ms(direct_p99)),
        format!("+{} at p50", ms(http_p50.saturating_sub(direct_p50))),
    ));
    shutdown.cancel();
    let _ = server.await;
}
