//! wasmgear's HTTP API, served by `wasmgear serve`: a small JSON API over
//! [`wasmgear_client`] for programs in any language that would rather speak HTTP than the
//! Redis protocol.
//!
//! Every route is declared once, in [`ROUTES`], from which the router is built, and is in the
//! OpenAPI document ([`openapi`], served at [`OPENAPI_PATH`]); a test checks the document
//! against [`ROUTES`], another the running server against the document.
//! Errors are JSON, `{"error": {"class", "message", "exit_code"}}`, with the classes and
//! exit codes of the CLI ([`wasmgear_client::ErrorClass`]). Every route but the OpenAPI
//! document and the health checks (`/healthz`, `/readyz`) needs `Authorization: Bearer TOKEN` unless the server runs without
//! authentication ([`Auth::None`], which `wasmgear serve` allows on loopback only).

mod api;
mod batches;
mod error;
mod flows;
mod groups;
mod health;
mod metrics;
mod openapi;
mod trace;
mod ui;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::Response;
use tokio_util::sync::CancellationToken;
use wasmgear_client::Client;

pub use api::job_json;
pub use error::ApiError;
pub use flows::{flow_json, submitted_flow_json};
pub use openapi::{OPENAPI_PATH, openapi};

/// Who may call the API.
#[derive(Clone)]
pub enum Auth {
    /// Callers must send `Authorization: Bearer` with this token.
    Token(String),
    /// Anyone who can reach the address may call it.
    None,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Auth::Token(<redacted>)"),
            Auth::None => f.write_str("Auth::None"),
        }
    }
}

/// Declares every route once: [`ROUTES`] and the router are both made from this list, so the
/// OpenAPI document (checked against [`ROUTES`]) cannot miss a route the server answers, nor
/// name one it does not. `open` routes need no token; `token` routes need it when the server
/// has one.
macro_rules! routes {
    ($($access:ident $method:ident $path:literal => $handler:path,)*) => {
        /// Every route of the server but the OpenAPI document: method (lower case) and path
        /// (axum's `{name}` for a path parameter), in the order the OpenAPI document lists them.
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path)),*];

        /// The open routes and the ones that need the token, as two routers.
        fn declared_routes() -> (Router<AppState>, Router<AppState>) {
            let (mut open, mut guarded) = (Router::new(), Router::new());
            $(routes!(@add $access, open, guarded, $method, $path, $handler);)*
            (open, guarded)
        }
    };
    (@add open, $open:ident, $guarded:ident, $method:ident, $path:literal, $handler:path) => {
        $open = $open.route($path, axum::routing::$method($handler));
    };
    (@add token, $open:ident, $guarded:ident, $method:ident, $path:literal, $handler:path) => {
        $guarded = $guarded.route($path, axum::routing::$method($handler));
    };
}

routes! {
    token post "/v1/functions/{function}/jobs" => api::enqueue,
    token post "/v1/functions/{function}/bulk" => api::bulk,
    token get "/v1/jobs/{id}" => api::status,
    token get "/v1/jobs/{id}/wait" => api::wait,
    token get "/v1/jobs/{id}/logs" => api::logs,
    token post "/v1/jobs/{id}/cancel" => api::cancel,
    token post "/v1/jobs/{id}/retry" => api::retry,
    token post "/v1/flows" => flows::submit,
    token get "/v1/flows/{id}" => flows::status,
    token post "/v1/flows/{id}/cancel" => flows::cancel,
    token post "/v1/flows/{id}/retry" => flows::retry,
    token post "/v1/batches" => batches::create,
    token get "/v1/batches/{id}" => batches::status,
    token post "/v1/batches/{id}/jobs" => batches::add,
    token post "/v1/batches/{id}/close" => batches::close,
    token get "/v1/events" => api::events,
    token get "/v1/queues" => api::queues,
    token get "/v1/workers" => api::workers,
    token get "/v1/failures" => api::failures,
    token get "/v1/functions/{function}/stats" => api::stats,
    token get "/v1/functions/{function}/groups" => groups::list,
    token put "/v1/functions/{function}/groups/{group}" => groups::configure,
    token get "/metrics" => metrics::scrape,
    open get "/healthz" => health::healthz,
    open get "/readyz" => health::readyz,
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) client: Client,
    pub(crate) auth: Arc<Auth>,
    /// Cancelled when the server shuts down: long polls answer at once and event streams
    /// end, so that the graceful shutdown does not wait on them.
    pub(crate) shutdown: CancellationToken,
    /// What the server counts as it serves (`/metrics`).
    pub(crate) metrics: Arc<metrics::ServerMetrics>,
    /// The dashboard's finished jobs per function and minute.
    pub(crate) throughput: Arc<ui::Throughput>,
    /// The value the dashboard's forms carry, which no other site can know: random per
    /// server process.
    pub(crate) csrf: Arc<str>,
}

/// The API's router over `client`, with `auth`; `shutdown` ends long polls and event
/// streams. Request bodies are limited to `max_input_bytes` (the job input limit).
pub fn router(
    client: Client,
    auth: Auth,
    shutdown: CancellationToken,
    max_input_bytes: usize,
) -> Router {
    app(client, auth, shutdown, max_input_bytes).0
}

/// The router and the state its handlers share.
fn app(
    client: Client,
    auth: Auth,
    shutdown: CancellationToken,
    max_input_bytes: usize,
) -> (Router, AppState) {
    let mut random = [0u8; 16];
    // Without an entropy source the clock still makes a value other sites cannot guess
    // from afar (all it has to be).
    if getrandom::fill(&mut random).is_err() {
        let now = wasmgear_proto::units::now_ms().to_le_bytes();
        random[..8].copy_from_slice(&now);
        random[8..].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
    }
    let state = AppState {
        client,
        auth: Arc::new(auth),
        shutdown,
        metrics: metrics::shared(),
        throughput: Arc::default(),
        csrf: random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into(),
    };
    let (open, guarded) = declared_routes();
    let guarded = guarded
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(DefaultBodyLimit::max(max_input_bytes));
    let router = open
        .route(OPENAPI_PATH, axum::routing::get(openapi::serve))
        .merge(guarded)
        .merge(ui::routes(state.clone()))
        .fallback(|| async { ApiError::route_not_found() })
        .layer(middleware::from_fn(trace::continue_trace))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::count,
        ))
        .with_state(state.clone());
    (router, state)
}

/// Refuses a request without the right bearer token (when a token is required). A read
/// (`GET`) may carry the token in the dashboard's cookie instead, as a browser's event
/// stream does; a change may not (a cookie goes with requests other sites make).
async fn authorize(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.method() == axum::http::Method::GET
        && ui::cookie_signed_in(&state.auth, request.headers())
    {
        return next.run(request).await;
    }
    if let Auth::Token(token) = &*state.auth {
        let given = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        match given {
            Some(given) if same_secret(given.trim().as_bytes(), token.as_bytes()) => {}
            Some(_) => return ApiError::unauthorized("the bearer token is not the server's"),
            None => {
                return ApiError::unauthorized(
                    "send the server's token as `Authorization: Bearer TOKEN`",
                );
            }
        }
    }
    next.run(request).await
}

/// Compares two secrets in time that depends only on their lengths.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// Serves the API on `listener` until `shutdown` is cancelled, then stops accepting,
/// ends long polls and event streams, and returns once the requests in flight are
/// answered.
pub async fn serve(
    listener: tokio::net::TcpListener,
    client: Client,
    auth: Auth,
    shutdown: CancellationToken,
    max_input_bytes: usize,
) -> std::io::Result<()> {
    let (app, state) = app(client, auth, shutdown.clone(), max_input_bytes);
    tokio::spawn(ui::count_finished(state));
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move { shutdown.cancelled().await })
    .await
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_compare_whole() {
        assert!(super::same_secret(b"s3cret", b"s3cret"));
        assert!(!super::same_secret(b"s3cret", b"s3creT"));
        assert!(!super::same_secret(b"s3cret", b"s3cre"));
        assert!(!super::same_secret(b"", b"x"));
    }
}
