//! A function's statistics for one day (`/ui/functions/{function}/stats`): failures and
//! retries, and its wait and run times as bar charts with their numbers.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;
use wasmgear_client::QueueError;

use super::error::UiError;
use super::function::function_of;
use super::layout::{Nav, Page, encode};
use crate::AppState;

#[derive(Deserialize)]
pub(super) struct DayQuery {
    day: Option<String>,
}

/// A function's statistics for one day, as charts.
pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
    Query(query): Query<DayQuery>,
) -> Result<Response, UiError> {
    let function = function_of(&function)?;
    let day = match query.day.as_deref().filter(|d| !d.is_empty()) {
        Some(text) => wasmgear_proto::units::day_of_date(text)
            .map_err(|error| QueueError::BadOption(format!("day {text:?}: {error}")))?,
        None => wasmgear_proto::units::today(),
    };
    let stats = state.client.stats(&function, day).await?;
    let main = html! {
        h1 { "Statistics of " a href={ "/ui/functions/" (encode(function.as_str())) } { (function.as_str()) } }
        form method="get" class="search" {
            label for="day" { "Day (UTC)" }
            input id="day" name="day" type="date" value=(stats.date);
            button type="submit" { "Show" }
        }
        p {
            (stats.failures) " failed attempts, " (stats.retries) " retries, "
            (stats.failed) " failed for good."
        }
        @for (name, times) in [("Wait in the queue", &stats.wait), ("Run time", &stats.run)] {
            section {
                h2 { (name) }
                p {
                    (times.count) " jobs, mean " (format!("{:.1}", times.mean_ms))
                    " ms, standard deviation " (format!("{:.1}", times.std_dev_ms)) " ms"
                }
                (histogram(name, &times.histogram))
            }
        }
    };
    let title = format!("Statistics of {function}");
    let page = Page {
        title: &title,
        nav: Nav::Queues,
        live: None,
    };
    Ok(page.respond(&headers, main))
}

/// A bar chart of `buckets` (name, count), as inline SVG with its numbers in a table for
/// screen readers.
fn histogram(name: &str, buckets: &[(String, u64)]) -> Markup {
    if buckets.is_empty() {
        return html! { p class="muted" { "No jobs that day." } };
    }
    let max = buckets.iter().map(|(_, n)| *n).max().unwrap_or(1).max(1);
    let bar = 28;
    let width = buckets.len() * bar;
    html! {
        svg class="chart" width=(width) height="140" viewBox={ "0 0 " (width) " 140" } role="img" aria-label=(name) {
            @for (i, (bucket, n)) in buckets.iter().enumerate() {
                @let height = (*n as f64 / max as f64 * 100.0).ceil() as usize;
                @let x = i * bar;
                rect x=(x + 3) y=(110 - height) width=(bar - 6) height=(height) {
                    title { (bucket) " " (n) }
                }
                text x=(x + bar / 2) y="135" text-anchor="middle" { (bucket) }
            }
        }
        details {
            summary { "The numbers" }
            table {
                thead { tr { th scope="col" { "up to" } th scope="col" { "jobs" } } }
                tbody { @for (b, n) in buckets { tr { th scope="row" { (b) } td { (n) } } } }
            }
        }
    }
}
