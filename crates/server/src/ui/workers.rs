//! The workers page (`/ui/workers`): each live worker as it advertises itself, with its
//! plugins, the jobs it runs, the plugin files it could not load, and its other sources.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use super::error::UiError;
use super::layout::{Nav, Page, job_link, time};
use crate::AppState;

/// The live workers: their plugins and the jobs they run.
pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let workers = state.client.workers().await?;
    let now = wasmgear_proto::units::now_ms();
    let main = html! {
        h1 { "Workers" }
        @if workers.is_empty() {
            p { "No live worker." }
        }
        @for worker in &workers {
            section class="worker" {
                h2 { (worker.id) }
                @match &worker.ad {
                    Ok(ad) => {
                        p {
                            (ad.host) " (pid " (ad.pid) "), wasmgear " (ad.version)
                            ", started " (time(Some(ad.started_ms), now))
                            ", concurrency " (ad.concurrency)
                        }
                        h3 { "Plugins" }
                        ul {
                            @for (f, v) in &ad.functions {
                                li {
                                    (f) " " code { (v) }
                                    @if let Some(max) = ad.batches.get(f) {
                                        " batches of up to " (max)
                                    }
                                }
                            }
                        }
                        h3 { "Running (" (ad.running.len()) ")" }
                        ul { @for j in &ad.running { li { (job_link(j)) } } }
                        @if !ad.plugin_errors.is_empty() {
                            h3 { "Plugin errors" }
                            ul class="error" { @for e in &ad.plugin_errors { li { (e) } } }
                        }
                        @if !ad.sources.is_empty() {
                            p { "Sources: " (ad.sources.join(", ")) }
                        }
                    },
                    Err(text) => pre { (text) },
                }
            }
        }
    };
    let page = Page {
        title: "Workers",
        nav: Nav::Workers,
        live: Some(""),
    };
    Ok(page.respond(&headers, main))
}
