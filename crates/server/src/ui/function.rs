//! A function's page (`/ui/functions/{function}`): its jobs in one state or with one tag,
//! a page at a time, and a search by job id.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use wasmgear_client::{FunctionConfig, FunctionName, JobId, JobState, JobStatus};

use super::error::UiError;
use super::layout::{Nav, Page, encode, progress_bar, state_badge, time};
use crate::AppState;

/// Jobs per page of a function's list.
const PAGE: usize = 50;

const STATES: [JobState; 8] = [
    JobState::Queued,
    JobState::Scheduled,
    JobState::Running,
    JobState::Waiting,
    JobState::Succeeded,
    JobState::Failed,
    JobState::Cancelled,
    JobState::Expired,
];

#[derive(Deserialize)]
pub(super) struct ListQuery {
    state: Option<String>,
    tag: Option<String>,
    id: Option<String>,
    page: Option<usize>,
}

/// The function's settings in one line (`wasmgear config F` shows and changes them).
fn settings_of(config: &FunctionConfig) -> String {
    let mut parts = Vec::new();
    if config.paused {
        parts.push("paused".to_string());
    }
    if let Some(cap) = config.concurrency {
        parts.push(format!("at most {cap} running at once"));
    }
    if let Some((n, every)) = config.rate_limit {
        parts.push(format!("at most {n} started per {every:?}"));
    }
    if let Some(cap) = config.group_concurrency {
        parts.push(format!("at most {cap} of each group at once"));
    }
    if config.encrypt {
        parts.push("only encrypted input".into());
    }
    match config.min_replicas {
        Some(1) => parts.push("writes confirmed by 1 replica".into()),
        Some(n) => parts.push(format!("writes confirmed by {n} replicas")),
        None => {}
    }
    if parts.is_empty() {
        return "Settings: none (wasmgear config sets them)".into();
    }
    format!("Settings: {}", parts.join(", "))
}

/// The function named in a path, or the page saying why it is no function name.
pub(super) fn function_of(text: &str) -> Result<FunctionName, UiError> {
    FunctionName::new(text).map_err(UiError::BadFunction)
}

/// A function's jobs, by state or tag, a page at a time; a search by id.
pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, UiError> {
    let function = function_of(&function)?;
    if let Some(id) = query
        .id
        .as_deref()
        .map(str::trim)
        .filter(|id| !id.is_empty())
    {
        let id = if id.contains(':') {
            id.to_string()
        } else {
            format!("{function}:{id}")
        };
        return Ok(Redirect::to(&format!("/ui/jobs/{}", encode(&id))).into_response());
    }
    let chosen: JobState = query
        .state
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or(JobState::Queued);
    let page = query.page.unwrap_or(0);
    let tag = query
        .tag
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let wanted = (page + 1) * PAGE + 1;
    let ids = match tag {
        Some(tag) => state.client.tagged(tag, Some(&function), wanted).await?,
        None => {
            state
                .client
                .jobs_in_state(&function, chosen, wanted)
                .await?
        }
    };
    let more = ids.len() > (page + 1) * PAGE;
    // A job that ended and went meanwhile is left out.
    let mut shown: Vec<(&JobId, JobStatus)> = Vec::new();
    for id in ids.iter().skip(page * PAGE).take(PAGE) {
        if let Ok(status) = state.client.status(id).await {
            shown.push((id, status));
        }
    }
    let settings = settings_of(&state.client.config(&function).await?);
    let f = encode(function.as_str());
    let now = wasmgear_proto::units::now_ms();
    let heading = match tag {
        Some(tag) => html! { "Jobs tagged " (tag) },
        None => html! { (chosen.as_str()) " jobs" },
    };
    let filter = match tag {
        Some(tag) => format!("tag={}", encode(tag)),
        None => format!("state={}", chosen.as_str()),
    };
    let main = html! {
        h1 { (function.as_str()) }
        p class="settings" { (settings) }
        p { a href={ "/ui/functions/" (f) "/stats" } { "Statistics" } " · " a href={ "/ui/functions/" (f) "/groups" } { "Groups" } }
        nav class="tabs" aria-label="Jobs by state" {
            @for s in STATES {
                a href={ "/ui/functions/" (f) "?state=" (s.as_str()) }
                    aria-current=[(tag.is_none() && s == chosen).then_some("page")] { (s.as_str()) }
            }
        }
        form method="get" class="search" role="search" {
            label for="id" { "Job id" }
            input id="id" name="id" placeholder={ (function.as_str()) ":1 or 1" };
            label for="tag" { "Tag" }
            input id="tag" name="tag" value=(tag.unwrap_or(""));
            button type="submit" { "Find" }
        }
        @if shown.is_empty() {
            p { "No " (heading) "." }
        } @else {
            div class="table" {
                table {
                    caption { (heading) }
                    thead {
                        tr {
                            @for name in ["job", "state", "attempt", "priority", "created", "progress", "tags"] {
                                th scope="col" { (name) }
                            }
                        }
                    }
                    tbody {
                        @for (id, status) in &shown {
                            @let record = &status.record;
                            @let id_text = id.to_string();
                            tr {
                                th scope="row" { a href={ "/ui/jobs/" (encode(&id_text)) } { (id_text) } }
                                td { (state_badge(record.state)) }
                                td { (record.attempt) "/" (record.max_attempts) }
                                td { (record.priority) }
                                td { (time(Some(record.created_ms), now)) }
                                td {
                                    @if record.state == JobState::Running {
                                        @match &record.progress {
                                            Some(p) => (progress_bar(id, p.done, p.total, p.message.as_deref())),
                                            None => (progress_bar(id, 0, 0, None)),
                                        }
                                    }
                                }
                                td { (record.tags.join(", ")) }
                            }
                        }
                    }
                }
            }
        }
        nav class="pages" aria-label="Pages" {
            @if page > 0 {
                a href={ "/ui/functions/" (f) "?" (filter) "&page=" (page - 1) } rel="prev" { "Previous" }
            }
            @if more {
                a href={ "/ui/functions/" (f) "?" (filter) "&page=" (page + 1) } rel="next" { "Next" }
            }
        }
    };
    let live = format!("function={}", function.as_str());
    let page = Page {
        title: function.as_str(),
        nav: Nav::Queues,
        live: Some(&live),
    };
    Ok(page.respond(&headers, main))
}
