//! Signing in to the dashboard: the sign-in page, the cookie that keeps the API token in the
//! browser (`HttpOnly`, `SameSite=Strict`, its value percent-encoded by the cookie crate),
//! signing out, and the guard that sends a browser without it to the sign-in page.

use axum::Form;
use axum::extract::{MatchedPath, Query, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use cookie::{Cookie, SameSite};
use maud::html;
use serde::Deserialize;

use super::error::UiError;
use super::layout::{Page, encode};
use crate::tokens::{Caller, Role};
use crate::{AppState, Auth};

/// The cookie that holds the token in the browser.
const TOKEN_COOKIE: &str = "wasmgear_token";

/// The (decoded) value of the dashboard's cookie in `headers`, if any.
fn token_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(Cookie::split_parse_encoded)
        .filter_map(Result::ok)
        .find(|cookie| cookie.name() == TOKEN_COOKIE)
        .map(|cookie| cookie.value().to_string())
}

/// The caller whose token `headers` carry in the dashboard's cookie, if any (anyone, on a
/// server without authentication).
pub(crate) fn cookie_caller(auth: &Auth, headers: &HeaderMap) -> Option<Caller> {
    match auth {
        Auth::None => auth.caller(None),
        _ => auth.caller(Some(&token_cookie(headers)?)),
    }
}

/// Lets a signed-in browser through: pages of one who is not go to the sign-in page;
/// actions are refused, and so are those the token's role does not allow (it needs
/// `operate`). Each action is written to the audit log.
pub(super) async fn signed_in(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(caller) = cookie_caller(&state.auth, request.headers()) else {
        if request.method() == Method::GET {
            let next_page = encode(request.uri().path());
            return Redirect::to(&format!("/ui/login?next={next_page}")).into_response();
        }
        return UiError::NotSignedIn.into_response();
    };
    let mut request = request;
    request.extensions_mut().insert(caller.clone());
    let path = request.uri().path().to_string();
    if request.method() == Method::GET || path == "/ui/logout" {
        return next.run(request).await;
    }
    let action = format!(
        "POST {}",
        request
            .extensions()
            .get::<MatchedPath>()
            .map_or(path.as_str(), |m| m.as_str())
    );
    let target = path.trim_start_matches("/ui").to_string();
    if !caller.role.allows(Role::Operate) {
        let reason = format!(
            "token {:?} has role {}; actions need operate",
            caller.name, caller.role
        );
        let outcome = format!("refused: {reason}");
        crate::access::audit(&state, &caller, &action, &target, &outcome, "dashboard, ").await;
        return UiError::Forbidden(reason).into_response();
    }
    let response = next.run(request).await;
    let status = response.status();
    if status.is_success() || status.is_redirection() {
        crate::access::audit(&state, &caller, &action, &target, "ok", "dashboard, ").await;
    }
    response
}

#[derive(Deserialize)]
pub(super) struct NextQuery {
    next: Option<String>,
    failed: Option<String>,
}

pub(super) async fn login_page(
    State(state): State<AppState>,
    Query(query): Query<NextQuery>,
) -> Response {
    if matches!(*state.auth, Auth::None) {
        return Redirect::to("/ui").into_response();
    }
    let next_page = safe_next(query.next.as_deref());
    let main = html! {
        h1 { "Sign in" }
        @if query.failed.is_some() {
            p class="error" role="alert" { "That is not the server's token." }
        }
        form method="post" action="/ui/login" class="login" {
            input type="hidden" name="next" value=(next_page);
            label for="token" { "API token (the server's WASMGEAR_API_TOKEN or --token-file)" }
            input id="token" name="token" type="password" autocomplete="current-password" required autofocus;
            button type="submit" { "Sign in" }
        }
    };
    Page::plain("Sign in").document(main).into_response()
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    token: String,
    next: Option<String>,
}

pub(super) async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next_page = safe_next(form.next.as_deref());
    if matches!(*state.auth, Auth::None) {
        return Redirect::to(&next_page).into_response();
    }
    let given = form.token.trim();
    let Some(caller) = state.auth.caller(Some(given)) else {
        let next_page = encode(&next_page);
        return Redirect::to(&format!("/ui/login?failed=1&next={next_page}")).into_response();
    };
    if caller.functions.is_some() {
        return UiError::Forbidden(format!(
            "token {:?} may touch only functions {}, and the dashboard shows every function: \
             sign in with a token that is not limited to some functions",
            caller.name,
            caller.functions_text()
        ))
        .into_response();
    }
    // Marked `Secure` when a TLS proxy in front says the browser came over HTTPS.
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|proto| proto.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = token_cookie_builder(given).secure(secure).build();
    // Encoded: a token may hold what a cookie may not (`;`, spaces).
    let cookie = cookie.encoded().to_string();
    ([(header::SET_COOKIE, cookie)], Redirect::to(&next_page)).into_response()
}

pub(super) async fn logout() -> Response {
    let mut cookie = token_cookie_builder("").build();
    cookie.make_removal();
    let cookie = cookie.to_string();
    ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response()
}

/// The dashboard's cookie holding `value`, for the whole site, out of scripts' reach and
/// never sent with another site's requests.
fn token_cookie_builder(value: &str) -> cookie::CookieBuilder<'static> {
    Cookie::build((TOKEN_COOKIE, value.to_string()))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
}

/// Where to go after signing in: a dashboard path, never another site.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path) if path.starts_with("/ui") && !path.contains("//") => path.to_string(),
        _ => "/ui".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::*;

    #[test]
    fn only_dashboard_paths_are_followed_after_signing_in() {
        assert_eq!(safe_next(Some("/ui/jobs/x%3A1")), "/ui/jobs/x%3A1");
        assert_eq!(safe_next(Some("https://evil.example/ui")), "/ui");
        assert_eq!(safe_next(Some("//evil.example/ui")), "/ui");
        assert_eq!(safe_next(Some("/ui//evil.example")), "/ui");
        assert_eq!(safe_next(None), "/ui");
    }

    #[test]
    fn the_cookie_is_read_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("theme=dark; wasmgear_token=s3cret; other=1"),
        );
        let auth = Auth::Token("s3cret".into());
        assert!(cookie_caller(&auth, &headers).is_some());
        assert!(cookie_caller(&Auth::Token("s3creT".into()), &headers).is_none());
        assert!(cookie_caller(&auth, &HeaderMap::new()).is_none());
        assert!(cookie_caller(&Auth::None, &HeaderMap::new()).is_some());
        // A token with what a cookie may not hold, as the sign-in writes it.
        let odd = "a b;c=d%/+é";
        let written = token_cookie_builder(odd).build().encoded().to_string();
        let sent = written.split(';').next().unwrap();
        assert!(
            !sent.contains(' ') && sent.matches('=').count() == 1,
            "{sent}"
        );
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, HeaderValue::from_str(sent).unwrap());
        assert!(cookie_caller(&Auth::Token(odd.into()), &headers).is_some());
        // A cookie written by an earlier version (every byte but `A-Za-z0-9-_.~/` encoded)
        // still reads.
        let mut headers = HeaderMap::new();
        let earlier = format!("{TOKEN_COOKIE}={}", encode(odd));
        headers.insert(header::COOKIE, HeaderValue::from_str(&earlier).unwrap());
        assert!(cookie_caller(&Auth::Token(odd.into()), &headers).is_some());
    }
}
