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

mod access;
mod api;
mod audit;
mod batches;
mod error;
mod flows;
mod groups;
mod health;
mod metrics;
mod openapi;
pub mod tokens;
mod trace;
mod ui;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use tokio_util::sync::CancellationToken;
use wasmgear_client::Client;

pub use api::job_json;
pub use error::ApiError;
pub use flows::{flow_json, submitted_flow_json};
pub use openapi::{OPENAPI_PATH, openapi};

/// Who may call the API.
#[derive(Clone)]
pub enum Auth {
    /// Callers must send `Authorization: Bearer` with this token, which may do everything
    /// (it is called `api-token` in the audit log).
    Token(String),
    /// Callers must send one of these tokens; each may do what its role allows, to the
    /// functions it names ([`tokens`]).
    Tokens(tokens::Tokens),
    /// Anyone who can reach the address may call it.
    None,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::Token(_) => f.write_str("Auth::Token(<redacted>)"),
            Auth::Tokens(tokens) => write!(f, "Auth::Tokens({} tokens)", tokens.len()),
            Auth::None => f.write_str("Auth::None"),
        }
    }
}

/// Declares every route once, with the role it needs: [`ROUTES`], [`ROUTE_ROLES`] and the
/// router are all made from this list, so the OpenAPI document (checked against [`ROUTES`])
/// cannot miss a route the server answers, nor name one it does not. `open` routes need no
/// token; the others a token whose role allows `read`, `enqueue`, `operate` or `admin`.
macro_rules! routes {
    ($($access:ident $method:ident $path:literal => $handler:path,)*) => {
        /// Every route of the server but the OpenAPI document: method (lower case) and path
        /// (axum's `{name}` for a path parameter), in the order the OpenAPI document lists them.
        pub const ROUTES: &[(&str, &str)] = &[$((stringify!($method), $path)),*];

        /// The role each route of [`ROUTES`] needs (`None`: open to anyone).
        pub const ROUTE_ROLES: &[(&str, &str, Option<tokens::Role>)] =
            &[$((stringify!($method), $path, routes!(@role $access))),*];

        /// The open routes and the ones that need a token, as two routers.
        fn declared_routes() -> (Router<AppState>, Router<AppState>) {
            let (mut open, mut guarded) = (Router::new(), Router::new());
            $(routes!(@add $access, open, guarded, $method, $path, $handler);)*
            (open, guarded)
        }
    };
    (@role open) => { None };
    (@role read) => { Some(tokens::Role::Read) };
    (@role enqueue) => { Some(tokens::Role::Enqueue) };
    (@role operate) => { Some(tokens::Role::Operate) };
    (@role admin) => { Some(tokens::Role::Admin) };
    (@add open, $open:ident, $guarded:ident, $method:ident, $path:literal, $handler:path) => {
        $open = $open.route($path, axum::routing::$method($handler));
    };
    (@add $role:ident, $open:ident, $guarded:ident, $method:ident, $path:literal, $handler:path) => {
        $guarded = $guarded.route($path, axum::routing::$method($handler));
    };
}

routes! {
    enqueue post "/v1/functions/{function}/jobs" => api::enqueue,
    enqueue post "/v1/functions/{function}/bulk" => api::bulk,
    read get "/v1/jobs/{id}" => api::status,
    read get "/v1/jobs/{id}/wait" => api::wait,
    read get "/v1/jobs/{id}/logs" => api::logs,
    operate post "/v1/jobs/{id}/cancel" => api::cancel,
    operate post "/v1/jobs/{id}/retry" => api::retry,
    enqueue post "/v1/flows" => flows::submit,
    read get "/v1/flows/{id}" => flows::status,
    operate post "/v1/flows/{id}/cancel" => flows::cancel,
    operate post "/v1/flows/{id}/retry" => flows::retry,
    enqueue post "/v1/batches" => batches::create,
    read get "/v1/batches/{id}" => batches::status,
    enqueue post "/v1/batches/{id}/jobs" => batches::add,
    enqueue post "/v1/batches/{id}/close" => batches::close,
    read get "/v1/events" => api::events,
    read get "/v1/queues" => api::queues,
    read get "/v1/workers" => api::workers,
    read get "/v1/failures" => api::failures,
    read get "/v1/functions/{function}/stats" => api::stats,
    read get "/v1/functions/{function}/groups" => groups::list,
    operate put "/v1/functions/{function}/groups/{group}" => groups::configure,
    admin get "/v1/audit" => audit::list,
    read get "/metrics" => metrics::scrape,
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
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            access::authorize,
        ))
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
