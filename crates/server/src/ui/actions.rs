//! The dashboard's actions, each a form `POST` that carries the server's anti-forgery
//! value: pause and resume a function, cancel, retry or reprioritise a job, retry a failure
//! group, cancel or retry a flow. Done, each goes back to the page it came from; refused, it says why.

use axum::Form;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use wasmgear_client::{CancelOutcome, GroupSetting, JobId, Priority, Setting};

use super::error::UiError;
use super::flows::flow_of;
use super::function::function_of;
use super::job::job_of;
use super::layout::encode;
use crate::{AppState, same_secret};

#[derive(Deserialize)]
pub(super) struct ActionForm {
    csrf: String,
    priority: Option<String>,
    /// A retry that drops the job's checkpoint (`1`).
    fresh: Option<String>,
}

/// Refuses a form without the server's anti-forgery value.
fn check_form(state: &AppState, form: &ActionForm) -> Result<(), UiError> {
    if same_secret(form.csrf.as_bytes(), state.csrf.as_bytes()) {
        Ok(())
    } else {
        Err(UiError::Forged)
    }
}

/// The job an action on `id` is about, once its form is checked.
fn checked_job(state: &AppState, form: &ActionForm, id: &str) -> Result<JobId, UiError> {
    check_form(state, form)?;
    job_of(id)
}

/// Back to the page the action came from (a dashboard page), or `fallback`.
fn back(headers: &HeaderMap, fallback: &str) -> Response {
    let referer = headers
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| r.find("/ui").map(|at| r[at..].to_string()))
        .filter(|path| !path.contains("//"));
    Redirect::to(referer.as_deref().unwrap_or(fallback)).into_response()
}

/// Back to the page the action came from, or the job's page.
fn back_to_job(headers: &HeaderMap, id: &JobId) -> Response {
    back(headers, &format!("/ui/jobs/{}", encode(&id.to_string())))
}

pub(super) async fn pause(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    set_paused(state, headers, function, form, true).await
}

pub(super) async fn resume(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    set_paused(state, headers, function, form, false).await
}

async fn set_paused(
    state: AppState,
    headers: HeaderMap,
    function: String,
    form: ActionForm,
    paused: bool,
) -> Result<Response, UiError> {
    check_form(&state, &form)?;
    let function = function_of(&function)?;
    state.client.check_function(&function).await?;
    state
        .client
        .configure(&function, &[Setting::Paused(paused)])
        .await?;
    Ok(back(&headers, "/ui"))
}

pub(super) async fn pause_group(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((function, group)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    set_group_paused(state, headers, function, group, form, true).await
}

pub(super) async fn resume_group(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((function, group)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    set_group_paused(state, headers, function, group, form, false).await
}

async fn set_group_paused(
    state: AppState,
    headers: HeaderMap,
    function: String,
    group: String,
    form: ActionForm,
    paused: bool,
) -> Result<Response, UiError> {
    check_form(&state, &form)?;
    let function = function_of(&function)?;
    state.client.check_function(&function).await?;
    state
        .client
        .configure_group(&function, &group, &[GroupSetting::Paused(paused)])
        .await?;
    let fallback = format!("/ui/functions/{}/groups", encode(function.as_str()));
    Ok(back(&headers, &fallback))
}

pub(super) async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    let id = checked_job(&state, &form, &id)?;
    match state.client.cancel(&id).await? {
        CancelOutcome::AlreadyEnded(state) => Err(UiError::NotDone(format!(
            "Job {id} had already ended ({state})."
        ))),
        _ => Ok(back_to_job(&headers, &id)),
    }
}

pub(super) async fn retry(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    let id = checked_job(&state, &form, &id)?;
    let options = wasmgear_client::RetryOptions {
        fresh: form.fresh.as_deref() == Some("1"),
    };
    if state.client.retry_with(&id, options).await? {
        Ok(back_to_job(&headers, &id))
    } else {
        Err(UiError::NotDone(format!(
            "Job {id} has not failed or been cancelled: nothing to retry."
        )))
    }
}

pub(super) async fn priority(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    let id = checked_job(&state, &form, &id)?;
    let given = form.priority.as_deref().unwrap_or("").trim();
    let priority = given
        .parse::<i32>()
        .map_err(|e| e.to_string())
        .and_then(|p| Priority::new(p).map_err(|e| e.to_string()))
        .map_err(|why| UiError::NotDone(format!("Priority {given:?}: {why}")))?;
    match state.client.set_priority(&id, priority).await? {
        (true, _) => Ok(back_to_job(&headers, &id)),
        (false, state) => Err(UiError::NotDone(format!(
            "Job {id} is {state}: only a job that has not started can change priority."
        ))),
    }
}

pub(super) async fn retry_group(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((function, group)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    check_form(&state, &form)?;
    let function = function_of(&function)?;
    state
        .client
        .retry_group(&function, &group, usize::MAX)
        .await?;
    Ok(back(&headers, "/ui/failures"))
}

pub(super) async fn cancel_flow(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    check_form(&state, &form)?;
    let id = flow_of(&id)?;
    match state.client.cancel_flow(id).await? {
        0 => Err(UiError::NotDone(format!(
            "Every job of flow {id} had already ended."
        ))),
        _ => Ok(back(&headers, &format!("/ui/flows/{id}"))),
    }
}

pub(super) async fn retry_flow(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Result<Response, UiError> {
    check_form(&state, &form)?;
    let id = flow_of(&id)?;
    if state.client.retry_flow(id).await?.is_empty() {
        Err(UiError::NotDone(format!(
            "No job of flow {id} has failed or been cancelled: nothing to retry."
        )))
    } else {
        Ok(back(&headers, &format!("/ui/flows/{id}")))
    }
}
