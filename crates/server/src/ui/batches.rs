//! The batches' pages: those not ended yet, with a search by id (`/ui/batches`), and one
//! batch (`/ui/batches/{id}`): its counts, callbacks, and the jobs that failed or were
//! cancelled; live.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use wasmgear_client::BatchStatus;

use super::error::UiError;
use super::layout::{Nav, Page, encode, job_links, time};
use crate::AppState;

/// How many unfinished batches the list shows.
const LISTED: usize = 50;

#[derive(Deserialize)]
pub(super) struct Search {
    id: Option<String>,
}

/// The batches not ended yet, and a search by id.
pub(super) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(search): Query<Search>,
) -> Result<Response, UiError> {
    if let Some(id) = search
        .id
        .map(|id| id.trim().to_string())
        .filter(|id| !id.is_empty())
    {
        return Ok(Redirect::to(&format!("/ui/batches/{}", encode(&id))).into_response());
    }
    let batches = state.client.unfinished_batches(LISTED).await?;
    let now = wasmgear_proto::units::now_ms();
    let main = html! {
        h1 { "Batches" }
        form method="get" action="/ui/batches" class="search" {
            label for="batch-id" { "Batch id" }
            input id="batch-id" name="id" type="search" placeholder="a1b2c3d4e5f60708";
            button type="submit" { "Show" }
        }
        @if batches.is_empty() {
            p class="muted" { "No batch is running. Start one with " code { "wasmgear batch run" } " or " code { "POST /v1/batches" } "." }
        } @else {
            div class="table" {
                table {
                    caption { "Batches not ended yet" }
                    thead { tr { @for name in ["batch", "name", "open", "jobs", "pending", "succeeded", "failed", "cancelled", "opened"] { th scope="col" { (name) } } } }
                    tbody {
                        @for batch in &batches {
                            tr {
                                td { a href={ "/ui/batches/" (encode(&batch.id)) } { code { (batch.id) } } }
                                td { (batch.name) }
                                td { (if batch.open { "open" } else { "closed" }) }
                                td { (batch.total) } td { (batch.pending) } td { (batch.succeeded) }
                                td { (batch.failed) } td { (batch.cancelled) }
                                td { (time(Some(batch.created_ms), now)) }
                            }
                        }
                    }
                }
            }
        }
    };
    let page = Page {
        title: "Batches",
        nav: Nav::Batches,
        live: Some(""),
    };
    Ok(page.respond(&headers, main))
}

/// One batch.
pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let status = state.client.batch_status(&id).await?;
    let now = wasmgear_proto::units::now_ms();
    let main = html! {
        h1 { "Batch " code { (status.id) } }
        div class="table" {
            table class="facts" {
                caption { "The batch" }
                tbody { (facts(&status, now)) }
            }
        }
        @if !status.failed_ids.is_empty() {
            h2 { "Failed" }
            p { (job_links(&status.failed_ids)) }
        }
        @if !status.cancelled_ids.is_empty() {
            h2 { "Cancelled" }
            p { (job_links(&status.cancelled_ids)) }
        }
    };
    let title = format!("Batch {}", status.id);
    let page = Page {
        title: &title,
        nav: Nav::Batches,
        live: Some(""),
    };
    Ok(page.respond(&headers, main))
}

fn facts(status: &BatchStatus, now: u64) -> Markup {
    let row = |name: &str, value: Markup| html! { tr { th scope="row" { (name) } td { (value) } } };
    let callback = |state: &Option<String>| match state.as_deref() {
        None => html! { span class="muted" { "none (not asked for, or not due)" } },
        Some("due") => html! { "due" },
        Some(id) => job_links(&[id.to_string()]),
    };
    let stage = if status.open {
        "open"
    } else if status.ended_ms.is_some() {
        "ended"
    } else {
        "closed"
    };
    html! {
        (row("name", html! { (status.name) }))
        (row("state", html! { (stage) }))
        (row("jobs", html! { (status.total) }))
        (row("pending", html! { (status.pending) }))
        (row("succeeded", html! { (status.succeeded) }))
        (row("failed", html! { (status.failed) }))
        (row("cancelled", html! { (status.cancelled) }))
        (row("on success", callback(&status.on_success)))
        (row("on complete", callback(&status.on_complete)))
        (row("opened", time(Some(status.created_ms), now)))
        (row("ended", time(status.ended_ms, now)))
    }
}
