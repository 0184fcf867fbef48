//! OpenTelemetry: a job enqueued in a trace is run in it. Every test exports to a real OTLP
//! receiver (testkit's `OtlpReceiver`, decoding the protocol's protobuf messages over HTTP and
//! gRPC) from real worker processes, and checks the spans it got: the worker's `process`
//! span of each attempt, a child of the producer's context, with its attributes and events;
//! the producers' `send` spans; child jobs and flows in their parent's trace; the trace context
//! on a plugin's outgoing HTTP requests; and jobs running on when the collector is down.

use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmgear_client::{EnqueueOptions, Flow, FlowJob, JobState, TraceContext, propagation};
use wasmgear_testkit::{
    ClosedPort, OtlpReceiver, ReceivedSpan, TestRedis, WorkerProcess, artifact, function,
    plugin_dir, stderr, stdout, wasmgear,
};

use crate::http_api::{Server, TOKEN, answer};

const WAIT: Duration = Duration::from_secs(60);
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{PARENT_SPAN}-01")
}

/// A worker process serving `plugins`, exporting its spans to `receiver` over `protocol`.
fn traced_worker(
    redis: &TestRedis,
    plugins: &std::path::Path,
    receiver: &OtlpReceiver,
    protocol: &str,
) -> WorkerProcess {
    let mut builder = WorkerProcess::builder(&redis.url())
        .plugins(plugins)
        .metrics()
        .env("OTEL_SERVICE_NAME", "traced-worker");
    for (name, value) in receiver.env(protocol) {
        builder = builder.env(&name, &value);
    }
    builder.start()
}

/// The worker's `process` span of job `id`'s attempt `attempt`, once the receiver has it.
async fn process_span(receiver: &OtlpReceiver, id: &str, attempt: u32) -> ReceivedSpan {
    let attempt = attempt.to_string();
    receiver
        .wait_for(WAIT, &format!("the process span of {id}"), |spans| {
            spans
                .iter()
                .find(|s| {
                    s.kind == "consumer"
                        && s.attribute("messaging.message.id") == Some(id)
                        && s.attribute("wasmgear.job.attempt") == Some(attempt.as_str())
                })
                .cloned()
        })
        .await
}

/// A CLI enqueue under `TRACEPARENT` (the CLI itself exporting nothing) is processed in that
/// trace: the worker's span is a child of the given span, of kind consumer, named
/// `process echo`, with the messaging attributes, the outcome, the plugin version and the
/// worker; its events say how long the job waited and when its instance was ready; the
/// guest's run is its child span. Over OTLP/HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_enqueue_under_traceparent_is_processed_in_that_trace() {
    let redis = TestRedis::start();
    let receiver = OtlpReceiver::start();
    let plugins = plugin_dir(&["echo"]);
    let worker = traced_worker(&redis, plugins.path(), &receiver, "http/protobuf");
    let url = redis.url();
    let parent = traceparent();
    let out = wasmgear(
        &["enqueue", "echo", "hi", "--wait"],
        &[("WASMGEAR_REDIS_URL", &url), ("TRACEPARENT", &parent)],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let span = process_span(&receiver, "echo:1", 1).await;
    assert_eq!(span.transport, "http");
    assert_eq!(span.service, "traced-worker");
    assert_eq!(span.name, "process echo");
    assert_eq!(
        (span.trace_id.as_str(), span.parent_span_id.as_str()),
        (TRACE_ID, PARENT_SPAN)
    );
    for (key, value) in [
        ("messaging.system", "wasmgear"),
        ("messaging.operation.type", "process"),
        ("messaging.destination.name", "echo"),
        ("wasmgear.job.outcome", "succeeded"),
    ] {
        assert_eq!(span.attribute(key), Some(value), "{key}: {span:#?}");
    }
    assert!(
        span.attribute("wasmgear.plugin.version")
            .is_some_and(|v| v.len() >= 8),
        "{span:#?}"
    );
    assert!(
        span.attribute("wasmgear.worker.id")
            .is_some_and(|w| !w.is_empty())
    );
    assert!(!span.error);
    let events: Vec<&str> = span.events.iter().map(|(name, _)| name.as_str()).collect();
    assert!(events.contains(&"left the queue"), "{events:?}");
    let run = receiver
        .wait_for(WAIT, "the run span", |spans| {
            spans
                .iter()
                .find(|s| s.name == "run" && s.parent_span_id == span.span_id)
                .cloned()
        })
        .await;
    assert_eq!(run.trace_id, TRACE_ID);
    assert!(
        run.events.iter().any(|(name, _)| name == "instance ready"),
        "{run:#?}"
    );
    // The worker counts what it exported.
    wasmgear_testkit::eventually(WAIT, "the spans counted as exported", || {
        let exported = worker.metric("wasmgear_trace_spans_total", &[("result", "exported")]);
        std::future::ready((exported >= 2.0).then_some(()))
    })
    .await;
}

/// A CLI that exports its own spans (over gRPC) makes a `send echo` span, kind producer, a
/// child of `TRACEPARENT`; the worker's span is a child of that one. A failing job's span
/// says error, with its class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exporting_producer_s_send_span_is_the_worker_span_s_parent() {
    let redis = TestRedis::start();
    let receiver = OtlpReceiver::start();
    let plugins = plugin_dir(&["echo", "fail"]);
    let _worker = traced_worker(&redis, plugins.path(), &receiver, "grpc");
    let url = redis.url();
    let parent = traceparent();
    let mut env: Vec<(String, String)> = receiver.env("grpc");
    env.push(("WASMGEAR_REDIS_URL".into(), url.clone()));
    env.push(("TRACEPARENT".into(), parent.clone()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let out = wasmgear(&["enqueue", "echo", "hi", "--wait"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let send = receiver
        .wait_for(WAIT, "the CLI's send span", |spans| {
            spans.iter().find(|s| s.name == "send echo").cloned()
        })
        .await;
    assert_eq!(send.kind, "producer");
    assert_eq!(send.service, "wasmgear-cli");
    assert_eq!(send.transport, "grpc");
    assert_eq!(
        (send.trace_id.as_str(), send.parent_span_id.as_str()),
        (TRACE_ID, PARENT_SPAN)
    );
    let process = process_span(&receiver, "echo:1", 1).await;
    assert_eq!(process.trace_id, TRACE_ID);
    assert_eq!(process.parent_span_id, send.span_id);

    let out = wasmgear(
        &["enqueue", "fail", "no", "--max-attempts", "1", "--wait"],
        &env,
    );
    assert!(!out.status.success());
    let failed = process_span(&receiver, "fail:1", 1).await;
    assert!(failed.error, "{failed:#?}");
    assert_eq!(failed.attribute("error.type"), Some("guest-error"));
    assert_eq!(failed.attribute("wasmgear.job.outcome"), Some("failed"));
}

/// The Rust client carries the current OpenTelemetry context (here attached by hand; a
/// program exporting through `tracing-opentelemetry` gets its `send` span's), or a context
/// given in the options; a job enqueued outside any trace carries none, and its span is the
/// root of a trace of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_carries_the_current_context_or_the_one_given() {
    let redis = TestRedis::start();
    let receiver = OtlpReceiver::start();
    let plugins = plugin_dir(&["echo"]);
    let _worker = traced_worker(&redis, plugins.path(), &receiver, "http/protobuf");
    let client = redis.client().await;
    let echo = function("echo");
    let given = TraceContext::new(&traceparent(), Some("vendor=value")).unwrap();
    let in_context = {
        let _attached = propagation::context_for(&given).attach();
        client
            .enqueue(&echo, b"attached", &EnqueueOptions::default())
            .await
            .unwrap()
    };
    let explicit = TraceContext::new(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        None,
    )
    .unwrap();
    let options = EnqueueOptions {
        trace: Some(explicit.clone()),
        ..EnqueueOptions::default()
    };
    let named = client.enqueue(&echo, b"given", &options).await.unwrap();
    let untraced = client
        .enqueue(&echo, b"none", &EnqueueOptions::default())
        .await
        .unwrap();
    for id in [&in_context, &named, &untraced] {
        client.wait(id, Some(WAIT), |_| {}).await.unwrap();
    }
    let span = process_span(&receiver, &in_context.to_string(), 1).await;
    assert_eq!(
        (span.trace_id.as_str(), span.parent_span_id.as_str()),
        (TRACE_ID, PARENT_SPAN)
    );
    let span = process_span(&receiver, &named.to_string(), 1).await;
    assert_eq!(
        (span.trace_id.as_str(), span.parent_span_id.as_str()),
        (explicit.trace_id(), explicit.span_id())
    );
    let span = process_span(&receiver, &untraced.to_string(), 1).await;
    assert_eq!(span.parent_span_id, "");
    assert_ne!(span.trace_id, TRACE_ID);
    // A record shows the context it carries.
    let status = client.status(&in_context).await.unwrap();
    assert_eq!(status.record.trace.as_deref(), Some(traceparent().as_str()));
}

/// The HTTP API takes the request's `traceparent` header: the job runs in that trace; a
/// header that is not a traceparent is ignored (the job runs, outside it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_continues_the_request_s_trace() {
    let redis = TestRedis::start();
    let receiver = OtlpReceiver::start();
    let plugins = plugin_dir(&["echo"]);
    let _worker = traced_worker(&redis, plugins.path(), &receiver, "http/protobuf");
    let server = Server::with_token(&redis);
    let enqueue = |traceparent: &'static str| {
        let address = server.address.clone();
        async move {
            let body = serde_json::json!({ "input": "over http" });
            let request = hyper::Request::builder()
                .method("POST")
                .uri("/v1/functions/echo/jobs")
                .header("host", &address)
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .header("traceparent", traceparent)
                .body(http_body_util::Full::new(hyper::body::Bytes::from(
                    body.to_string(),
                )))
                .unwrap();
            let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let answer = answer(sender.send_request(request).await.unwrap()).await;
            assert_eq!(
                answer.status,
                201,
                "{}",
                String::from_utf8_lossy(&answer.body)
            );
            answer.json()["id"].as_str().unwrap().to_string()
        }
    };
    let traced = enqueue("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").await;
    let ignored = enqueue("00-not-a-traceparent").await;
    let span = process_span(&receiver, &traced, 1).await;
    assert_eq!(
        (span.trace_id.as_str(), span.parent_span_id.as_str()),
        (TRACE_ID, PARENT_SPAN)
    );
    let span = process_span(&receiver, &ignored, 1).await;
    assert_ne!(span.trace_id, TRACE_ID);
    // The dashboard's job page shows the trace a job carries.
    use crate::dashboard::{FORM, send};
    let signed_in = send(
        &server,
        "POST",
        "/ui/login",
        &[FORM],
        &format!("token={TOKEN}&next=%2Fui"),
    )
    .await;
    let cookie = signed_in.headers["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_string();
    let page = send(
        &server,
        "GET",
        &format!("/ui/jobs/{}", traced.replace(':', "%3A")),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(TRACE_ID) && page.body.contains(PARENT_SPAN),
        "{}",
        page.body
    );
}

/// A parent's child jobs run in its trace, each a child of the parent attempt's span; a
/// flow's jobs all run in the trace it was submitted in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_jobs_and_a_flow_s_jobs_join_their_trace() {
    let redis = TestRedis::start();
    let receiver = OtlpReceiver::start();
    let plugins = plugin_dir(&["split", "reverse", "join"]);
    std::fs::write(
        plugins.path().join("split.toml"),
        "[jobs]\nenqueue = [\"reverse\"]\n",
    )
    .unwrap();
    let _worker = traced_worker(&redis, plugins.path(), &receiver, "http/protobuf");
    let client = redis.client().await;
    let given = TraceContext::new(&traceparent(), None).unwrap();
    let _attached = propagation::context_for(&given).attach();
    let plan = serde_json::json!({ "function": "reverse", "chunks": ["ab", "cd", "ef"], "fail_first": false });
    let parent = client
        .enqueue(
            &function("split"),
            plan.to_string().as_bytes(),
            &EnqueueOptions::default(),
        )
        .await
        .unwrap();
    let status = client.wait(&parent, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded, "{status:#?}");
    let parent_span = process_span(&receiver, &parent.to_string(), 1).await;
    assert_eq!(parent_span.trace_id, TRACE_ID);
    assert_eq!(status.record.children.len(), 3);
    for child in &status.record.children {
        let span = process_span(&receiver, child, 1).await;
        assert_eq!(span.trace_id, TRACE_ID, "{child}");
        assert_eq!(span.parent_span_id, parent_span.span_id, "{child}");
    }

    let flow = Flow {
        name: "traced".into(),
        jobs: vec![
            FlowJob::new("b", function("join"), b"").after(["a"]),
            FlowJob::new("a", function("reverse"), b"xy"),
        ],
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    client.wait_flow(submitted.id, Some(WAIT)).await.unwrap();
    for (name, id) in &submitted.jobs {
        let span = process_span(&receiver, &id.to_string(), 1).await;
        assert_eq!(span.trace_id, TRACE_ID, "{name}");
    }
}

/// A schedule's ticks each start a trace of their own (a tick is nobody's request), its
/// `tick NAME` span linked to the trace the schedule was added in; the tick's job runs in
/// the tick's trace. A batch's callback runs in the trace the batch was opened in. `status`
/// shows the trace a job carries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_link_to_their_schedule_and_callbacks_join_their_batch() {
    let redis = TestRedis::start();
    let receiver = OtlpReceiver::start();
    let plugins = plugin_dir(&["echo"]);
    let _worker = traced_worker(&redis, plugins.path(), &receiver, "http/protobuf");
    let url = redis.url();
    let parent = traceparent();
    let out = wasmgear(
        &[
            "schedule",
            "add",
            "beat",
            "--function",
            "echo",
            "--every",
            "1s",
        ],
        &[("WASMGEAR_REDIS_URL", &url), ("TRACEPARENT", &parent)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A tick's span, and its job's in the same trace.
    let (tick, job) = receiver
        .wait_for(WAIT, "a tick's span and its job's", |spans| {
            spans
                .iter()
                .filter(|s| s.name == "tick beat")
                .find_map(|tick| {
                    spans
                        .iter()
                        .find(|s| s.kind == "consumer" && s.trace_id == tick.trace_id)
                        .map(|job| (tick.clone(), job.clone()))
                })
        })
        .await;
    assert_eq!(tick.kind, "producer");
    assert_eq!(tick.parent_span_id, "");
    assert_ne!(tick.trace_id, TRACE_ID);
    assert_eq!(
        tick.links,
        vec![(TRACE_ID.to_string(), PARENT_SPAN.to_string())]
    );
    assert_eq!(job.name, "process echo");
    let out = wasmgear(&["schedule", "rm", "beat"], &[("WASMGEAR_REDIS_URL", &url)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let client = redis.client().await;
    let given = TraceContext::new(&parent, None).unwrap();
    let spec = wasmgear_client::BatchSpec {
        name: "traced".into(),
        on_complete: Some(wasmgear_client::Callback {
            function: function("echo"),
            data: None,
        }),
        ..Default::default()
    };
    let (id, _) = {
        let _attached = propagation::context_for(&given).attach();
        client
            .batch(
                &spec,
                &[(
                    function("echo"),
                    &b"in batch"[..],
                    EnqueueOptions::default(),
                )],
            )
            .await
            .unwrap()
    };
    let callback = wasmgear_testkit::eventually(WAIT, "the batch's callback", || async {
        // `due` until the callback job is written: then its id.
        client
            .batch_status(&id)
            .await
            .unwrap()
            .on_complete
            .filter(|c| c != "due")
    })
    .await;
    let span = process_span(&receiver, &callback, 1).await;
    assert_eq!(span.trace_id, TRACE_ID);
    let out = wasmgear(&["status", &callback], &[("WASMGEAR_REDIS_URL", &url)]);
    assert!(
        stdout(&out).contains(&format!(
            "trace     {TRACE_ID} (enqueued in span {PARENT_SPAN})"
        )),
        "{}",
        stdout(&out)
    );
}

/// A plugin's outgoing HTTP request (to a host its manifest allows) carries the job's
/// trace context: `traceparent` names the attempt's span, and `tracestate` comes along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_s_outgoing_request_carries_the_attempt_s_trace_context() {
    let redis = TestRedis::start();
    let receiver = OtlpReceiver::start();
    let service = HeaderRecorder::start();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("chaos"), plugins.path().join("chaos.wasm")).unwrap();
    std::fs::write(
        plugins.path().join("chaos.toml"),
        format!("[http]\nallow = [\"127.0.0.1:{}\"]\n", service.port),
    )
    .unwrap();
    let _worker = traced_worker(&redis, plugins.path(), &receiver, "http/protobuf");
    let client = redis.client().await;
    let options = EnqueueOptions {
        trace: Some(TraceContext::new(&traceparent(), Some("vendor=value")).unwrap()),
        ..EnqueueOptions::default()
    };
    let input = format!("0 127.0.0.1:{} payload", service.port);
    let id = client
        .enqueue(&function("chaos"), input.as_bytes(), &options)
        .await
        .unwrap();
    client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    let span = process_span(&receiver, &id.to_string(), 1).await;
    let headers = service.requests();
    let first = headers
        .first()
        .expect("the plugin's request reached the service");
    assert_eq!(
        first.get("traceparent").map(String::as_str),
        Some(format!("00-{TRACE_ID}-{}-01", span.span_id).as_str()),
        "{headers:?}"
    );
    assert_eq!(
        first.get("tracestate").map(String::as_str),
        Some("vendor=value")
    );
}

/// With the collector down, jobs run on and nothing waits: every job succeeds, and the
/// worker counts the spans it could not send. A bad OTEL variable stops a command before it
/// does anything, naming the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_collector_down_jobs_run_on_and_the_lost_spans_are_counted() {
    let redis = TestRedis::start();
    let closed = ClosedPort::new();
    let plugins = plugin_dir(&["echo"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .metrics()
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("http://127.0.0.1:{}", closed.port()),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "10")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
        .start();
    let client = redis.client().await;
    let options = EnqueueOptions {
        trace: Some(TraceContext::new(&traceparent(), None).unwrap()),
        ..EnqueueOptions::default()
    };
    let jobs: Vec<(&[u8], EnqueueOptions)> =
        (0..200).map(|_| (&b"x"[..], options.clone())).collect();
    let ids = client.enqueue_many(&function("echo"), &jobs).await.unwrap();
    for id in &ids {
        let status = client.wait(id, Some(WAIT), |_| {}).await.unwrap();
        assert_eq!(status.record.state, JobState::Succeeded, "{id}");
    }
    wasmgear_testkit::eventually(WAIT, "the lost spans counted", || {
        let failed = worker.metric("wasmgear_trace_spans_total", &[("result", "failed")]);
        let exported = worker.metric("wasmgear_trace_spans_total", &[("result", "exported")]);
        std::future::ready((failed >= 1.0 && exported == 0.0).then_some(()))
    })
    .await;

    let url = redis.url();
    let out = wasmgear(
        &["enqueue", "echo", "x"],
        &[
            ("WASMGEAR_REDIS_URL", &url),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\": give http/protobuf"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        client
            .status(&format!("echo:{}", ids.len() + 1).parse().unwrap())
            .await
            .ok(),
        None
    );
}

/// Sampling follows `OTEL_TRACES_SAMPLER`: with `always_off` the worker exports no span for
/// a job, and a producer that did not sample its span (flag 00) has the default
/// (parent-based) worker not sample either. (Each worker is stopped before its spans are
/// looked at: a stopping process sends every span it has, so what is missing was never
/// made.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_sampler_and_the_producer_s_decision() {
    let redis = TestRedis::start();
    let receiver = OtlpReceiver::start();
    let plugins = plugin_dir(&["echo"]);
    let mut worker = traced_worker(&redis, plugins.path(), &receiver, "http/protobuf");
    let client = redis.client().await;
    let unsampled = TraceContext::new(&format!("00-{TRACE_ID}-{PARENT_SPAN}-00"), None).unwrap();
    let options = EnqueueOptions {
        trace: Some(unsampled),
        ..EnqueueOptions::default()
    };
    let skipped = client
        .enqueue(&function("echo"), b"a", &options)
        .await
        .unwrap();
    let sampled = client
        .enqueue(&function("echo"), b"b", &EnqueueOptions::default())
        .await
        .unwrap();
    for id in [&skipped, &sampled] {
        let status = client.wait(id, Some(WAIT), |_| {}).await.unwrap();
        assert_eq!(status.record.state, JobState::Succeeded);
    }
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(WAIT), Some(0), "{}", worker.log());
    let spans = receiver.spans();
    let of = |id: &wasmgear_client::JobId| {
        let id = id.to_string();
        spans
            .iter()
            .filter(|s| s.attribute("messaging.message.id") == Some(id.as_str()))
            .count()
    };
    assert_eq!((of(&sampled), of(&skipped)), (1, 0), "{spans:#?}");

    let off = OtlpReceiver::start();
    let mut builder = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .env("OTEL_TRACES_SAMPLER", "always_off");
    for (name, value) in off.env("http/protobuf") {
        builder = builder.env(&name, &value);
    }
    let mut off_worker = builder.start();
    let id = client
        .enqueue(&function("echo"), b"c", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    off_worker.signal("TERM");
    assert_eq!(off_worker.wait_exit(WAIT), Some(0), "{}", off_worker.log());
    assert!(off.spans().is_empty(), "{:#?}", off.spans());
}

/// A service a plugin calls: records each request's headers, answers 200.
struct HeaderRecorder {
    port: u16,
    requests: Arc<Mutex<Vec<std::collections::BTreeMap<String, String>>>>,
}

impl HeaderRecorder {
    fn start() -> HeaderRecorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                record(stream, &recorded);
            }
        });
        HeaderRecorder { port, requests }
    }

    fn requests(&self) -> Vec<std::collections::BTreeMap<String, String>> {
        self.requests.lock().unwrap().clone()
    }
}

fn record(
    mut stream: TcpStream,
    requests: &Mutex<Vec<std::collections::BTreeMap<String, String>>>,
) {
    let Some(text) = wasmgear_testkit::http_peer::read_head(&mut stream) else {
        return;
    };
    let headers = text
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    requests.lock().unwrap().push(headers);
    wasmgear_testkit::http_peer::answer_ok(&mut stream);
}
