//! The failures page (`/ui/failures`): failed jobs grouped by function and error class,
//! with each group's latest jobs and "retry all".

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use wasmgear_client::{FailureGroup, FunctionName};

use super::error::UiError;
use super::layout::{Nav, Page, action, encode, job_links};
use crate::AppState;

/// Failure groups with their counts, each with "retry all" and its jobs.
pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let groups = state.client.failure_groups(None).await?;
    let mut rows = Vec::new();
    for group in &groups {
        let Ok(function) = FunctionName::new(&group.function) else {
            continue;
        };
        let latest = match state
            .client
            .failed_jobs(&function, &group.group, 0, 3)
            .await
        {
            Ok((_, jobs)) => jobs.iter().map(|j| j.id.to_string()).collect(),
            Err(_) => Vec::new(),
        };
        rows.push(row(&state.csrf, group, &latest));
    }
    let main = html! {
        h1 { "Failures" }
        @if groups.is_empty() {
            p { "No failed jobs are kept." }
        } @else {
            div class="table" {
                table {
                    caption { "Failed jobs by function and error class" }
                    thead {
                        tr {
                            th scope="col" { "function" }
                            th scope="col" { "error class" }
                            th scope="col" { "jobs" }
                            th scope="col" { "latest" }
                            th scope="col" {}
                        }
                    }
                    tbody { @for row in &rows { (row) } }
                }
            }
        }
    };
    let page = Page {
        title: "Failures",
        nav: Nav::Failures,
        live: Some(""),
    };
    Ok(page.respond(&headers, main))
}

/// One group's row: its function, class, count, `latest` jobs and "retry all".
fn row(csrf: &str, group: &FailureGroup, latest: &[String]) -> Markup {
    let f = encode(&group.function);
    let retry = action(
        csrf,
        &format!("/ui/failures/{f}/{}/retry", encode(&group.group)),
        "Retry all",
        &format!(
            "Run all {} failed jobs of {} in group {} again?",
            group.count, group.function, group.group
        ),
        None,
    );
    html! {
        tr {
            th scope="row" { a href={ "/ui/functions/" (f) "?state=failed" } { (group.function) } }
            td { (group.group) }
            td { (group.count) }
            td { (job_links(latest)) }
            td { (retry) }
        }
    }
}
