//! A function's groups over HTTP: `GET /v1/functions/{function}/groups` lists them (the
//! deepest first), `PUT /v1/functions/{function}/groups/{group}` sets one group's own
//! limits, or pauses or resumes it.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use wasmgear_client::GroupSetting;
use wasmgear_proto::limits;

use crate::AppState;
use crate::error::ApiError;

type ApiResult<T = Response> = Result<T, ApiError>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupsQuery {
    /// The most groups to list, the deepest first (20 when left out).
    limit: Option<usize>,
    /// One group to list alone.
    group: Option<String>,
}

/// `GET /v1/functions/{function}/groups[?limit=N][&group=KEY]`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(function): Path<String>,
    query: Result<Query<GroupsQuery>, QueryRejection>,
) -> ApiResult {
    let function = wasmgear_client::FunctionName::new(function)
        .map_err(|e| ApiError::bad_input(e.to_string()))?;
    let Query(query) = query?;
    let limit = query.limit.unwrap_or(20);
    state.client.check_function(&function).await?;
    let groups = state
        .client
        .groups(&function, limit, query.group.as_deref())
        .await?;
    Ok(Json(groups).into_response())
}

/// What `PUT /v1/functions/{function}/groups/{group}` changes: each field given changes that
/// setting (`null` clears the group's own, so that the function's default for every group
/// applies), each left out keeps it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupRequest {
    /// The group's most jobs running at once over all workers (1: its jobs run one at a
    /// time, in order).
    #[serde(default, deserialize_with = "given")]
    #[schemars(range(min = 1, max = limits::MAX_WHOLE))]
    concurrency: Option<Option<u64>>,
    /// The group's most leases per interval.
    #[serde(default, deserialize_with = "given")]
    rate_limit: Option<Option<RateLimit>>,
    /// `true` pauses the group (its jobs wait, the other groups go on), `false` resumes it.
    paused: Option<bool>,
}

/// A rate limit: at most `limit` leases per `interval_ms`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateLimit {
    /// The most per interval.
    #[schemars(range(min = 1, max = limits::MAX_WHOLE))]
    pub(crate) limit: u64,
    /// The interval, ms.
    #[schemars(range(min = 1, max = limits::MAX_DURATION_MS))]
    pub(crate) interval_ms: u64,
}

/// A field that is there, `null` or not: `Some(None)` for `null` (a field left out is
/// `None`, by `default`).
fn given<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl GroupRequest {
    fn settings(&self) -> Result<Vec<GroupSetting>, String> {
        let mut settings = Vec::new();
        if let Some(cap) = self.concurrency {
            if cap == Some(0) || cap.is_some_and(|n| n > limits::MAX_WHOLE) {
                return Err(format!(
                    "concurrency must be 1..={}, or null",
                    limits::MAX_WHOLE
                ));
            }
            settings.push(GroupSetting::Concurrency(cap));
        }
        if let Some(rate) = &self.rate_limit {
            let rate = match rate {
                None => None,
                Some(RateLimit { limit, interval_ms }) => {
                    if *limit == 0 || *limit > limits::MAX_WHOLE {
                        return Err(format!(
                            "rate_limit.limit must be 1..={}",
                            limits::MAX_WHOLE
                        ));
                    }
                    if *interval_ms == 0 || *interval_ms > limits::MAX_DURATION_MS {
                        return Err("rate_limit.interval_ms must be 1 ms to 10 years".into());
                    }
                    Some((*limit, Duration::from_millis(*interval_ms)))
                }
            };
            settings.push(GroupSetting::RateLimit(rate));
        }
        if let Some(paused) = self.paused {
            settings.push(GroupSetting::Paused(paused));
        }
        Ok(settings)
    }
}

/// `PUT /v1/functions/{function}/groups/{group}`: the group's own settings afterwards.
pub(crate) async fn configure(
    State(state): State<AppState>,
    Path((function, group)): Path<(String, String)>,
    body: Result<Json<Value>, JsonRejection>,
) -> ApiResult {
    let function = wasmgear_client::FunctionName::new(function)
        .map_err(|e| ApiError::bad_input(e.to_string()))?;
    let Json(mut body) = body?;
    // Whole numbers JSON writes as 3.0 (JSON Schema's integers) read as integers.
    crate::api::whole_numbers_in(&mut body, &["concurrency"]);
    if let Some(rate) = body.get_mut("rate_limit") {
        crate::api::whole_numbers_in(rate, &["limit", "interval_ms"]);
    }
    let request: GroupRequest = crate::api::read_value(body)?;
    let settings = request.settings().map_err(ApiError::bad_input)?;
    wasmgear_client::options::check_group(&group)?;
    state.client.check_function(&function).await?;
    let own = state
        .client
        .configure_group(&function, &group, &settings)
        .await?;
    Ok(Json(own).into_response())
}
