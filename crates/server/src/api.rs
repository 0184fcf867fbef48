//! The API's handlers (routed by the one list in [`crate::ROUTES`]'s macro, described in the
//! OpenAPI document).

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use wasmgear_client::flow::document::JobFields;
use wasmgear_client::{CancelOutcome, EnqueueOptions, FunctionName, JobId, JobStatus, QueueError};

use wasmgear_proto::limits;

use crate::AppState;
use crate::error::ApiError;
use crate::openapi;

/// The most jobs one bulk request may carry (they are enqueued in one atomic call).
pub(crate) const MAX_BULK_JOBS: usize = limits::MAX_BULK_JOBS as usize;
/// How long a long poll waits when the request names no timeout.
const DEFAULT_WAIT: Duration = Duration::from_millis(limits::DEFAULT_WAIT_MS);
/// The longest a long poll may wait.
const MAX_WAIT: Duration = Duration::from_millis(limits::MAX_WAIT_MS);

type ApiResult<T = Response> = Result<T, ApiError>;

/// One job to enqueue: its input in one of three forms (none: empty input) and its options,
/// each with the CLI's default when left out. Its schema in the OpenAPI document is derived
/// from this type, its bounds from [`limits`].
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = openapi::one_input_at_most)]
pub(crate) struct JobRequest {
    /// The input as text (UTF-8).
    input: Option<String>,
    /// The input as base64 bytes.
    #[schemars(regex(pattern = openapi::BASE64_PATTERN))]
    input_base64: Option<String>,
    /// The input as any JSON value (the job gets its compact JSON text).
    input_json: Option<Value>,
    /// Higher runs first.
    #[schemars(range(min = limits::MIN_PRIORITY, max = limits::MAX_PRIORITY))]
    priority: Option<i32>,
    /// Run no sooner than this many ms from now (not with `at_ms`).
    #[schemars(range(max = limits::MAX_DURATION_MS))]
    delay_ms: Option<u64>,
    /// Run no sooner than this time, ms since the epoch: not in the past on the queue's clock,
    /// at most 10 years ahead.
    #[schemars(range(min = 1, max = limits::MAX_AT_MS))]
    at_ms: Option<u64>,
    /// Attempts in all, retries included.
    #[schemars(range(min = 1, max = limits::MAX_ATTEMPTS))]
    attempts: Option<u32>,
    /// How long one attempt may run, ms.
    #[schemars(range(min = 1, max = limits::MAX_DURATION_MS))]
    timeout_ms: Option<u64>,
    /// How long the job is kept once it succeeded or was cancelled, ms.
    #[schemars(range(min = limits::MIN_RETENTION_MS, max = limits::MAX_DURATION_MS))]
    retention_ms: Option<u64>,
    /// How long the job is kept once it failed, ms.
    #[schemars(range(max = limits::MAX_DURATION_MS))]
    failed_retention_ms: Option<u64>,
    /// A key no other unfinished job of the function holds (Gearman's unique key).
    #[schemars(length(min = 1, max = limits::MAX_KEY_BYTES), regex(pattern = openapi::KEY_PATTERN))]
    uniq: Option<String>,
    /// With `uniq`: once the job holding the key has succeeded, the key goes on answering
    /// with it for this many ms.
    #[schemars(range(min = 1, max = limits::MAX_DURATION_MS))]
    uniq_for_ms: Option<u64>,
    /// With `uniq`: the job waits this many ms; enqueued again with the key before it has
    /// started, that job takes the new input and waits again (not with `delay_ms`, `at_ms`).
    #[schemars(range(min = 1, max = limits::MAX_DURATION_MS))]
    debounce_ms: Option<u64>,
    /// With `uniq`: at most `limit` jobs with the key per `interval_ms`; beyond, the latest
    /// one made is answered.
    throttle: Option<crate::groups::RateLimit>,
    /// A job that has not started this many ms from now ends `expired` and never runs.
    #[schemars(range(min = 1, max = limits::MAX_DURATION_MS))]
    expires_in_ms: Option<u64>,
    /// The same as a time, ms since the epoch: not passed on the queue's clock, at most 10
    /// years ahead (not with `expires_in_ms`).
    #[schemars(range(min = 1, max = limits::MAX_AT_MS))]
    expires_at_ms: Option<u64>,
    /// Labels to find the job by.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_TAGS), inner(length(min = 1, max = limits::MAX_KEY_BYTES), regex(pattern = openapi::KEY_PATTERN)))]
    tags: Vec<String>,
    /// The job's group (a tenant, customer or document key): the function's jobs are run
    /// round robin across groups, each within its own limits.
    #[schemars(length(min = 1, max = limits::MAX_KEY_BYTES), regex(pattern = openapi::GROUP_PATTERN))]
    group: Option<String>,
    /// Jobs (of any function) that must succeed before this one runs.
    #[serde(default)]
    #[schemars(length(max = limits::MAX_DEPENDENCIES), inner(regex(pattern = openapi::job_id_pattern())))]
    after: Vec<String>,
}

impl JobRequest {
    /// The input bytes and options, or what is wrong with them.
    fn into_job(self) -> Result<(Vec<u8>, EnqueueOptions), String> {
        let (input, mut options) = JobFields {
            input: self.input,
            input_base64: self.input_base64,
            input_json: self.input_json,
            priority: self.priority,
            delay_ms: self.delay_ms,
            at_ms: self.at_ms,
            attempts: self.attempts,
            timeout_ms: self.timeout_ms,
            retention_ms: self.retention_ms,
            failed_retention_ms: self.failed_retention_ms,
            tags: self.tags,
            group: self.group,
        }
        .into_job()?;
        options.uniq = self.uniq;
        options.uniq_for = self.uniq_for_ms.map(Duration::from_millis);
        options.debounce = self.debounce_ms.map(Duration::from_millis);
        options.expires_in = self.expires_in_ms.map(Duration::from_millis);
        options.expires_at = self
            .expires_at_ms
            .and_then(|ms| std::time::UNIX_EPOCH.checked_add(Duration::from_millis(ms)));
        options.throttle = self
            .throttle
            .map(|t| (t.limit, Duration::from_millis(t.interval_ms)));
        options.after = self
            .after
            .iter()
            .map(|id| {
                id.parse::<JobId>()
                    .map_err(|e| format!("after: {id:?} is not a job id: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok((input, options))
    }
}

fn function_of(name: &str) -> ApiResult<FunctionName> {
    FunctionName::new(name).map_err(|e| ApiError::bad_input(e.to_string()))
}

fn job_id_of(id: &str) -> ApiResult<JobId> {
    id.parse::<JobId>()
        .map_err(|e| ApiError::bad_input(e.to_string()))
}

/// The whole-number fields of a job request.
const WHOLE_NUMBER_FIELDS: [&str; 11] = [
    "expires_in_ms",
    "expires_at_ms",
    "uniq_for_ms",
    "debounce_ms",
    "priority",
    "attempts",
    "timeout_ms",
    "retention_ms",
    "failed_retention_ms",
    "delay_ms",
    "at_ms",
];

/// Writes the whole-number fields of job request `job` that JSON gives as a number with a
/// fraction of zero (`471.0`, an integer to JSON Schema) as integers, which is what the
/// typed request reads; `input_json` and the rest are left as sent.
pub(crate) fn whole_numbers(job: &mut Value) {
    whole_numbers_in(job, &WHOLE_NUMBER_FIELDS);
    if let Some(throttle) = job.get_mut("throttle") {
        whole_numbers_in(throttle, &["limit", "interval_ms"]);
    }
}

/// Writes the fields `names` of object `object` that JSON gives as a number with a fraction
/// of zero as integers (see [`whole_numbers`]).
pub(crate) fn whole_numbers_in(object: &mut Value, names: &[&str]) {
    let Some(fields) = object.as_object_mut() else {
        return;
    };
    for name in names {
        let Some(value) = fields.get_mut(*name) else {
            continue;
        };
        let Some(number) = value.as_f64().filter(|_| value.is_f64()) else {
            continue;
        };
        if number.fract() == 0.0 && number.abs() < 2f64.powi(53) {
            // Exact: a whole number of less than 2^53 converts without loss.
            *value = Value::from(number as i64);
        }
    }
}

/// Reads a JSON body as `T` once its jobs' whole numbers are integers (see
/// [`whole_numbers`]); `jobs` says where the jobs are.
fn read_body<T: serde::de::DeserializeOwned>(
    body: Result<Json<Value>, JsonRejection>,
    jobs: impl FnOnce(&mut Value) -> Vec<&mut Value>,
) -> Result<T, ApiError> {
    let Json(mut value) = body?;
    for job in jobs(&mut value) {
        whole_numbers(job);
    }
    read_value(value)
}

/// Reads JSON `value` as `T`, naming the field that is wrong.
pub(crate) fn read_value<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        ApiError::bad_input(format!(
            "Failed to deserialize the JSON body into the target type: {e}"
        ))
    })
}

/// `POST /v1/functions/{function}/jobs`: enqueues one job.
pub(crate) async fn enqueue(
    State(state): State<AppState>,
    Path(function): Path<String>,
    body: Result<Json<Value>, JsonRejection>,
) -> ApiResult {
    let function = function_of(&function)?;
    let request: JobRequest = read_body(body, |job| vec![job])?;
    let (input, options) = request.into_job().map_err(ApiError::bad_input)?;
    let mut enqueued = state
        .client
        .submit(&function, &[(input.as_slice(), options)])
        .await?;
    let job = enqueued
        .pop()
        .ok_or_else(|| ApiError::bad_input("the job was not enqueued"))?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "id": job.id.to_string(), "created": job.created })),
    )
        .into_response())
}

/// The body of a bulk enqueue.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkRequest {
    /// The jobs, enqueued in one atomic call: all or none.
    #[schemars(length(max = limits::MAX_BULK_JOBS))]
    jobs: Vec<JobRequest>,
}

/// `POST /v1/functions/{function}/bulk`: enqueues many jobs of one function, all or none.
pub(crate) async fn bulk(
    State(state): State<AppState>,
    Path(function): Path<String>,
    body: Result<Json<Value>, JsonRejection>,
) -> ApiResult {
    let function = function_of(&function)?;
    let request: BulkRequest = read_body(body, |body| match body.get_mut("jobs") {
        Some(Value::Array(jobs)) => jobs.iter_mut().collect(),
        _ => Vec::new(),
    })?;
    if request.jobs.len() > MAX_BULK_JOBS {
        return Err(ApiError::bad_input(format!(
            "{} jobs are more than the {MAX_BULK_JOBS} one request may carry; send several",
            request.jobs.len()
        )));
    }
    let jobs = request
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, job)| {
            job.into_job()
                .map_err(|e| ApiError::bad_input(format!("job {}: {e}", i + 1)))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    let borrowed: Vec<(&[u8], EnqueueOptions)> = jobs
        .iter()
        .map(|(input, options)| (input.as_slice(), options.clone()))
        .collect();
    let enqueued = state.client.submit(&function, &borrowed).await?;
    let list: Vec<Value> = enqueued
        .iter()
        .map(|job| json!({ "id": job.id.to_string(), "created": job.created }))
        .collect();
    Ok((StatusCode::CREATED, Json(json!({ "jobs": list }))).into_response())
}

/// A job as the API answers it: the record's fields (PROTOCOL.md, "The job record"), its
/// id, and a succeeded job's output as `output_base64` and, when it is UTF-8, `output`; a
/// sealed output the server has no key for as `output_encrypted` (the key's id) instead.
pub fn job_json(status: &JobStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(key) = (status.output.as_deref()).and_then(wasmgear_proto::crypto::sealed_with) {
        value["output_encrypted"] = key.into();
    } else if let Some(output) = &status.output {
        value["output_base64"] = BASE64.encode(output).into();
        if let Ok(text) = std::str::from_utf8(output) {
            value["output"] = text.into();
        }
    }
    value
}

/// `GET /v1/jobs/{id}`.
pub(crate) async fn status(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let id = job_id_of(&id)?;
    let status = state.client.status(&id).await?;
    Ok(Json(job_json(&status)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitQuery {
    timeout_ms: Option<u64>,
}

/// `GET /v1/jobs/{id}/wait?timeout_ms=N`: a long poll. 200 and the job once it has ended;
/// 202 and the job as it is when the timeout passes first (or the server shuts down).
pub(crate) async fn wait(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<WaitQuery>, QueryRejection>,
) -> ApiResult {
    let id = job_id_of(&id)?;
    let Query(query) = query?;
    let timeout = query.timeout_ms.map_or(DEFAULT_WAIT, Duration::from_millis);
    if timeout > MAX_WAIT {
        return Err(ApiError::bad_input(format!(
            "timeout_ms {} is longer than the longest wait, {} ms",
            timeout.as_millis(),
            MAX_WAIT.as_millis()
        )));
    }
    let waited = tokio::select! {
        waited = state.client.wait(&id, Some(timeout), |_| {}) => Some(waited),
        () = state.shutdown.cancelled() => None,
    };
    match waited {
        Some(Ok(status)) => Ok(Json(job_json(&status)).into_response()),
        Some(Err(QueueError::WaitTimedOut(_))) | None => {
            let status = state.client.status(&id).await?;
            Ok((StatusCode::ACCEPTED, Json(job_json(&status))).into_response())
        }
        Some(Err(e)) => Err(e.into()),
    }
}

/// `GET /v1/jobs/{id}/logs`: the job's log as text.
pub(crate) async fn logs(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let id = job_id_of(&id)?;
    // A job that is gone has no log: say so rather than answer an empty one.
    state.client.status(&id).await?;
    let log = state.client.logs(&id).await?;
    Ok(log.into_response())
}

/// `POST /v1/jobs/{id}/cancel`.
pub(crate) async fn cancel(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult {
    let id = job_id_of(&id)?;
    let outcome = match state.client.cancel(&id).await? {
        CancelOutcome::Cancelled => json!({ "outcome": "cancelled" }),
        CancelOutcome::Stopping => json!({ "outcome": "stopping" }),
        CancelOutcome::AlreadyEnded(state) => {
            json!({ "outcome": "already-ended", "state": state.as_str() })
        }
    };
    Ok(Json(outcome).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetryQuery {
    /// Drop the job's checkpoint: it starts from the beginning.
    #[serde(default)]
    fresh: bool,
}

/// `POST /v1/jobs/{id}/retry[?fresh=true]`: runs a failed or cancelled job again, resuming
/// from its checkpoint unless `fresh`.
pub(crate) async fn retry(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<RetryQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    let id = job_id_of(&id)?;
    let options = wasmgear_client::RetryOptions { fresh: query.fresh };
    let retried = state.client.retry_with(&id, options).await?;
    if !retried {
        let status = state.client.status(&id).await?;
        return Err(ApiError::conflict(format!(
            "job {id} is {}: only a failed or cancelled job can be retried",
            status.record.state.as_str()
        )));
    }
    Ok(Json(json!({ "retried": true })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    function: Option<String>,
}

/// `GET /v1/events[?function=F]`: Server-Sent Events, one per queue event, named by its
/// kind (`create`, `start`, `progress`, `finish`...), its data the event's JSON with the
/// function added.
pub(crate) async fn events(
    State(state): State<AppState>,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    let function = query.function.as_deref().map(function_of).transpose()?;
    let events = state.client.events(function.as_ref()).await?;
    let shutdown = state.shutdown.clone();
    let stream = events
        .map(|published| {
            let mut data: Value = serde_json::from_str(&published.json).unwrap_or_default();
            if let Value::Object(fields) = &mut data {
                fields.insert("function".into(), published.function.as_str().into());
            }
            Ok::<_, Infallible>(
                SseEvent::default()
                    .event(published.event.kind())
                    .data(data.to_string()),
            )
        })
        .take_until(async move { shutdown.cancelled().await });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /v1/queues`: every function's counts per state and live workers.
pub(crate) async fn queues(State(state): State<AppState>) -> ApiResult {
    Ok(Json(state.client.queues().await?).into_response())
}

/// `GET /v1/workers`: the live workers and what they advertise.
pub(crate) async fn workers(State(state): State<AppState>) -> ApiResult {
    let workers = state.client.workers().await?;
    let list: Vec<Value> = workers
        .iter()
        .map(|w| {
            let ad = match &w.ad {
                Ok(ad) => serde_json::to_value(ad).unwrap_or_default(),
                Err(text) => serde_json::from_str(text).unwrap_or_default(),
            };
            json!({ "id": w.id, "expires_ms": w.expires_ms, "advertised": ad })
        })
        .collect();
    Ok(Json(list).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailuresQuery {
    function: Option<String>,
}

/// `GET /v1/failures[?function=F]`: failure groups and their counts.
pub(crate) async fn failures(
    State(state): State<AppState>,
    query: Result<Query<FailuresQuery>, QueryRejection>,
) -> ApiResult {
    let Query(query) = query?;
    let function = query.function.as_deref().map(function_of).transpose()?;
    if let Some(function) = &function {
        state.client.check_function(function).await?;
    }
    Ok(Json(state.client.failure_groups(function.as_ref()).await?).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatsQuery {
    /// A day as YYYY-MM-DD (UTC); today when left out.
    day: Option<String>,
}

/// `GET /v1/functions/{function}/stats[?day=YYYY-MM-DD]`.
pub(crate) async fn stats(
    State(state): State<AppState>,
    Path(function): Path<String>,
    query: Result<Query<StatsQuery>, QueryRejection>,
) -> ApiResult {
    let function = function_of(&function)?;
    let Query(query) = query?;
    let day = match &query.day {
        Some(date) => wasmgear_proto::units::day_of_date(date)
            .map_err(|e| ApiError::bad_input(format!("day: {e}")))?,
        None => wasmgear_proto::units::today(),
    };
    state.client.check_function(&function).await?;
    Ok(Json(state.client.stats(&function, day).await?).into_response())
}
