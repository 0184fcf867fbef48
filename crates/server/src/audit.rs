//! `GET /v1/audit`: the audit log, newest first (role `admin`).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::AppState;
use crate::error::ApiError;

/// How many entries a page has when the request does not say.
pub(crate) const DEFAULT_AUDIT_PAGE: usize = 100;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    /// How many entries, 1 to 1000.
    limit: Option<usize>,
    /// Entries written before this one (its id), for the next page.
    before: Option<String>,
}

/// `GET /v1/audit[?limit=N][&before=ID]`: `{"entries": [...]}`, newest first.
pub(crate) async fn list(
    State(state): State<AppState>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query?;
    let entries = state
        .client
        .audit_log(
            query.limit.unwrap_or(DEFAULT_AUDIT_PAGE),
            query.before.as_deref(),
        )
        .await?;
    Ok(Json(serde_json::json!({ "entries": entries })).into_response())
}
