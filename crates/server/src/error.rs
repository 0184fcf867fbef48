//! The API's errors: JSON with the CLI's classes and exit codes.

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use wasmgear_client::{ErrorClass, QueueError};

/// An error answer: `{"error": {"class", "message", "exit_code"}}` with its status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    class: &'static str,
    exit_code: i32,
    message: String,
}

impl ApiError {
    fn of_class(class: ErrorClass, message: impl Into<String>) -> Self {
        let status = match class {
            ErrorClass::BadInput => StatusCode::BAD_REQUEST,
            ErrorClass::NotFound => StatusCode::NOT_FOUND,
            ErrorClass::Conflict => StatusCode::CONFLICT,
            ErrorClass::Unreachable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorClass::TimedOut => StatusCode::GATEWAY_TIMEOUT,
            ErrorClass::Failed => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError {
            status,
            class: class.as_str(),
            exit_code: class.exit_code(),
            message: message.into(),
        }
    }

    /// Bad input: nothing was changed.
    pub fn bad_input(message: impl Into<String>) -> Self {
        ApiError::of_class(ErrorClass::BadInput, message)
    }

    /// A well-formed request the queue's state refuses (409): nothing was changed.
    pub fn conflict(message: impl Into<String>) -> Self {
        ApiError::of_class(ErrorClass::Conflict, message)
    }

    /// Something on the server's side went wrong (500).
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::of_class(ErrorClass::Failed, message)
    }

    /// A request without the right token (401).
    pub fn unauthorized(message: &str) -> Response {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            class: "unauthorized",
            exit_code: ErrorClass::BadInput.exit_code(),
            message: message.to_string(),
        }
        .into_response()
    }

    /// A caller whose token may not do this (403): its role, or the functions it is
    /// limited to, do not allow it.
    pub fn forbidden(message: &str) -> Response {
        ApiError {
            status: StatusCode::FORBIDDEN,
            class: "forbidden",
            exit_code: ErrorClass::BadInput.exit_code(),
            message: message.to_string(),
        }
        .into_response()
    }

    /// A path or method the API does not have (404).
    pub fn route_not_found() -> Response {
        ApiError::of_class(
            ErrorClass::NotFound,
            format!(
                "no such route; the routes are listed at {}",
                crate::OPENAPI_PATH
            ),
        )
        .into_response()
    }
}

impl From<QueueError> for ApiError {
    fn from(error: QueueError) -> Self {
        ApiError::of_class(error.class(), error.to_string())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let mut error = ApiError::bad_input(rejection.body_text());
        // 413 for a body over the limit, 415 without `Content-Type: application/json`; 400
        // for the rest (malformed JSON, a missing or unknown field, a value of the wrong
        // type), as every other bad input.
        if status == StatusCode::PAYLOAD_TOO_LARGE || status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            error.status = status;
        }
        error
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_input(rejection.body_text())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {
                "class": self.class,
                "message": self.message,
                "exit_code": self.exit_code,
            }
        });
        (self.status, Json(body)).into_response()
    }
}
