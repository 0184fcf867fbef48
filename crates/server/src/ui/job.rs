//! A job's page (`/ui/jobs/{id}`): its state and progress, the facts of its record, its
//! error, output, input, attempts and log; cancel, retry and priority as the state allows.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};
use wasmgear_client::{JobId, JobState, JobStatus, TraceContext};

use super::error::UiError;
use super::layout::{
    Nav, Page, action, encode, job_links, preview, progress_bar, state_badge, time,
};
use crate::AppState;

/// The job id in a path, or the page saying why it is no job id.
pub(super) fn job_of(text: &str) -> Result<JobId, UiError> {
    text.parse::<JobId>().map_err(UiError::BadJobId)
}

/// One job: its state, attempts and their history, progress, input, output or error, log;
/// cancel, retry, priority.
pub(super) async fn page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let id = job_of(&id)?;
    let status: JobStatus = state.client.status(&id).await?;
    let input = state.client.input(&id).await.ok().flatten();
    let log = state.client.logs(&id).await.unwrap_or_default();
    let record = &status.record;
    let now = wasmgear_proto::units::now_ms();
    let main = html! {
        h1 { "Job " (id.to_string()) }
        p { (state_badge(record.state)) " of " a href={ "/ui/functions/" (encode(id.function.as_str())) } { (id.function.as_str()) } }
        @if record.state == JobState::Running {
            @let (done, total, message) = record
                .progress
                .as_ref()
                .map_or((0, 0, None), |p| (p.done, p.total, p.message.as_deref()));
            (progress_bar(&id, done, total, message))
        }
        div class="actions" { (actions(&state.csrf, &id, &status)) }
        div class="table" {
            table class="facts" {
                caption { "The job" }
                tbody { (facts(&status, now)) }
            }
        }
        @if let Some(error) = &record.error {
            h2 { "Error" }
            p class="error" { strong { (error.class) } }
            pre { (error.message) }
        }
        @if let Some(output) = &status.output {
            h2 { "Output" }
            (preview(output))
        }
        h2 { "Input" }
        @match &input {
            Some(input) => (preview(input)),
            None => p class="muted" { "Not kept." },
        }
        @if !record.history.is_empty() {
            h2 { "Attempts" }
            div class="table" {
                table {
                    thead {
                        tr {
                            @for name in ["attempt", "outcome", "worker", "started", "ended", "plugin version", "message"] {
                                th scope="col" { (name) }
                            }
                        }
                    }
                    tbody {
                        @for attempt in &record.history {
                            tr {
                                td { (attempt.attempt) }
                                td { (attempt.outcome) }
                                td { (attempt.worker.as_deref().unwrap_or("–")) }
                                td { (time(attempt.started_ms, now)) }
                                td { (time(Some(attempt.ended_ms), now)) }
                                td { code { (attempt.version.as_deref().unwrap_or("–")) } }
                                td { (attempt.message.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Log" }
        @if log.is_empty() {
            p class="muted" { "Nothing logged." }
        } @else {
            pre class="log" { (log) }
        }
    };
    let title = format!("Job {id}");
    let live = format!("function={}", id.function.as_str());
    let page = Page {
        title: &title,
        nav: Nav::Queues,
        live: Some(&live),
    };
    Ok(page.respond(&headers, main))
}

/// The forms for what can be done to the job as it is.
fn actions(csrf: &str, id: &JobId, status: &JobStatus) -> Markup {
    let record = &status.record;
    let job = encode(&id.to_string());
    let priority = html! {
        label for="priority" { "Priority" }
        input id="priority" name="priority" type="number" value=(record.priority) required;
    };
    html! {
        @if !record.state.is_final() {
            (action(csrf, &format!("/ui/jobs/{job}/cancel"), "Cancel", &format!("Cancel job {id}?"), None))
        }
        @if matches!(record.state, JobState::Failed | JobState::Cancelled | JobState::Expired) {
            @if record.checkpoint.is_some() {
                (action(csrf, &format!("/ui/jobs/{job}/retry"), "Retry from the checkpoint", &format!("Run job {id} again, resuming from its checkpoint?"), None))
                (action(
                    csrf,
                    &format!("/ui/jobs/{job}/retry"),
                    "Retry from the beginning",
                    &format!("Run job {id} again from the beginning, dropping its checkpoint?"),
                    Some(html! { input type="hidden" name="fresh" value="1"; }),
                ))
            } @else {
                (action(csrf, &format!("/ui/jobs/{job}/retry"), "Retry", &format!("Run job {id} again?"), None))
            }
        }
        @if matches!(record.state, JobState::Queued | JobState::Scheduled | JobState::Waiting) {
            (action(
                csrf,
                &format!("/ui/jobs/{job}/priority"),
                "Change priority",
                &format!("Change the priority of job {id}?"),
                Some(priority),
            ))
        }
    }
}

/// The rows of the job's facts: attempt, priority, times, worker, timeout, tags, schedule,
/// and the jobs it is linked to.
fn facts(status: &JobStatus, now: u64) -> Markup {
    let record = &status.record;
    let row = |name: &str, value: Markup| html! { tr { th scope="row" { (name) } td { (value) } } };
    let links = [
        ("after", record.after.as_slice()),
        ("parent", record.parent.as_slice()),
        ("children", record.children.as_slice()),
        ("waiting on", record.waiting_on.as_slice()),
        ("dependents", record.dependents.as_slice()),
    ];
    html! {
        (row("attempt", html! { (record.attempt) " of " (record.max_attempts) }))
        (row("priority", html! { (record.priority) }))
        @if let Some(group) = &record.group_id {
            (row("group", html! {
                a href={ "/ui/functions/" (encode(status.id.function.as_str())) "/groups" } { (group) }
            }))
        }
        @if let Some(trace) = record.trace.as_deref().and_then(|t| TraceContext::new(t, None).ok()) {
            (row("trace", html! {
                code { (trace.trace_id()) } " (enqueued in span " code { (trace.span_id()) } ")"
            }))
        }
        (row("created", time(Some(record.created_ms), now)))
        @if record.run_at_ms.is_some() {
            (row("runs at", time(record.run_at_ms, now)))
        }
        (row("started", time(record.started_ms, now)))
        (row("finished", time(record.finished_ms, now)))
        @if let Some(checkpoint) = &record.checkpoint {
            (row("checkpoint", html! {
                (checkpoint.bytes) (if checkpoint.bytes == 1 { " byte" } else { " bytes" })
                ", saved " (time(Some(checkpoint.ms), now))
            }))
        }
        @if let Some(worker) = &record.worker {
            (row("worker", html! { (worker) }))
        }
        (row("timeout", html! { (record.timeout_ms) " ms" }))
        @if !record.tags.is_empty() {
            (row("tags", html! { (record.tags.join(", ")) }))
        }
        @if let Some(flow) = record.flow {
            (row("flow", html! { a href={ "/ui/flows/" (flow) } { "flow " (flow) } }))
        }
        @if let Some(batch) = &record.batch {
            (row("batch", html! { a href={ "/ui/batches/" (encode(batch)) } { "batch " (batch) } }))
        }
        @if let (Some(schedule), Some(tick)) = (&record.schedule, record.tick_ms) {
            (row("schedule", html! { (schedule) ", tick " (wasmgear_proto::units::utc_text(tick)) }))
        }
        @for (name, ids) in links {
            @if !ids.is_empty() {
                (row(name, job_links(ids)))
            }
        }
    }
}
