//! Who may call which route: the caller is found from the bearer token (or, for a read, the
//! dashboard's cookie), the route's role ([`crate::ROUTE_ROLES`]) is checked against the
//! caller's, and a token limited to some functions may touch only routes about those
//! functions' jobs. Refusals are 403 with the reason. Every change of role `operate` or
//! `admin` that is done, and every refusal of a token, is appended to the audit log.

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{HeaderMap, Method, header::AUTHORIZATION};
use axum::middleware::Next;
use axum::response::Response;
use wasmgear_client::FunctionName;
use wasmgear_client::audit::AuditEntry;

use crate::error::ApiError;
use crate::tokens::{Caller, Role};
use crate::{AppState, Auth, ROUTE_ROLES, same_secret};

impl Auth {
    /// The caller whose token `given` is, if it is one this server accepts (anyone, on a
    /// server without authentication).
    pub(crate) fn caller(&self, given: Option<&str>) -> Option<Caller> {
        match self {
            Auth::None => Some(Caller::admin("anonymous")),
            Auth::Token(token) => given
                .filter(|g| same_secret(g.trim().as_bytes(), token.as_bytes()))
                .map(|_| Caller::admin("api-token")),
            Auth::Tokens(tokens) => given.and_then(|g| tokens.identify(g)).cloned(),
        }
    }
}

/// The role a route needs (`None`: an open route).
pub(crate) fn route_role(method: &Method, path: &str) -> Option<Role> {
    let method = method.as_str().to_ascii_lowercase();
    ROUTE_ROLES
        .iter()
        .find(|(m, p, _)| *m == method && *p == path)
        .and_then(|(_, _, role)| *role)
}

/// The bearer token of `headers`, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
}

/// The API's guard: identifies the caller, checks its role and functions, lets the request
/// through with the [`Caller`] in its extensions, and audits it.
pub(crate) async fn authorize(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let needed = route_role(&method, &route).unwrap_or(Role::Admin);
    // A read may carry the token in the dashboard's cookie, as a browser's event stream
    // does; a change may not (a cookie goes with requests other sites make).
    let from_cookie = (method == Method::GET)
        .then(|| crate::ui::cookie_caller(&state.auth, request.headers()))
        .flatten();
    let caller = match from_cookie {
        Some(caller) => caller,
        None => match (
            state.auth.caller(bearer(request.headers())),
            bearer(request.headers()),
        ) {
            (Some(caller), _) => caller,
            (None, Some(_)) => {
                return ApiError::unauthorized("the bearer token is not one this server accepts");
            }
            (None, None) => {
                return ApiError::unauthorized(
                    "send a token of the server as `Authorization: Bearer TOKEN`",
                );
            }
        },
    };
    let target = request.uri().path().to_string();
    let (mut parts, body) = request.into_parts();
    let params = RawPathParams::from_request_parts(&mut parts, &state)
        .await
        .map(|p| {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let query = parts.uri.query().unwrap_or_default().to_string();
    let mut request = Request::from_parts(parts, body);
    let action = format!("{method} {route}");
    if let Err(reason) = permitted(&caller, needed, &route, &params, &query) {
        audit(
            &state,
            &caller,
            &action,
            &target,
            &format!("refused: {reason}"),
            "",
        )
        .await;
        return ApiError::forbidden(&reason);
    }
    request.extensions_mut().insert(caller.clone());
    let response = next.run(request).await;
    // A change that was done (one refused as bad input changed nothing, and writes
    // nothing).
    if method != Method::GET
        && matches!(needed, Role::Operate | Role::Admin)
        && response.status().is_success()
    {
        audit(&state, &caller, &action, &target, "ok", "").await;
    }
    response
}

/// Appends an action of `caller` to the audit log; a failure to write it is logged, not
/// answered (the action itself is done).
pub(crate) async fn audit(
    state: &AppState,
    caller: &Caller,
    action: &str,
    target: &str,
    outcome: &str,
    via: &str,
) {
    let actor = format!("{via}token {}", caller.name);
    let entry = AuditEntry::new(actor, action, target, outcome);
    if let Err(error) = state.client.audit(&entry).await {
        tracing::warn!(%error, action, target, "cannot write the audit log entry");
    }
}

/// Whether `caller` may use `route` (which needs `needed`) with these path `params` and
/// `query`; else why not.
pub(crate) fn permitted(
    caller: &Caller,
    needed: Role,
    route: &str,
    params: &[(String, String)],
    query: &str,
) -> Result<(), String> {
    if !caller.role.allows(needed) {
        return Err(format!(
            "token {:?} has role {}; this route needs {needed}",
            caller.name, caller.role
        ));
    }
    if caller.functions.is_none() {
        return Ok(());
    }
    let limited = || {
        format!(
            "token {:?} may touch only functions {}",
            caller.name,
            caller.functions_text()
        )
    };
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let function = if let Some(function) = param("function") {
        Some(function.to_string())
    } else if route.starts_with("/v1/jobs/") {
        // An id that does not read is the handler's to refuse (it touches no job).
        param("id")
            .and_then(|id| id.parse::<wasmgear_client::JobId>().ok())
            .map(|id| id.function.to_string())
    } else if route == "/v1/events" || route == "/v1/failures" {
        let asked = url_query_function(query);
        if asked.is_none() {
            return Err(format!(
                "{}: follow one of them with ?function=NAME",
                limited()
            ));
        }
        asked
    } else {
        return Err(format!("{}; {route} spans every function", limited()));
    };
    match function.map(|f| FunctionName::new(&f)) {
        Some(Ok(function)) if !caller.may_touch(&function) => {
            Err(format!("{}, not {function}", limited()))
        }
        _ => Ok(()),
    }
}

fn url_query_function(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        (name == "function").then(|| {
            percent_encoding::percent_decode_str(value)
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn caller(role: Role, functions: Option<&[&str]>) -> Caller {
        Caller {
            name: "t".into(),
            role,
            functions: functions.map(|f| {
                f.iter()
                    .map(|f| FunctionName::new(*f).unwrap())
                    .collect::<BTreeSet<_>>()
            }),
        }
    }

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_route_but_the_open_ones_names_a_role() {
        for (method, path, role) in ROUTE_ROLES {
            let open = ["/healthz", "/readyz"].contains(path);
            assert_eq!(role.is_none(), open, "{method} {path}");
            if *method != "get" {
                assert_ne!(*role, Some(Role::Read), "{method} {path} changes things");
            }
        }
    }

    #[test]
    fn a_scoped_token_touches_only_its_functions() {
        let billing = caller(Role::Enqueue, Some(&["invoice"]));
        let enqueue = "/v1/functions/{function}/jobs";
        assert!(
            permitted(
                &billing,
                Role::Enqueue,
                enqueue,
                &params(&[("function", "invoice")]),
                ""
            )
            .is_ok()
        );
        let other = permitted(
            &billing,
            Role::Enqueue,
            enqueue,
            &params(&[("function", "payroll")]),
            "",
        );
        assert!(other.unwrap_err().contains("not payroll"));
        let job = "/v1/jobs/{id}";
        assert!(
            permitted(
                &billing,
                Role::Read,
                job,
                &params(&[("id", "invoice:3")]),
                ""
            )
            .is_ok()
        );
        assert!(
            permitted(
                &billing,
                Role::Read,
                job,
                &params(&[("id", "payroll:3")]),
                ""
            )
            .is_err()
        );
        assert!(
            permitted(&billing, Role::Read, "/v1/queues", &[], "")
                .unwrap_err()
                .contains("spans")
        );
        assert!(permitted(&billing, Role::Read, "/v1/events", &[], "").is_err());
        assert!(permitted(&billing, Role::Read, "/v1/events", &[], "function=invoice").is_ok());
        assert!(permitted(&billing, Role::Read, "/v1/events", &[], "function=payroll").is_err());
        assert!(
            permitted(
                &billing,
                Role::Operate,
                "/v1/jobs/{id}/cancel",
                &params(&[("id", "invoice:3")]),
                ""
            )
            .unwrap_err()
            .contains("needs operate")
        );
        let reader = caller(Role::Read, None);
        assert!(permitted(&reader, Role::Read, "/v1/queues", &[], "").is_ok());
        assert!(
            permitted(
                &reader,
                Role::Enqueue,
                enqueue,
                &params(&[("function", "x")]),
                ""
            )
            .unwrap_err()
            .contains("role read")
        );
    }
}
