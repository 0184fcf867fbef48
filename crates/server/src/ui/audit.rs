//! The audit page (`/ui/audit`, for `admin` tokens): who did what through the API, the
//! dashboard and the CLI's operate commands, and what was refused, newest first.

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;
use serde::Deserialize;

use super::error::UiError;
use super::layout::{Nav, Page, encode, time};
use crate::AppState;
use crate::tokens::{Caller, Role};

/// Entries per page.
const PAGE: usize = 100;

#[derive(Deserialize)]
pub(super) struct AuditQuery {
    before: Option<String>,
}

pub(super) async fn page(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Query(query): Query<AuditQuery>,
) -> Result<Response, UiError> {
    if caller.role != Role::Admin {
        return Err(UiError::Forbidden(format!(
            "token {:?} has role {}; the audit log needs admin",
            caller.name, caller.role
        )));
    }
    let entries = state
        .client
        .audit_log(PAGE, query.before.as_deref())
        .await?;
    let now = wasmgear_proto::units::now_ms();
    let main = html! {
        h1 { "Audit log" }
        @if entries.is_empty() {
            p { "Nothing yet: actions through the API, this dashboard and the CLI's operate commands are listed here." }
        } @else {
            table class="audit" {
                thead { tr { th { "When" } th { "Who" } th { "Action" } th { "Target" } th { "Outcome" } } }
                tbody {
                    @for e in &entries {
                        tr class=[e.outcome.starts_with("refused").then_some("refused")] {
                            td { (time(Some(e.at_ms), now)) }
                            td { (e.actor) }
                            td { code { (e.action) } }
                            td { (e.target) }
                            td { (e.outcome) }
                        }
                    }
                }
            }
            @if entries.len() == PAGE {
                @if let Some(last) = entries.last() {
                    p { a href={ "/ui/audit?before=" (encode(&last.id)) } { "Older entries" } }
                }
            }
        }
    };
    let page = Page {
        title: "Audit log",
        nav: Nav::Audit,
        live: None,
    };
    Ok(page.respond(&headers, main))
}
