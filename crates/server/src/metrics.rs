//! `GET /metrics`: the queue as Prometheus sees it (the Prometheus text format): jobs per
//! function and state, paused functions and live workers, read from Redis at each scrape;
//! and the server's own requests by route and status.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::AppState;
use crate::error::ApiError;

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

type Labels = Vec<(&'static str, String)>;

/// What the server counts as it serves.
#[derive(Debug)]
pub(crate) struct ServerMetrics {
    registry: Registry,
    requests: Family<Labels, Counter>,
}

impl ServerMetrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("wasmgear");
        let requests = Family::<Labels, Counter>::default();
        registry.register(
            "http_requests",
            "Requests answered by `wasmgear serve`, by method, route and status",
            requests.clone(),
        );
        ServerMetrics { registry, requests }
    }
}

/// Counts every answered request by method, route (the route's pattern, `{id}` and all;
/// `unmatched` for none) and status.
pub(crate) async fn count(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |path| path.as_str().to_string());
    let response = next.run(request).await;
    state
        .metrics
        .requests
        .get_or_create(&vec![
            ("method", method),
            ("route", route),
            ("status", response.status().as_u16().to_string()),
        ])
        .inc();
    response
}

/// How many groups per function the metrics name (the deepest).
const METRIC_GROUPS: usize = 10;

/// `GET /metrics`: the queue's depths read from Redis now, and the server's counters.
pub(crate) async fn scrape(State(state): State<AppState>) -> Result<Response, ApiError> {
    let queues = state.client.queues().await?;
    let mut now = Registry::with_prefix("wasmgear");
    let jobs = Family::<Labels, Gauge>::default();
    let paused = Family::<Labels, Gauge>::default();
    let workers = Family::<Labels, Gauge>::default();
    let group_count = Family::<Labels, Gauge>::default();
    let group_jobs = Family::<Labels, Gauge>::default();
    for queue in &queues {
        let function = || vec![("function", queue.function.clone())];
        for (name, count) in [
            ("queued", queue.queued),
            ("scheduled", queue.scheduled),
            ("waiting", queue.waiting),
            ("running", queue.running),
            ("succeeded", queue.succeeded),
            ("failed", queue.failed),
            ("cancelled", queue.cancelled),
        ] {
            let mut labels = function();
            labels.push(("state", name.to_string()));
            jobs.get_or_create(&labels).set(count as i64);
        }
        paused
            .get_or_create(&function())
            .set(i64::from(queue.paused));
        workers.get_or_create(&function()).set(queue.workers as i64);
        // Groups: how many, and the deepest few by name (a bounded set of series, however
        // many tenants there are).
        let Ok(name) = wasmgear_client::FunctionName::new(queue.function.clone()) else {
            continue;
        };
        let groups = state.client.groups(&name, METRIC_GROUPS, None).await?;
        if groups.groups == 0 {
            continue;
        }
        group_count
            .get_or_create(&function())
            .set(groups.groups as i64);
        for group in &groups.listed {
            for (name, count) in [("ready", group.ready), ("running", group.running)] {
                let mut labels = function();
                labels.push(("group", group.group.clone()));
                labels.push(("state", name.to_string()));
                group_jobs.get_or_create(&labels).set(count as i64);
            }
        }
    }
    now.register(
        "queue_jobs",
        "Jobs in the queue by function and state (finished ones while they are kept)",
        jobs,
    );
    now.register(
        "queue_paused",
        "1 when leasing of the function is paused",
        paused,
    );
    now.register(
        "queue_workers",
        "Live workers serving the function",
        workers,
    );
    now.register(
        "queue_groups",
        "Groups of the function with ready jobs, running jobs or their own settings",
        group_count,
    );
    now.register(
        "group_jobs",
        "Ready and running jobs of the function's deepest groups (at most 10 groups per function)",
        group_jobs,
    );
    let mut text = String::new();
    let encoded = prometheus_text::encode(&mut text, &now)
        .and_then(|()| prometheus_text::encode(&mut text, &state.metrics.registry));
    match encoded {
        Ok(()) => Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()),
        Err(_) => Err(ApiError::internal("the metrics could not be encoded")),
    }
}

/// The metrics shared by every handler.
pub(crate) fn shared() -> Arc<ServerMetrics> {
    Arc::new(ServerMetrics::new())
}
