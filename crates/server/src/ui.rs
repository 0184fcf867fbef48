//! The dashboard, served by `wasmgear serve` under `/ui`: server-rendered HTML pages with a
//! small script (`ui/app.js`) that keeps them live over the API's event stream, and a style
//! sheet (`ui/style.css`), both compiled into the binary (no CDN: the page works with no
//! internet).
//!
//! The pages are [maud] templates: every value spliced into one is escaped unless the code
//! says otherwise, so what jobs, plugins and workers store shows as text. Each page handler
//! gathers what it shows and returns its markup or a [`UiError`](error::UiError), which is a
//! page too.
//!
//! With a token, the browser signs in once (`/ui/login`) and keeps the token in an
//! `HttpOnly`, `SameSite=Strict` cookie, which the API's read-only routes (the event stream)
//! accept too. Every action is a form `POST` carrying the server's anti-forgery value; each
//! asks to confirm first (with the script) and answers by going back to the page it came
//! from. The pages work without the script, only not live.
//!
//! # Layout
//! - [`layout`]: the document around every page and the pieces pages share.
//! - [`error`]: [`UiError`], what goes wrong, as a page.
//! - [`signin`]: the sign-in page, the cookie, and the guard on every other page.
//! - [`overview`], [`function`], [`job`], [`stats`], [`failures`], [`workers`]: one page each.
//! - [`flows`]: the latest flows, and one flow drawn as a graph (SVG made on the server).
//! - [`batches`]: the batches not ended yet, and one batch with its counts and callbacks.
//! - [`actions`]: the forms' `POST`s (pause, resume, cancel, retry, priority, retry a group,
//!   cancel or retry a flow).
//! - [`throughput`]: finished jobs per minute, counted from the event stream.

mod actions;
mod audit;
mod batches;
mod error;
mod failures;
mod flows;
mod function;
mod groups;
mod job;
mod layout;
mod overview;
mod signin;
mod stats;
mod throughput;
mod workers;

use axum::Router;
use axum::http::header;
use axum::middleware;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::AppState;

pub(crate) use signin::cookie_caller;
pub(crate) use throughput::{Throughput, count_finished};

const APP_JS: &str = include_str!("ui/app.js");
const STYLE_CSS: &str = include_str!("ui/style.css");

/// The dashboard's routes (not part of the API, so not in its OpenAPI document).
pub(crate) fn routes(state: AppState) -> Router<AppState> {
    let guarded = Router::new()
        .route("/ui", get(overview::page))
        .route("/ui/functions/{function}", get(function::page))
        .route("/ui/functions/{function}/stats", get(stats::page))
        .route("/ui/functions/{function}/pause", post(actions::pause))
        .route("/ui/functions/{function}/resume", post(actions::resume))
        .route("/ui/functions/{function}/groups", get(groups::page))
        .route(
            "/ui/functions/{function}/groups/{group}/pause",
            post(actions::pause_group),
        )
        .route(
            "/ui/functions/{function}/groups/{group}/resume",
            post(actions::resume_group),
        )
        .route("/ui/jobs/{id}", get(job::page))
        .route("/ui/jobs/{id}/cancel", post(actions::cancel))
        .route("/ui/jobs/{id}/retry", post(actions::retry))
        .route("/ui/jobs/{id}/priority", post(actions::priority))
        .route("/ui/failures", get(failures::page))
        .route(
            "/ui/failures/{function}/{group}/retry",
            post(actions::retry_group),
        )
        .route("/ui/workers", get(workers::page))
        .route("/ui/audit", get(audit::page))
        .route("/ui/batches", get(batches::list))
        .route("/ui/batches/{id}", get(batches::page))
        .route("/ui/flows", get(flows::list))
        .route("/ui/flows/{id}", get(flows::page))
        .route("/ui/flows/{id}/cancel", post(actions::cancel_flow))
        .route("/ui/flows/{id}/retry", post(actions::retry_flow))
        .route("/ui/logout", post(signin::logout))
        .route_layer(middleware::from_fn_with_state(state, signin::signed_in));
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/", get(|| async { Redirect::to("/ui") }))
        .route("/ui/login", get(signin::login_page).post(signin::login))
        .route("/ui/assets/app.js", get(app_js))
        .route("/ui/assets/style.css", get(style_css))
        .merge(guarded)
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

async fn style_css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLE_CSS,
    )
        .into_response()
}
