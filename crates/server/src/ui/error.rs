//! What can go wrong on the dashboard, as [`UiError`]: each a page saying what happened in
//! words, with its status. Handlers return it with `?`; it renders itself.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use wasmgear_client::QueueError;
use wasmgear_proto::NameError;

use super::layout::Page;

/// A page that could not be shown or an action that was not done.
#[derive(Debug)]
pub(crate) enum UiError {
    /// The queue answered with an error (no such job: 404; anything else: 503).
    Queue(QueueError),
    /// The path names no valid function (400).
    BadFunction(NameError),
    /// The path names no valid job id (400).
    BadJobId(NameError),
    /// An action from a browser that has not signed in (401).
    NotSignedIn,
    /// A form without this server's anti-forgery value (403).
    Forged,
    /// The action cannot be done to the job as it is (409), in words.
    NotDone(String),
    /// The signed-in token's role does not allow the action (403), in words.
    Forbidden(String),
}

impl From<QueueError> for UiError {
    fn from(error: QueueError) -> Self {
        UiError::Queue(error)
    }
}

impl UiError {
    fn status(&self) -> StatusCode {
        match self {
            UiError::Queue(
                QueueError::NoSuchJob(_) | QueueError::NoSuchFlow(_) | QueueError::NoSuchBatch(_),
            ) => StatusCode::NOT_FOUND,
            UiError::Queue(error) if error.class() == wasmgear_client::ErrorClass::BadInput => {
                StatusCode::BAD_REQUEST
            }
            UiError::Queue(_) => StatusCode::SERVICE_UNAVAILABLE,
            UiError::BadFunction(_) | UiError::BadJobId(_) => StatusCode::BAD_REQUEST,
            UiError::NotSignedIn => StatusCode::UNAUTHORIZED,
            UiError::Forged | UiError::Forbidden(_) => StatusCode::FORBIDDEN,
            UiError::NotDone(_) => StatusCode::CONFLICT,
        }
    }

    /// The page's title and its `main`.
    fn page(&self) -> (&'static str, Markup) {
        match self {
            UiError::Queue(error) => (
                "Error",
                html! {
                    h1 { "Cannot show this" }
                    p class="error" role="alert" { (error.to_string()) }
                    p { a href="/ui" { "Back to the queues" } }
                },
            ),
            UiError::BadFunction(error) => (
                "Bad function",
                html! { p class="error" { (error.to_string()) } },
            ),
            UiError::BadJobId(error) => (
                "Bad job id",
                html! { p class="error" { (error.to_string()) } },
            ),
            UiError::NotSignedIn => (
                "Sign in first",
                html! { p { "Actions need the API token: " a href="/ui/login" { "sign in" } "." } },
            ),
            UiError::Forbidden(reason) => (
                "Refused",
                html! {
                    p class="error" role="alert" { "Not allowed: " (reason) "." }
                    p { a href="/ui" { "Back to the queues" } }
                },
            ),
            UiError::Forged => (
                "Refused",
                html! {
                    p class="error" role="alert" {
                        "This form did not come from this dashboard: reload the page and try again."
                    }
                },
            ),
            UiError::NotDone(message) => (
                "Not done",
                html! {
                    p class="error" role="alert" { (message) }
                    p { a href="javascript:history.back()" { "Back" } }
                },
            ),
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (title, main) = self.page();
        (self.status(), Page::plain(title).document(main)).into_response()
    }
}
