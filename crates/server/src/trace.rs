//! The trace a request continues: a W3C `traceparent` (and `tracestate`) header makes the
//! jobs the request enqueues join the caller's trace. When the process exports spans, each
//! request also gets a server span (`POST /v1/jobs`, say) under the caller's. A header that is
//! not a valid traceparent is ignored, as the W3C recommendation says a receiver does.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::context::FutureExt as _;
use tracing::Instrument as _;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use wasmgear_client::TraceContext;
use wasmgear_client::propagation;

/// The trace context the request's headers carry, if a valid one.
fn given(request: &Request) -> Option<TraceContext> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
    };
    TraceContext::new(header("traceparent")?, header("tracestate")).ok()
}

/// Runs the request in the trace its headers name (and, exporting, in its own server span).
pub(crate) async fn continue_trace(request: Request, next: Next) -> Response {
    let given = given(&request);
    if !wasmgear_telemetry::exporting() {
        return match given {
            None => next.run(request).await,
            Some(given) => {
                next.run(request)
                    .with_context(propagation::context_for(&given))
                    .await
            }
        };
    }
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_string());
    let span = tracing::info_span!(
        "request",
        otel.name = %match &route {
            Some(route) => format!("{method} {route}"),
            None => method.to_string(),
        },
        otel.kind = "server",
        http.request.method = %method,
        http.route = route.as_deref().unwrap_or(""),
        http.response.status_code = Empty,
    );
    if let Some(given) = &given {
        let _ = span.set_parent(propagation::context_for(given));
    }
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}
