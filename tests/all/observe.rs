//! What operators watch: a worker's `--metrics` address (`/metrics`, `/healthz`, `/readyz`),
//! `serve`'s `/metrics`, and the warning about a Redis that may evict keys. Metrics are read
//! with a parser of the Prometheus text format.

use std::time::Duration;

use wasmgear_client::EnqueueOptions;

use crate::http_api::{Answer, Server, TOKEN, answer, request, send_raw};
use wasmgear_testkit::{TestRedis, WorkerProcess, eventually, function, plugin_dir};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));

/// A worker serving `plugins` with `--metrics 127.0.0.1:0`, and the address it metrics on.
pub(crate) fn worker_with_metrics(
    redis: &TestRedis,
    plugins: &std::path::Path,
    extra: &[&str],
) -> (WorkerProcess, String) {
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins)
        .args(&["--concurrency", "4"])
        .args(extra)
        .metrics()
        .start();
    let address = worker.metrics_address();
    (worker, address)
}

pub(crate) async fn get_at(address: &str, path: &str) -> Answer {
    answer(send_raw(address, "GET", path, None, None, Vec::new()).await).await
}

/// The samples of a scrape, parsed as Prometheus does.
pub(crate) struct Scrape(prometheus_parse::Scrape);

impl Scrape {
    pub(crate) fn parse(answer: &Answer) -> Self {
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        assert!(
            answer.content_type.starts_with("text/plain; version=0.0.4"),
            "{}",
            answer.content_type
        );
        let text = String::from_utf8(answer.body.clone()).expect("UTF-8 metrics");
        let lines = text.lines().map(|l| Ok(l.to_string()));
        Scrape(prometheus_parse::Scrape::parse(lines).expect("the Prometheus text format"))
    }

    /// The value of `metric` with (at least) `labels`; `None` when no sample has them.
    fn value(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0
            .samples
            .iter()
            .filter(|s| s.metric == metric)
            .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match &s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => *v,
                prometheus_parse::Value::Histogram(buckets) => {
                    buckets.iter().map(|b| b.count).fold(0.0, f64::max)
                }
                prometheus_parse::Value::Summary(_) => f64::NAN,
            })
    }

    pub(crate) fn of(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(metric, labels)
            .unwrap_or_else(|| panic!("no sample {metric} {labels:?}"))
    }
}

/// The counters and histograms move with jobs run, failed and plugins (re)loaded; the
/// gauges say what the worker has now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_metrics_move_with_jobs_and_plugins() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo", "fail"]);
    let (worker, address) = worker_with_metrics(&redis, plugins.path(), &[]);
    let before = Scrape::parse(&get_at(&address, "/metrics").await);
    assert_eq!(
        before.value("wasmgear_jobs_started_total", &[("function", "echo")]),
        None
    );
    assert_eq!(before.of("wasmgear_plugins_loaded", &[]), 2.0);
    assert_eq!(
        before.of("wasmgear_plugin_loads_total", &[("result", "loaded")]),
        2.0
    );

    let client = redis.client().await;
    for _ in 0..3 {
        let id = client
            .enqueue(&function("echo"), b"hi", &EnqueueOptions::default())
            .await
            .unwrap();
        client.wait(&id, WAIT, |_| {}).await.unwrap();
    }
    let once = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let id = client
        .enqueue(&function("fail"), b"no", &once)
        .await
        .unwrap();
    client.wait(&id, WAIT, |_| {}).await.unwrap();

    // A job's end is visible to the client as soon as Redis has it; the worker counts it once
    // the report's reply is back (its `state` label is the queue's answer), a moment later.
    let after = eventually(
        Duration::from_secs(30),
        "the worker to count the four jobs' ends",
        || async {
            let scrape = Scrape::parse(&get_at(&address, "/metrics").await);
            let failed = [
                ("function", "fail"),
                ("state", "failed"),
                ("error_class", "guest-error"),
            ];
            let counted = scrape.value("wasmgear_jobs_finished_total", &failed) == Some(1.0)
                && scrape.value("wasmgear_running_jobs", &[]) == Some(0.0);
            counted.then_some(scrape)
        },
    )
    .await;
    let echo = [("function", "echo")];
    assert_eq!(after.of("wasmgear_jobs_started_total", &echo), 3.0);
    assert_eq!(
        after.of(
            "wasmgear_jobs_finished_total",
            &[
                ("function", "echo"),
                ("state", "succeeded"),
                ("error_class", "none")
            ]
        ),
        3.0
    );
    assert_eq!(
        after.of(
            "wasmgear_jobs_finished_total",
            &[
                ("function", "fail"),
                ("state", "failed"),
                ("error_class", "guest-error")
            ]
        ),
        1.0
    );
    assert_eq!(after.of("wasmgear_job_run_seconds_count", &echo), 3.0);
    assert_eq!(
        after.of("wasmgear_job_queue_wait_seconds_count", &echo),
        3.0
    );
    // Each echo instance has its initial memory (data and a 128 KiB stack) at least.
    assert_eq!(after.of("wasmgear_job_memory_bytes_count", &echo), 3.0);
    let memory = after.of("wasmgear_job_memory_bytes_sum", &echo) / 3.0;
    assert!((131_072.0..16e6).contains(&memory), "{memory}");
    assert_eq!(after.of("wasmgear_instantiate_seconds_count", &[]), 4.0);
    assert!(after.of("wasmgear_instantiate_seconds_sum", &[]) > 0.0);
    assert_eq!(
        after.of(
            "wasmgear_source_round_trip_seconds_count",
            &[("operation", "report")]
        ),
        4.0
    );
    assert!(
        after.of(
            "wasmgear_source_round_trip_seconds_count",
            &[("operation", "lease")]
        ) >= 1.0
    );
    for operation in [
        "lease",
        "report",
        "heartbeat",
        "progress",
        "advertise",
        "maintain",
    ] {
        let labels = [("operation", operation)];
        assert_eq!(
            after.value("wasmgear_source_errors_total", &labels),
            Some(0.0)
        );
    }
    assert_eq!(after.of("wasmgear_running_jobs", &[]), 0.0);
    assert_eq!(after.of("wasmgear_free_slots", &[]), 4.0);
    assert_eq!(after.of("wasmgear_concurrency", &[]), 4.0);
    assert!(after.of("wasmgear_resident_memory_bytes", &[]) > 1e6);
    assert!(after.of("wasmgear_seconds_since_last_lease", &[]) < 60.0);

    // A new version of a plugin is a reload; a file that is no component is a failure.
    std::fs::copy(
        wasmgear_testkit::artifact("reverse"),
        plugins.path().join("echo.wasm"),
    )
    .unwrap();
    std::fs::write(plugins.path().join("broken.wasm"), b"not wasm").unwrap();
    let reloaded = eventually(
        Duration::from_secs(30),
        "the reload to be counted",
        || async {
            let scrape = Scrape::parse(&get_at(&address, "/metrics").await);
            let reloaded = scrape.of("wasmgear_plugin_loads_total", &[("result", "reloaded")]);
            let failed = scrape.of("wasmgear_plugin_loads_total", &[("result", "failed")]);
            (reloaded == 1.0 && failed >= 1.0).then_some(scrape)
        },
    )
    .await;
    assert_eq!(reloaded.of("wasmgear_plugins_loaded", &[]), 2.0);
    drop(worker);
}

/// `/readyz` turns unready when Redis stops and ready again once it is back, `/healthz` stays
/// up throughout, and the outage shows in the errors and reconnections counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_readiness_follows_redis() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let (worker, address) = worker_with_metrics(&redis, plugins.path(), &[]);
    let healthy = get_at(&address, "/healthz").await;
    assert_eq!(healthy.status, 200);
    assert_eq!(healthy.json()["status"], "ok");
    let ready = get_at(&address, "/readyz").await;
    assert_eq!(
        ready.status,
        200,
        "{}",
        String::from_utf8_lossy(&ready.body)
    );
    assert_eq!(ready.json()["status"], "ready");

    redis.kill();
    let unready = eventually(Duration::from_secs(30), "readyz to say unready", || async {
        let answer = get_at(&address, "/readyz").await;
        (answer.status == 503).then_some(answer)
    })
    .await;
    assert_eq!(unready.json()["status"], "unready");
    let reason = unready.json()["reason"].as_str().unwrap_or("").to_string();
    assert!(reason.contains("the queue does not answer"), "{reason}");
    assert_eq!(get_at(&address, "/healthz").await.status, 200);
    // Its calls to Redis fail meanwhile (its advertisement first: a lease call is sent
    // again a few times before it fails).
    eventually(
        Duration::from_secs(60),
        "an error to be counted",
        || async {
            let scrape = Scrape::parse(&get_at(&address, "/metrics").await);
            let errors: f64 = scrape
                .0
                .samples
                .iter()
                .filter(|s| s.metric == "wasmgear_source_errors_total")
                .map(|s| match s.value {
                    prometheus_parse::Value::Counter(v) => v,
                    _ => 0.0,
                })
                .sum();
            (errors >= 1.0).then_some(())
        },
    )
    .await;

    redis.restart();
    eventually(
        Duration::from_secs(30),
        "readyz to say ready again",
        || async {
            let answer = get_at(&address, "/readyz").await;
            (answer.status == 200).then_some(())
        },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the reconnection to be counted",
        || async {
            let scrape = Scrape::parse(&get_at(&address, "/metrics").await);
            (scrape.of("wasmgear_source_reconnects_total", &[]) >= 1.0).then_some(())
        },
    )
    .await;
    drop(worker);
}

/// `serve`'s `/metrics` needs the token and shows the queue's depths by function and state,
/// paused functions, live workers, and its own requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_metrics_show_the_queue() {
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let client = redis.client().await;
    let nobody = function("nobody-serves-this");
    for _ in 0..2 {
        client
            .enqueue(&nobody, b"x", &EnqueueOptions::default())
            .await
            .unwrap();
    }
    let later = EnqueueOptions {
        delay: Duration::from_secs(3600),
        ..EnqueueOptions::default()
    };
    client.enqueue(&nobody, b"x", &later).await.unwrap();
    let url = redis.url();
    let paused = wasmgear_testkit::wasmgear(
        &["pause", "nobody-serves-this"],
        &[("WASMGEAR_REDIS_URL", url.as_str())],
    );
    assert_eq!(paused.status.code(), Some(0), "{paused:?}");
    assert_eq!(
        request(&server, "GET", "/metrics", None, None).await.status,
        401
    );
    // One request the server counts before the scrape.
    assert_eq!(
        request(&server, "GET", "/v1/queues", Some(TOKEN), None)
            .await
            .status,
        200
    );

    let scrape = Scrape::parse(&request(&server, "GET", "/metrics", Some(TOKEN), None).await);
    let of = |state: &str| {
        scrape.of(
            "wasmgear_queue_jobs",
            &[("function", "nobody-serves-this"), ("state", state)],
        )
    };
    assert_eq!(of("queued"), 2.0);
    assert_eq!(of("scheduled"), 1.0);
    assert_eq!(of("running"), 0.0);
    assert_eq!(of("succeeded"), 0.0);
    let function = [("function", "nobody-serves-this")];
    assert_eq!(scrape.of("wasmgear_queue_paused", &function), 1.0);
    assert_eq!(scrape.of("wasmgear_queue_workers", &function), 0.0);
    assert_eq!(
        scrape.of(
            "wasmgear_http_requests_total",
            &[
                ("method", "GET"),
                ("route", "/v1/queues"),
                ("status", "200")
            ]
        ),
        1.0
    );
    assert_eq!(
        scrape.of(
            "wasmgear_http_requests_total",
            &[("route", "/metrics"), ("status", "401")]
        ),
        1.0
    );
}

/// A worker and `serve` warn at start when Redis may evict keys, and say how to fix it;
/// with Redis' default policy (`noeviction`) they do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_may_evict_keys_is_warned_about() {
    let evicting = TestRedis::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let plugins = plugin_dir(&["echo"]);
    let worker = WorkerProcess::builder(&evicting.url())
        .plugins(plugins.path())
        .start();
    // The warnings are the behaviour under test; each is logged when Redis is first
    // reached, before the worker serves and before `serve` says where it listens.
    let log = worker.log();
    assert!(
        log.contains("WARN") && log.contains("maxmemory-policy is allkeys-lru"),
        "{log}"
    );
    assert!(log.contains("maxmemory-policy noeviction"), "{log}");
    let server = Server::with_token(&evicting);
    let server_log = server.process.log();
    assert!(
        server_log.contains("WARN") && server_log.contains("maxmemory-policy is allkeys-lru"),
        "{server_log}"
    );

    let safe = TestRedis::start();
    let quiet = WorkerProcess::builder(&safe.url())
        .plugins(plugins.path())
        .start();
    // (It would have warned before it served.)
    assert!(!quiet.log().contains("may evict"), "{}", quiet.log());
    drop((worker, quiet));
}

/// Every metric the Grafana dashboard in `docs/` queries is one a worker or `serve` exposes
/// (by sample or by its `# HELP` line: a counter of errors has no sample before the first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_metrics_that_exist() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/grafana-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the dashboard"))
            .expect("JSON");
    let mut queried = std::collections::BTreeSet::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expression");
            for (at, _) in expr.match_indices("wasmgear_") {
                let name: String = expr[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                queried.insert(name);
            }
        }
    }
    assert!(queried.len() >= 12, "{queried:?}");

    let redis = TestRedis::start();
    let plugins = plugin_dir(&["echo"]);
    let (worker, address) = worker_with_metrics(&redis, plugins.path(), &[]);
    let client = redis.client().await;
    let id = client
        .enqueue(&function("echo"), b"hi", &EnqueueOptions::default())
        .await
        .unwrap();
    client.wait(&id, WAIT, |_| {}).await.unwrap();
    let server = Server::with_token(&redis);
    // A request the server counts before it is scraped.
    assert_eq!(
        request(&server, "GET", "/v1/queues", Some(TOKEN), None)
            .await
            .status,
        200
    );
    let scrapes = [
        Scrape::parse(&get_at(&address, "/metrics").await),
        Scrape::parse(&request(&server, "GET", "/metrics", Some(TOKEN), None).await),
    ];
    for name in &queried {
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        let exposed = scrapes.iter().any(|scrape| {
            scrape.0.docs.contains_key(base)
                || scrape
                    .0
                    .samples
                    .iter()
                    .any(|s| s.metric == *name || s.metric == base)
        });
        assert!(
            exposed,
            "the dashboard queries {name}, which nothing exposes"
        );
    }
    drop(worker);
}

/// Once a worker is told to stop, `/readyz` says so (503) while its running jobs finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_is_not_ready() {
    let redis = TestRedis::start();
    let plugins = plugin_dir(&["count"]);
    let (mut worker, address) = worker_with_metrics(&redis, plugins.path(), &[]);
    let client = redis.client().await;
    let id = client
        .enqueue(&function("count"), b"40 100", &EnqueueOptions::default())
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the job to run", || async {
        let status = client.status(&id).await.ok()?;
        (status.record.state.as_str() == "running").then_some(())
    })
    .await;
    worker.signal("TERM");
    let unready = eventually(
        Duration::from_secs(30),
        "readyz to say stopping",
        || async {
            let answer = get_at(&address, "/readyz").await;
            (answer.status == 503).then_some(answer)
        },
    )
    .await;
    let reason = unready.json()["reason"].as_str().unwrap_or("").to_string();
    assert!(reason.starts_with("shutting down"), "{reason}");
    assert_eq!(worker.wait_exit(Duration::from_secs(30)), Some(0));
    let ended = client.status(&id).await.unwrap();
    assert_eq!(ended.record.state.as_str(), "succeeded");
}
