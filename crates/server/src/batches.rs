//! The API's batches: open one with its jobs and callbacks, add jobs while it is open,
//! close it, read how it stands.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use wasmgear_client::flow::document::FlowJobDocument;
use wasmgear_client::{BatchSpec, Callback, EnqueueOptions, FunctionName};

use crate::AppState;
use crate::api::MAX_BULK_JOBS;
use crate::error::ApiError;

type ApiResult<T = Response> = Result<T, ApiError>;

/// A callback as the API takes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallbackRequest {
    function: String,
    #[serde(default)]
    data: Option<Value>,
}

/// The body of `POST /v1/batches`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchRequest {
    #[serde(default)]
    name: String,
    #[serde(default)]
    on_success: Option<CallbackRequest>,
    #[serde(default)]
    on_complete: Option<CallbackRequest>,
    #[serde(default)]
    jobs: Vec<FlowJobDocument>,
    #[serde(default)]
    open: bool,
}

/// The body of `POST /v1/batches/{id}/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AddRequest {
    jobs: Vec<FlowJobDocument>,
}

fn callback(request: Option<CallbackRequest>) -> ApiResult<Option<Callback>> {
    request
        .map(|c| {
            Ok(Callback {
                function: FunctionName::new(c.function)
                    .map_err(|e| ApiError::bad_input(e.to_string()))?,
                data: c.data,
            })
        })
        .transpose()
}

/// Reads a body of jobs once their whole numbers are integers.
fn body_of<T: serde::de::DeserializeOwned>(
    body: Result<Json<Value>, JsonRejection>,
) -> ApiResult<T> {
    let Json(mut value) = body?;
    // (serde would read a struct from an array too, by position.)
    if !value.is_object() {
        return Err(ApiError::bad_input(
            "the batch must be a JSON object: {\"jobs\": [...], ...}",
        ));
    }
    if let Some(jobs) = value.get_mut("jobs").and_then(Value::as_array_mut) {
        jobs.iter_mut().for_each(crate::api::whole_numbers);
    }
    serde_path_to_error::deserialize(value)
        .map_err(|e| ApiError::bad_input(format!("the batch does not read: {e}")))
}

/// The jobs of a request, each checked.
fn jobs_of(jobs: Vec<FlowJobDocument>) -> ApiResult<Vec<(FunctionName, Vec<u8>, EnqueueOptions)>> {
    if jobs.len() > MAX_BULK_JOBS {
        return Err(ApiError::bad_input(format!(
            "{} jobs are more than the {MAX_BULK_JOBS} one request may carry; add them in several",
            jobs.len()
        )));
    }
    jobs.into_iter()
        .enumerate()
        .map(|(i, job)| {
            job.into_enqueue()
                .map_err(|e| ApiError::bad_input(format!("job {}: {e}", i + 1)))
        })
        .collect()
}

fn borrowed(
    jobs: &[(FunctionName, Vec<u8>, EnqueueOptions)],
) -> Vec<(FunctionName, &[u8], EnqueueOptions)> {
    jobs.iter()
        .map(|(f, input, o)| (f.clone(), input.as_slice(), o.clone()))
        .collect()
}

/// `POST /v1/batches`: opens a batch with its callbacks, adds its jobs, and closes it unless
/// `open` is true.
pub(crate) async fn create(
    State(state): State<AppState>,
    body: Result<Json<Value>, JsonRejection>,
) -> ApiResult {
    let request: BatchRequest = body_of(body)?;
    let spec = BatchSpec {
        name: request.name,
        on_success: callback(request.on_success)?,
        on_complete: callback(request.on_complete)?,
    };
    let jobs = jobs_of(request.jobs)?;
    let id = state.client.open_batch(&spec).await?;
    let ids = state.client.add_to_batch(&id, &borrowed(&jobs)).await?;
    if !request.open {
        state.client.close_batch(&id).await?;
    }
    let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
    Ok((StatusCode::CREATED, Json(json!({ "id": id, "jobs": ids }))).into_response())
}

/// `POST /v1/batches/{id}/jobs`: adds jobs to an open batch.
pub(crate) async fn add(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Result<Json<Value>, JsonRejection>,
) -> ApiResult {
    let request: AddRequest = body_of(body)?;
    let jobs = jobs_of(request.jobs)?;
    let ids = state.client.add_to_batch(&id, &borrowed(&jobs)).await?;
    let ids: Vec<String> = ids.iter().map(ToString::to_string).collect();
    Ok((StatusCode::CREATED, Json(json!({ "jobs": ids }))).into_response())
}

/// `POST /v1/batches/{id}/close`: closes a batch.
pub(crate) async fn close(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    state.client.close_batch(&id).await?;
    let status = state.client.batch_status(&id).await?;
    Ok(Json(status).into_response())
}

/// `GET /v1/batches/{id}`: how a batch stands.
pub(crate) async fn status(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let status = state.client.batch_status(&id).await?;
    Ok(Json(status).into_response())
}
