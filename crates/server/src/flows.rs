//! The API's flows: submit a graph of jobs in one call (the flow document of
//! [`wasmgear_client::flow::document`]), read it, cancel it, retry it.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use wasmgear_client::flow::document::FlowDocument;
use wasmgear_client::{FlowStatus, SubmittedFlow};

use crate::AppState;
use crate::error::ApiError;

type ApiResult<T = Response> = Result<T, ApiError>;

/// A flow as the API answers it (and `wasmgear flow status --json` prints it): its id,
/// name, creation time, whether every job has ended, its jobs per state, its last jobs
/// (none waits on them), and each job with its id, edges, state, output size and error.
pub fn flow_json(status: &FlowStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    value["ended"] = json!(status.ended());
    value["counts"] = Value::Object(
        status
            .counts()
            .into_iter()
            .map(|(state, n)| (state.to_string(), json!(n)))
            .collect(),
    );
    value["sinks"] = json!(status.sinks().iter().map(|j| &j.name).collect::<Vec<_>>());
    if let Some(jobs) = value["jobs"].as_array_mut() {
        for job in jobs {
            if job["state"].is_null() {
                job["state"] = json!("missing");
            }
        }
    }
    value
}

/// A submitted flow as the API answers it: its id and each job's id by name.
pub fn submitted_flow_json(submitted: &SubmittedFlow) -> Value {
    json!({
        "id": submitted.id,
        "jobs": submitted.jobs.iter()
            .map(|(name, id)| (name.clone(), json!(id.to_string())))
            .collect::<serde_json::Map<String, Value>>(),
    })
}

fn flow_id_of(id: &str) -> ApiResult<u64> {
    id.parse::<u64>()
        .ok()
        .filter(|&id| id > 0)
        .ok_or_else(|| ApiError::bad_input(format!("flow id {id:?} is not a whole number above 0")))
}

/// `POST /v1/flows`: submits a flow, checked whole before anything is written.
pub(crate) async fn submit(
    State(state): State<AppState>,
    body: Result<Json<Value>, JsonRejection>,
) -> ApiResult {
    let Json(mut value) = body?;
    // (serde would read a struct from an array too, by position.)
    if !value.is_object() {
        return Err(ApiError::bad_input(
            "the flow must be a JSON object: {\"name\": ..., \"jobs\": {...}}",
        ));
    }
    if let Some(jobs) = value.get_mut("jobs").and_then(Value::as_object_mut) {
        jobs.values_mut().for_each(crate::api::whole_numbers);
    }
    let document: FlowDocument = serde_path_to_error::deserialize(value)
        .map_err(|e| ApiError::bad_input(format!("the flow does not read: {e}")))?;
    let flow = document.into_flow()?;
    let submitted = state.client.submit_flow(&flow).await?;
    Ok((StatusCode::CREATED, Json(submitted_flow_json(&submitted))).into_response())
}

/// `GET /v1/flows/{id}`: the flow and how each of its jobs stands.
pub(crate) async fn status(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let status = state.client.flow(flow_id_of(&id)?).await?;
    Ok(Json(flow_json(&status)).into_response())
}

/// `POST /v1/flows/{id}/cancel`: cancels every unfinished job of the flow.
pub(crate) async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let id = flow_id_of(&id)?;
    let cancelled = state.client.cancel_flow(id).await?;
    Ok(Json(json!({ "id": id, "cancelled": cancelled })).into_response())
}

/// `POST /v1/flows/{id}/retry`: runs the flow's failed and cancelled jobs again.
pub(crate) async fn retry(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let id = flow_id_of(&id)?;
    let retried = state.client.retry_flow(id).await?;
    let ids: Vec<String> = retried.iter().map(ToString::to_string).collect();
    Ok(Json(json!({ "id": id, "retried": ids })).into_response())
}
