//! Health checks for orchestrators, without authentication: `/healthz` (the process is up)
//! and `/readyz` (Redis answers, so the API can serve).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::AppState;

/// How long `/readyz` waits for Redis' answer.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /healthz`: 200 while the process serves requests.
pub(crate) async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 when Redis answers `PING` within 2 s, else 503 with the reason.
pub(crate) async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    match state.client.ping(READY_TIMEOUT).await {
        Ok(()) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "unready", "reason": error.to_string() })),
        ),
    }
}
