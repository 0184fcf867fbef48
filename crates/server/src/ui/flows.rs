//! The flows' pages: the latest flows (`/ui/flows`), and one flow (`/ui/flows/{id}`) drawn as
//! a graph (SVG made here, each job a link to its page), with its jobs' states, live, and
//! cancel and retry of the whole flow.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use wasmgear_client::{FlowJobStatus, FlowStatus, JobState, OnFailure};

use super::error::UiError;
use super::layout::{Nav, Page, action, encode, time};
use crate::AppState;

/// How many of the latest flows the list shows.
const LISTED: u64 = 50;
/// The most jobs a flow's graph draws (a larger flow is listed only).
const MOST_DRAWN: usize = 1000;
/// The most jobs a flow's table lists.
const MOST_LISTED: usize = 1000;

/// A job's box in the graph, and the space around it (px).
const NODE_WIDTH: usize = 168;
const NODE_HEIGHT: usize = 40;
const COLUMN_GAP: usize = 56;
const ROW_GAP: usize = 12;
const MARGIN: usize = 12;
/// The most characters of a job's name shown in its box.
const NAME_CHARS: usize = 22;

/// The flow id in a path, or the page saying why it is none.
pub(super) fn flow_of(text: &str) -> Result<u64, UiError> {
    text.parse::<u64>()
        .ok()
        .filter(|&id| id > 0)
        .ok_or_else(|| {
            UiError::NotDone(format!("{text:?} is no flow id (a whole number above 0)."))
        })
}

/// The latest flows, newest first.
pub(super) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let flows = state.client.recent_flows(LISTED).await?;
    let now = wasmgear_proto::units::now_ms();
    let main = html! {
        h1 { "Flows" }
        @if flows.is_empty() {
            p class="muted" { "No flow is kept. Submit one with " code { "wasmgear flow submit FILE" } " or " code { "POST /v1/flows" } "." }
        } @else {
            div class="table" {
                table {
                    caption { "The latest " (LISTED) " flows still kept" }
                    thead { tr { th scope="col" { "flow" } th scope="col" { "name" } th scope="col" { "jobs" } th scope="col" { "submitted" } } }
                    tbody {
                        @for flow in &flows {
                            tr {
                                td { a href={ "/ui/flows/" (flow.id) } { (flow.id) } }
                                td { (flow.name) }
                                td { (flow.jobs) }
                                td { (time(Some(flow.created_ms), now)) }
                            }
                        }
                    }
                }
            }
        }
    };
    let page = Page {
        title: "Flows",
        nav: Nav::Flows,
        live: None,
    };
    Ok(page.respond(&headers, main))
}

/// One flow: its graph, its jobs' states, cancel and retry.
pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let id = flow_of(&id)?;
    let status = state.client.flow(id).await?;
    let now = wasmgear_proto::units::now_ms();
    let counts: Vec<String> = status
        .counts()
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let unfinished = status.jobs.iter().any(|j| !j.ended());
    let rerunnable = status.jobs.iter().any(|j| {
        matches!(
            j.state,
            Some(JobState::Failed | JobState::Cancelled | JobState::Expired)
        )
    });
    let main = html! {
        h1 { "Flow " (id) " " q { (status.name) } }
        p { (status.jobs.len()) " jobs: " (counts.join(", ")) ", submitted " (time(Some(status.created_ms), now)) }
        div class="actions" {
            @if unfinished {
                (action(&state.csrf, &format!("/ui/flows/{id}/cancel"), "Cancel flow", &format!("Cancel every unfinished job of flow {id}?"), None))
            }
            @if rerunnable {
                (action(&state.csrf, &format!("/ui/flows/{id}/retry"), "Retry flow", &format!("Run the failed and cancelled jobs of flow {id} again?"), None))
            }
        }
        @if status.jobs.len() <= MOST_DRAWN {
            div class="graph" { (graph(&status)) }
        } @else {
            p class="muted" { "The flow has " (status.jobs.len()) " jobs: too many to draw (at most " (MOST_DRAWN) "); its jobs are listed below." }
        }
        div class="table" {
            table {
                caption { "Its jobs, each after those it waits on" }
                thead { tr { th scope="col" { "job" } th scope="col" { "id" } th scope="col" { "state" } th scope="col" { "waits on" } th scope="col" { "error" } } }
                tbody {
                    @for job in status.jobs.iter().take(MOST_LISTED) {
                        tr {
                            td { (job.name) }
                            td { a href={ "/ui/jobs/" (encode(&job.id.to_string())) } { (job.id.to_string()) } }
                            td { (state_text(job)) }
                            td { (edges_text(job)) }
                            td { (job.error.as_deref().unwrap_or("")) }
                        }
                    }
                }
            }
        }
        @if status.jobs.len() > MOST_LISTED {
            p class="muted" { "The first " (MOST_LISTED) " of " (status.jobs.len()) " jobs are listed: " code { "wasmgear flow status " (id) " --json" } " has them all." }
        }
    };
    let title = format!("Flow {id}");
    let page = Page {
        title: &title,
        nav: Nav::Flows,
        // Its jobs may be of any function: every event may change it.
        live: Some(""),
    };
    Ok(page.respond(&headers, main))
}

fn state_text(job: &FlowJobStatus) -> &'static str {
    job.state.map_or("missing", JobState::as_str)
}

fn edges_text(job: &FlowJobStatus) -> String {
    job.after
        .iter()
        .map(|edge| match edge.on_failure {
            OnFailure::Cancel => edge.job.clone(),
            other => format!("{} ({other})", edge.job),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The flow as an SVG graph: a column per depth (a job's longest chain of dependencies),
/// each job a box linked to its page and coloured by its state, each edge a curve from the
/// job waited on to the job waiting (dashed: `ignore`, dotted: `continue`).
fn graph(status: &FlowStatus) -> Markup {
    let by_name: HashMap<&str, usize> = status
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.name.as_str(), i))
        .collect();
    // The jobs come every one after those it waits on: one pass gives each its depth.
    let mut depth = vec![0usize; status.jobs.len()];
    for (i, job) in status.jobs.iter().enumerate() {
        depth[i] = job
            .after
            .iter()
            .filter_map(|e| by_name.get(e.job.as_str()))
            .map(|&d| depth[d] + 1)
            .max()
            .unwrap_or(0);
    }
    let columns = depth.iter().max().map_or(0, |d| d + 1);
    let mut rows_used = vec![0usize; columns];
    let mut row = vec![0usize; status.jobs.len()];
    for (i, &d) in depth.iter().enumerate() {
        row[i] = rows_used[d];
        rows_used[d] += 1;
    }
    let tallest = rows_used.iter().copied().max().unwrap_or(0);
    let width = 2 * MARGIN + columns * NODE_WIDTH + columns.saturating_sub(1) * COLUMN_GAP;
    let height = 2 * MARGIN + tallest * NODE_HEIGHT + tallest.saturating_sub(1) * ROW_GAP;
    let x = |i: usize| MARGIN + depth[i] * (NODE_WIDTH + COLUMN_GAP);
    let y = |i: usize| MARGIN + row[i] * (NODE_HEIGHT + ROW_GAP);
    html! {
        svg class="flow-graph" xmlns="http://www.w3.org/2000/svg" role="img"
            width=(width) height=(height) viewBox={ "0 0 " (width) " " (height) }
            aria-label={ "The graph of flow " (status.id) } {
            @for (i, job) in status.jobs.iter().enumerate() {
                @for edge in &job.after {
                    @if let Some(&from) = by_name.get(edge.job.as_str()) {
                        @let (x1, y1) = (x(from) + NODE_WIDTH, y(from) + NODE_HEIGHT / 2);
                        @let (x2, y2) = (x(i), y(i) + NODE_HEIGHT / 2);
                        @let bend = COLUMN_GAP / 2;
                        path class={ "edge edge-" (edge.on_failure) }
                            d={ "M" (x1) " " (y1) " C" (x1 + bend) " " (y1) " " (x2 - bend) " " (y2) " " (x2) " " (y2) } {}
                    }
                }
            }
            @for (i, job) in status.jobs.iter().enumerate() {
                a href={ "/ui/jobs/" (encode(&job.id.to_string())) } class={ "node state-" (state_text(job)) } data-job=(job.name) {
                    title { (job.name) " (" (job.id.to_string()) "): " (state_text(job)) }
                    rect x=(x(i)) y=(y(i)) width=(NODE_WIDTH) height=(NODE_HEIGHT) rx="6" {}
                    text x=(x(i) + 8) y=(y(i) + 16) class="node-name" { (short(&job.name)) }
                    text x=(x(i) + 8) y=(y(i) + 32) class="node-state" { (state_text(job)) " · " (job.id.to_string()) }
                }
            }
        }
    }
}

/// A name cut to what a box holds.
fn short(name: &str) -> String {
    if name.chars().count() <= NAME_CHARS {
        name.to_string()
    } else {
        let kept: String = name.chars().take(NAME_CHARS - 1).collect();
        format!("{kept}…")
    }
}
