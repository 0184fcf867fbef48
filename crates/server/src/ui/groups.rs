//! A function's groups (`/ui/functions/{function}/groups`): the deepest first, with their
//! ready and running jobs, limits (their own, or the function's default for every group),
//! and a pause or resume button each.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use super::error::UiError;
use super::function::function_of;
use super::layout::{Nav, Page, action, encode, time};
use crate::AppState;

/// The most groups the page lists.
const LISTED: usize = 50;

pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
) -> Result<Response, UiError> {
    let function = function_of(&function)?;
    state.client.check_function(&function).await?;
    let overview = state.client.groups(&function, LISTED, None).await?;
    let defaults = state.client.config(&function).await?;
    let f = encode(function.as_str());
    let now = wasmgear_proto::units::now_ms();
    let default_cap = defaults
        .group_concurrency
        .map_or("none".to_string(), |n| n.to_string());
    let rate = |(n, every): (u64, std::time::Duration)| format!("{n} per {every:?}");
    let default_rate = defaults.group_rate_limit.map_or("none".to_string(), rate);
    let main = html! {
        h1 { (function.as_str()) ": groups" }
        p { a href={ "/ui/functions/" (f) } { "Jobs" } " · " a href={ "/ui/functions/" (f) "/stats" } { "Statistics" } }
        p {
            (overview.groups) " groups"
            @if overview.truncated { " (at least: too many to count)" }
            "; " (overview.ungrouped_ready) " ready jobs without a group. "
            "Every group: concurrency " (default_cap) ", rate " (default_rate) "."
        }
        @if overview.listed.is_empty() {
            p { "No groups." }
        } @else {
            div class="table" {
                table {
                    caption { "The deepest groups" }
                    thead {
                        tr {
                            @for name in ["group", "ready", "running", "concurrency", "rate", "state", ""] {
                                th scope="col" { (name) }
                            }
                        }
                    }
                    tbody {
                        @for group in &overview.listed {
                            @let key = encode(&group.group);
                            tr {
                                th scope="row" { (group.group) }
                                td { (group.ready) }
                                td { (group.running) }
                                td {
                                    @match group.config.concurrency {
                                        Some(n) => { (n) }
                                        None => { (default_cap) " (default)" }
                                    }
                                }
                                td {
                                    @match group.config.rate_limit {
                                        Some(r) => { (rate(r)) }
                                        None => { (default_rate) " (default)" }
                                    }
                                }
                                td {
                                    @if group.config.paused {
                                        "paused"
                                    } @else if let Some(until) = group.rate_limited_until_ms {
                                        "rate-limited until " (time(Some(until), now))
                                    }
                                }
                                td {
                                    @if group.config.paused {
                                        (action(&state.csrf, &format!("/ui/functions/{f}/groups/{key}/resume"), "Resume",
                                            &format!("Resume group {} of {function}?", group.group), None))
                                    } @else {
                                        (action(&state.csrf, &format!("/ui/functions/{f}/groups/{key}/pause"), "Pause",
                                            &format!("Pause group {} of {function}? Its other groups go on.", group.group), None))
                                    }
                                }
                            }
                        }
                    }
                }
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
