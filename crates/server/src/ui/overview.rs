//! The overview (`/ui`): every function's jobs by state, each count a link to those jobs,
//! its workers, its finished jobs per minute in the last hour, and pause or resume.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use wasmgear_client::QueueOverview;

use super::error::UiError;
use super::layout::{Nav, Page, action, encode};
use crate::AppState;

/// The columns of counts, by state.
const COUNTED: [&str; 7] = [
    "queued",
    "scheduled",
    "running",
    "waiting",
    "succeeded",
    "failed",
    "cancelled",
];

/// The queues: every function's jobs by state, its workers, and its last hour.
pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let queues = state.client.queues().await?;
    let minute = wasmgear_proto::units::now_ms() / 60_000;
    let main = html! {
        h1 { "Queues" }
        @if queues.is_empty() {
            p { "No function has had a job yet." }
        } @else {
            div class="table" {
                table {
                    caption { "Jobs of each function by state" }
                    thead {
                        tr {
                            th scope="col" { "function" }
                            @for name in COUNTED { th scope="col" { (name) } }
                            th scope="col" { "workers" }
                            th scope="col" { "finished per minute, last hour" }
                            th scope="col" { "leasing" }
                        }
                    }
                    tbody {
                        @for queue in &queues {
                            (row(&state, queue, &state.throughput.last_hour(&queue.function, minute)))
                        }
                    }
                }
            }
        }
    };
    let page = Page {
        title: "Queues",
        nav: Nav::Queues,
        live: Some(""),
    };
    Ok(page.respond(&headers, main))
}

/// One function's row; `series` is its finished jobs per minute.
fn row(state: &AppState, queue: &QueueOverview, series: &[u64]) -> Markup {
    let f = encode(&queue.function);
    let counts = [
        queue.queued,
        queue.scheduled,
        queue.running,
        queue.waiting,
        queue.succeeded,
        queue.failed,
        queue.cancelled,
    ];
    let pause = if queue.paused {
        action(
            &state.csrf,
            &format!("/ui/functions/{f}/resume"),
            "Resume",
            &format!("Resume leasing jobs of {}?", queue.function),
            None,
        )
    } else {
        action(
            &state.csrf,
            &format!("/ui/functions/{f}/pause"),
            "Pause",
            &format!(
                "Pause leasing jobs of {}? Running jobs go on.",
                queue.function
            ),
            None,
        )
    };
    html! {
        tr data-function=(queue.function) {
            th scope="row" {
                a href={ "/ui/functions/" (f) } { (queue.function) }
                @if queue.paused { " " span class="badge" { "paused" } }
            }
            @for (name, n) in COUNTED.into_iter().zip(counts) {
                td data-count=(name) { a href={ "/ui/functions/" (f) "?state=" (name) } { (n) } }
            }
            td { (queue.workers) }
            td { (sparkline(series)) }
            td { (pause) }
        }
    }
}

/// An inline chart of per-minute counts.
fn sparkline(series: &[u64]) -> Markup {
    let max = series.iter().copied().max().unwrap_or(0).max(1);
    let total: u64 = series.iter().sum();
    let width = series.len() * 3;
    html! {
        svg class="spark" width=(width) height="20" viewBox={ "0 0 " (width) " 20" } role="img"
            aria-label={ (total) " finished in the last hour" } {
            @for (i, n) in series.iter().enumerate() {
                @let height = (*n as f64 / max as f64 * 20.0).ceil() as u32;
                @if height > 0 {
                    rect x=(i * 3) y=(20 - height) width="2" height=(height) {}
                }
            }
        }
        " "
        span class="muted" { (total) }
    }
}
