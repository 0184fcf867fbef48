//! The dashboard, served by `wasmgear serve` under `/ui`: server-rendered HTML pages with a
//! small script (`ui/app.js`) that keeps them live over the API's event stream, and a style
//! sheet (`ui/style.css`), both compiled into the binary (no CDN: the page works with no
//! internet).
//!
//! With a token, the browser signs in once (`/ui/login`) and keeps the token in an
//! `HttpOnly`, `SameSite=Strict` cookie, which the API's read-only routes (the event stream)
//! accept too. Every action is a form `POST` carrying the server's anti-forgery value; each
//! asks to confirm first (with the script) and answers by going back to the page it came
//! from. The pages work without the script, only not live.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Mutex;

use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use wasmgear_client::{
    CancelOutcome, FunctionName, JobId, JobState, JobStatus, Priority, QueueError, Setting,
};
use wasmgear_proto::event::Event;

use crate::{AppState, Auth, same_secret};

/// The cookie that holds the token in the browser.
pub(crate) const TOKEN_COOKIE: &str = "wasmgear_token";
/// Jobs per page of a function's list.
const PAGE: usize = 50;
/// The most bytes of an input or output shown on a job's page.
const PREVIEW_BYTES: usize = 16 * 1024;

const APP_JS: &str = include_str!("ui/app.js");
const STYLE_CSS: &str = include_str!("ui/style.css");

/// The dashboard's routes (not part of the API, so not in its OpenAPI document).
pub(crate) fn routes(state: AppState) -> Router<AppState> {
    let guarded = Router::new()
        .route("/ui", axum::routing::get(overview))
        .route(
            "/ui/functions/{function}",
            axum::routing::get(function_page),
        )
        .route(
            "/ui/functions/{function}/stats",
            axum::routing::get(stats_page),
        )
        .route("/ui/functions/{function}/pause", axum::routing::post(pause))
        .route(
            "/ui/functions/{function}/resume",
            axum::routing::post(resume),
        )
        .route("/ui/jobs/{id}", axum::routing::get(job_page))
        .route("/ui/jobs/{id}/cancel", axum::routing::post(cancel))
        .route("/ui/jobs/{id}/retry", axum::routing::post(retry))
        .route("/ui/jobs/{id}/priority", axum::routing::post(priority))
        .route("/ui/failures", axum::routing::get(failures_page))
        .route(
            "/ui/failures/{function}/{group}/retry",
            axum::routing::post(retry_group),
        )
        .route("/ui/workers", axum::routing::get(workers_page))
        .route("/ui/logout", axum::routing::post(logout))
        .route_layer(middleware::from_fn_with_state(state, signed_in));
    Router::new()
        .route("/", axum::routing::get(|| async { Redirect::to("/ui") }))
        .route("/ui/", axum::routing::get(|| async { Redirect::to("/ui") }))
        .route("/ui/login", axum::routing::get(login_page).post(login))
        .route("/ui/assets/app.js", axum::routing::get(app_js))
        .route("/ui/assets/style.css", axum::routing::get(style_css))
        .merge(guarded)
}

/// Finished jobs per function and minute, counted from the event stream since the server
/// started: the overview's "last hour".
#[derive(Debug, Default)]
pub(crate) struct Throughput {
    minutes: Mutex<HashMap<String, VecDeque<(u64, u64)>>>,
}

/// Minutes of throughput kept.
const MINUTES: u64 = 60;

impl Throughput {
    fn count(&self, function: &str, minute: u64) {
        let mut all = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        let series = all.entry(function.to_string()).or_default();
        match series.back_mut() {
            Some((last, n)) if *last == minute => *n += 1,
            _ => series.push_back((minute, 1)),
        }
        while series.front().is_some_and(|(m, _)| *m + MINUTES <= minute) {
            series.pop_front();
        }
    }

    /// `function`'s finished jobs in each of the last [`MINUTES`] minutes, oldest first.
    fn last_hour(&self, function: &str, now_minute: u64) -> Vec<u64> {
        let all = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        let mut counts = vec![0; MINUTES as usize];
        for (minute, n) in all.get(function).into_iter().flatten() {
            let age = now_minute.saturating_sub(*minute);
            if age < MINUTES {
                counts[(MINUTES - 1 - age) as usize] = *n;
            }
        }
        counts
    }
}

/// Counts finished jobs from the event stream until the server stops. (The stream goes on
/// across reconnections; only listening the first time needs Redis to answer, and is
/// tried again until it does.)
pub(crate) async fn count_finished(state: AppState) {
    let events = loop {
        match state.client.events(None).await {
            Ok(events) => break events,
            Err(error) => {
                tracing::warn!(%error, "the dashboard's throughput is not counted yet: cannot listen to events; trying again");
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                    () = state.shutdown.cancelled() => return,
                }
            }
        }
    };
    let mut events = std::pin::pin!(events.take_until(state.shutdown.clone().cancelled_owned()));
    while let Some(published) = events.next().await {
        if let Event::Finish { .. } = published.event {
            let minute = wasmgear_proto::units::now_ms() / 60_000;
            state.throughput.count(published.function.as_str(), minute);
        }
    }
}

// ----- Signing in -------------------------------------------------------------------------

/// The value of cookie `name` in `headers`.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value)
        })
}

/// Whether `headers` carry the token in the dashboard's cookie.
pub(crate) fn cookie_signed_in(auth: &Auth, headers: &HeaderMap) -> bool {
    match auth {
        Auth::None => true,
        Auth::Token(token) => cookie(headers, TOKEN_COOKIE)
            .is_some_and(|given| same_secret(&decode(given), token.as_bytes())),
    }
}

/// Lets a signed-in browser through: pages of one who is not go to the sign-in page;
/// actions are refused.
async fn signed_in(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if cookie_signed_in(&state.auth, request.headers()) {
        return next.run(request).await;
    }
    if request.method() == axum::http::Method::GET {
        let next_page = request.uri().path().to_string();
        return Redirect::to(&format!("/ui/login?next={}", encode(&next_page))).into_response();
    }
    (
        StatusCode::UNAUTHORIZED,
        Html(shell(
            "Sign in first",
            "",
            None,
            "<p>Actions need the API token: <a href=\"/ui/login\">sign in</a>.</p>".into(),
        )),
    )
        .into_response()
}

#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
    failed: Option<String>,
}

async fn login_page(State(state): State<AppState>, Query(query): Query<NextQuery>) -> Response {
    if matches!(*state.auth, Auth::None) {
        return Redirect::to("/ui").into_response();
    }
    let next_page = safe_next(query.next.as_deref());
    let mut body = String::from("<h1>Sign in</h1>");
    if query.failed.is_some() {
        body.push_str("<p class=\"error\" role=\"alert\">That is not the server's token.</p>");
    }
    let _ = write!(
        body,
        "<form method=\"post\" action=\"/ui/login\" class=\"login\">\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\
         <label for=\"token\">API token (the server's WASMGEAR_API_TOKEN or --token-file)</label>\
         <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required autofocus>\
         <button type=\"submit\">Sign in</button></form>",
        esc(&next_page)
    );
    Html(shell("Sign in", "", None, body)).into_response()
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
    next: Option<String>,
}

async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next_page = safe_next(form.next.as_deref());
    let Auth::Token(token) = &*state.auth else {
        return Redirect::to(&next_page).into_response();
    };
    let given = form.token.trim();
    if !same_secret(given.as_bytes(), token.as_bytes()) {
        return Redirect::to(&format!("/ui/login?failed=1&next={}", encode(&next_page)))
            .into_response();
    }
    // Encoded: a token may hold what a cookie may not (`;`, spaces). Marked `Secure` when a
    // TLS proxy in front says the browser came over HTTPS.
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|proto| proto.as_bytes().eq_ignore_ascii_case(b"https"));
    let cookie = format!(
        "{TOKEN_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict{}",
        encode(given),
        if secure { "; Secure" } else { "" }
    );
    ([(header::SET_COOKIE, cookie)], Redirect::to(&next_page)).into_response()
}

async fn logout() -> Response {
    let cookie = format!("{TOKEN_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    ([(header::SET_COOKIE, cookie)], Redirect::to("/ui/login")).into_response()
}

/// Where to go after signing in: a dashboard path, never another site.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path) if path.starts_with("/ui") && !path.contains("//") => path.to_string(),
        _ => "/ui".to_string(),
    }
}

async fn app_js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
        .into_response()
}

async fn style_css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLE_CSS,
    )
        .into_response()
}

// ----- The page around every page -----------------------------------------------------------

/// HTML-escapes `text`.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes `text` for a URL path segment or query value.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    out
}

/// Undoes [`encode`] (a `%` not followed by two hex digits is kept as it is).
fn decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// A whole page: `title`, the navigation with `active` marked, and `main`; `live` is the
/// event stream's query (`""`: every function) when the page follows events.
fn shell(title: &str, active: &str, live: Option<&str>, main: String) -> String {
    let link = |href: &str, name: &str, label: &str| {
        let current = if name == active {
            " aria-current=\"page\""
        } else {
            ""
        };
        format!("<a href=\"{href}\"{current}>{label}</a>")
    };
    let live = live.map_or(String::new(), |query| {
        format!(" data-live=\"{}\"", esc(query))
    });
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · wasmgear</title>\
         <link rel=\"stylesheet\" href=\"/ui/assets/style.css\">\
         <script src=\"/ui/assets/app.js\" defer></script></head><body>\
         <header><a class=\"brand\" href=\"/ui\">wasmgear</a>\
         <nav aria-label=\"Dashboard\">{}{}{}</nav>\
         <form method=\"post\" action=\"/ui/logout\" class=\"logout\"><button type=\"submit\">Sign out</button></form>\
         </header><main id=\"main\"{live}>{main}</main></body></html>",
        link("/ui", "queues", "Queues"),
        link("/ui/failures", "failures", "Failures"),
        link("/ui/workers", "workers", "Workers"),
        title = esc(title),
    )
}

/// The page, or only its `main` when the script asks for it to refresh the page in place.
fn respond(
    headers: &HeaderMap,
    title: &str,
    active: &str,
    live: Option<&str>,
    main: String,
) -> Response {
    if headers.contains_key("x-wasmgear-fragment") {
        return Html(main).into_response();
    }
    Html(shell(title, active, live, main)).into_response()
}

/// An error as a page: what went wrong, in words.
fn error_page(error: &QueueError) -> Response {
    let status = match error {
        QueueError::NoSuchJob(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let main = format!(
        "<h1>Cannot show this</h1><p class=\"error\" role=\"alert\">{}</p><p><a href=\"/ui\">Back to the queues</a></p>",
        esc(&error.to_string())
    );
    (status, Html(shell("Error", "", None, main))).into_response()
}

/// An action's form: a button that posts to `action` after the script asks `confirm`.
fn action(csrf: &str, action: &str, label: &str, confirm: &str, extra: &str) -> String {
    format!(
        "<form method=\"post\" action=\"{}\" class=\"action\" data-confirm=\"{}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{}\">{extra}<button type=\"submit\">{}</button></form>",
        esc(action),
        esc(confirm),
        esc(csrf),
        esc(label)
    )
}

fn ago(now_ms: u64, then_ms: u64) -> String {
    let seconds = now_ms.saturating_sub(then_ms) / 1000;
    let text = match seconds {
        0..=59 => format!("{seconds}s"),
        60..=3599 => format!("{}m {}s", seconds / 60, seconds % 60),
        3600..=86_399 => format!("{}h {}m", seconds / 3600, seconds % 3600 / 60),
        _ => format!("{}d {}h", seconds / 86_400, seconds % 86_400 / 3600),
    };
    format!("{text} ago")
}

fn time(ms: Option<u64>, now_ms: u64) -> String {
    match ms {
        Some(ms) => format!(
            "<time datetime=\"{}\" title=\"{}\">{}</time>",
            iso(ms),
            iso(ms),
            ago(now_ms, ms)
        ),
        None => "–".into(),
    }
}

fn iso(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn state_badge(state: JobState) -> String {
    format!("<span class=\"state state-{0}\">{0}</span>", state.as_str())
}

/// A progress bar that the script moves as `progress` events for `id` arrive.
fn progress_bar(id: &JobId, done: u64, total: u64, message: Option<&str>) -> String {
    // In u128: a job may report any u64.
    let percent = (u128::from(done.min(total)) * 100)
        .checked_div(u128::from(total))
        .unwrap_or(0);
    let label = match total {
        0 => format!("{done}"),
        _ => format!("{done}/{total}"),
    };
    format!(
        "<div class=\"progress\" data-progress-job=\"{id}\">\
         <progress max=\"100\" value=\"{percent}\" aria-label=\"progress of {id}\"></progress>\
         <span class=\"progress-text\">{label}{}</span></div>",
        message.map_or(String::new(), |m| format!(" {}", esc(m))),
        id = esc(&id.to_string()),
    )
}

fn function_of(text: &str) -> Result<FunctionName, Box<Response>> {
    FunctionName::new(text).map_err(|e| {
        Box::new(
            (
                StatusCode::BAD_REQUEST,
                Html(shell(
                    "Bad function",
                    "",
                    None,
                    format!("<p class=\"error\">{}</p>", esc(&e.to_string())),
                )),
            )
                .into_response(),
        )
    })
}

fn job_of(text: &str) -> Result<JobId, Box<Response>> {
    text.parse::<JobId>().map_err(|e| {
        Box::new(
            (
                StatusCode::BAD_REQUEST,
                Html(shell(
                    "Bad job id",
                    "",
                    None,
                    format!("<p class=\"error\">{}</p>", esc(&e.to_string())),
                )),
            )
                .into_response(),
        )
    })
}

// ----- Pages ---------------------------------------------------------------------------------

/// The queues: every function's jobs by state, its workers, and its last hour.
async fn overview(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let queues = match state.client.queues().await {
        Ok(queues) => queues,
        Err(error) => return error_page(&error),
    };
    let minute = wasmgear_proto::units::now_ms() / 60_000;
    let mut main = String::from("<h1>Queues</h1>");
    if queues.is_empty() {
        main.push_str("<p>No function has had a job yet.</p>");
    } else {
        main.push_str(
            "<div class=\"table\"><table><caption>Jobs of each function by state</caption><thead><tr>\
             <th scope=\"col\">function</th><th scope=\"col\">queued</th><th scope=\"col\">scheduled</th>\
             <th scope=\"col\">running</th><th scope=\"col\">waiting</th><th scope=\"col\">succeeded</th>\
             <th scope=\"col\">failed</th><th scope=\"col\">cancelled</th><th scope=\"col\">workers</th>\
             <th scope=\"col\">finished per minute, last hour</th><th scope=\"col\">leasing</th></tr></thead><tbody>",
        );
        for queue in &queues {
            let f = encode(&queue.function);
            let cell = |state: &str, n: u64| {
                format!(
                    "<td data-count=\"{state}\"><a href=\"/ui/functions/{f}?state={state}\">{n}</a></td>"
                )
            };
            let pause = if queue.paused {
                action(
                    &state.csrf,
                    &format!("/ui/functions/{f}/resume"),
                    "Resume",
                    &format!("Resume leasing jobs of {}?", queue.function),
                    "",
                )
            } else {
                action(
                    &state.csrf,
                    &format!("/ui/functions/{f}/pause"),
                    "Pause",
                    &format!(
                        "Pause leasing jobs of {}? Running jobs go on.",
                        queue.function
                    ),
                    "",
                )
            };
            let series = state.throughput.last_hour(&queue.function, minute);
            let _ = write!(
                main,
                "<tr data-function=\"{}\"><th scope=\"row\"><a href=\"/ui/functions/{f}\">{}</a>{}</th>{}{}{}{}{}{}{}<td>{}</td><td>{}</td><td>{pause}</td></tr>",
                esc(&queue.function),
                esc(&queue.function),
                if queue.paused {
                    " <span class=\"badge\">paused</span>"
                } else {
                    ""
                },
                cell("queued", queue.queued),
                cell("scheduled", queue.scheduled),
                cell("running", queue.running),
                cell("waiting", queue.waiting),
                cell("succeeded", queue.succeeded),
                cell("failed", queue.failed),
                cell("cancelled", queue.cancelled),
                queue.workers,
                sparkline(&series),
            );
        }
        main.push_str("</tbody></table></div>");
    }
    respond(&headers, "Queues", "queues", Some(""), main)
}

/// An inline chart of per-minute counts.
fn sparkline(series: &[u64]) -> String {
    let max = series.iter().copied().max().unwrap_or(0).max(1);
    let total: u64 = series.iter().sum();
    let width = series.len() * 3;
    let mut bars = String::new();
    for (i, n) in series.iter().enumerate() {
        let height = (*n as f64 / max as f64 * 20.0).ceil() as u32;
        if height > 0 {
            let _ = write!(
                bars,
                "<rect x=\"{}\" y=\"{}\" width=\"2\" height=\"{height}\"></rect>",
                i * 3,
                20 - height
            );
        }
    }
    format!(
        "<svg class=\"spark\" width=\"{width}\" height=\"20\" viewBox=\"0 0 {width} 20\" role=\"img\" \
         aria-label=\"{total} finished in the last hour\">{bars}</svg> <span class=\"muted\">{total}</span>"
    )
}

#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    tag: Option<String>,
    id: Option<String>,
    page: Option<usize>,
}

const STATES: [JobState; 7] = [
    JobState::Queued,
    JobState::Scheduled,
    JobState::Running,
    JobState::Waiting,
    JobState::Succeeded,
    JobState::Failed,
    JobState::Cancelled,
];

/// A function's jobs, by state or tag, a page at a time; a search by id.
async fn function_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    let function = match function_of(&function) {
        Ok(f) => f,
        Err(response) => return *response,
    };
    if let Some(id) = query
        .id
        .as_deref()
        .map(str::trim)
        .filter(|id| !id.is_empty())
    {
        let id = if id.contains(':') {
            id.to_string()
        } else {
            format!("{function}:{id}")
        };
        return Redirect::to(&format!("/ui/jobs/{}", encode(&id))).into_response();
    }
    let chosen: JobState = query
        .state
        .as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or(JobState::Queued);
    let page = query.page.unwrap_or(0);
    let tag = query
        .tag
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let wanted = (page + 1) * PAGE + 1;
    let listed = match tag {
        Some(tag) => state.client.tagged(tag, Some(&function), wanted).await,
        None => state.client.jobs_in_state(&function, chosen, wanted).await,
    };
    let ids = match listed {
        Ok(ids) => ids,
        Err(error) => return error_page(&error),
    };
    let more = ids.len() > (page + 1) * PAGE;
    let f = encode(function.as_str());
    let now = wasmgear_proto::units::now_ms();
    let mut main = format!(
        "<h1>{}</h1><p><a href=\"/ui/functions/{f}/stats\">Statistics</a></p>",
        esc(function.as_str())
    );
    main.push_str("<nav class=\"tabs\" aria-label=\"Jobs by state\">");
    for s in STATES {
        let current = if tag.is_none() && s == chosen {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(
            main,
            "<a href=\"/ui/functions/{f}?state={0}\"{current}>{0}</a>",
            s.as_str()
        );
    }
    main.push_str("</nav>");
    let _ = write!(
        main,
        "<form method=\"get\" class=\"search\" role=\"search\">\
         <label for=\"id\">Job id</label><input id=\"id\" name=\"id\" placeholder=\"{0}:1 or 1\">\
         <label for=\"tag\">Tag</label><input id=\"tag\" name=\"tag\" value=\"{1}\">\
         <button type=\"submit\">Find</button></form>",
        esc(function.as_str()),
        esc(tag.unwrap_or(""))
    );
    let heading = match tag {
        Some(tag) => format!("Jobs tagged {}", esc(tag)),
        None => format!("{} jobs", chosen.as_str()),
    };
    let shown: Vec<&JobId> = ids.iter().skip(page * PAGE).take(PAGE).collect();
    if shown.is_empty() {
        let _ = write!(main, "<p>No {heading}.</p>");
    } else {
        let _ = write!(
            main,
            "<div class=\"table\"><table><caption>{heading}</caption><thead><tr><th scope=\"col\">job</th>\
             <th scope=\"col\">state</th><th scope=\"col\">attempt</th><th scope=\"col\">priority</th>\
             <th scope=\"col\">created</th><th scope=\"col\">progress</th><th scope=\"col\">tags</th></tr></thead><tbody>"
        );
        for id in shown {
            let Ok(status) = state.client.status(id).await else {
                continue;
            };
            let record = &status.record;
            let progress = match &record.progress {
                Some(p) if record.state == JobState::Running => {
                    progress_bar(id, p.done, p.total, p.message.as_deref())
                }
                _ if record.state == JobState::Running => progress_bar(id, 0, 0, None),
                _ => String::new(),
            };
            let _ = write!(
                main,
                "<tr><th scope=\"row\"><a href=\"/ui/jobs/{}\">{}</a></th><td>{}</td><td>{}/{}</td><td>{}</td><td>{}</td><td>{progress}</td><td>{}</td></tr>",
                encode(&id.to_string()),
                esc(&id.to_string()),
                state_badge(record.state),
                record.attempt,
                record.max_attempts,
                record.priority,
                time(Some(record.created_ms), now),
                esc(&record.tags.join(", ")),
            );
        }
        main.push_str("</tbody></table></div>");
    }
    let filter = match tag {
        Some(tag) => format!("tag={}", encode(tag)),
        None => format!("state={}", chosen.as_str()),
    };
    main.push_str("<nav class=\"pages\" aria-label=\"Pages\">");
    if page > 0 {
        let _ = write!(
            main,
            "<a href=\"/ui/functions/{f}?{filter}&page={}\" rel=\"prev\">Previous</a>",
            page - 1
        );
    }
    if more {
        let _ = write!(
            main,
            "<a href=\"/ui/functions/{f}?{filter}&page={}\" rel=\"next\">Next</a>",
            page + 1
        );
    }
    main.push_str("</nav>");
    let live = format!("function={}", function.as_str());
    respond(&headers, function.as_str(), "queues", Some(&live), main)
}

/// Bytes shown as text when they are UTF-8 (the first [`PREVIEW_BYTES`], cut between
/// characters), else said to be binary.
fn preview(bytes: &[u8]) -> String {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return format!(
            "<p class=\"muted\">{} bytes, not UTF-8 text.</p>",
            bytes.len()
        );
    };
    let cut = &text[..text.floor_char_boundary(PREVIEW_BYTES)];
    let more = if text.len() > cut.len() {
        format!("\n… ({} bytes in all)", text.len())
    } else {
        String::new()
    };
    format!("<pre>{}{}</pre>", esc(cut), esc(&more))
}

/// One job: its state, attempts and their history, progress, input, output or error, log;
/// cancel, retry, priority.
async fn job_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let id = match job_of(&id) {
        Ok(id) => id,
        Err(response) => return *response,
    };
    let status: JobStatus = match state.client.status(&id).await {
        Ok(status) => status,
        Err(error) => return error_page(&error),
    };
    let input = state.client.input(&id).await.ok().flatten();
    let log = state.client.logs(&id).await.unwrap_or_default();
    let record = &status.record;
    let now = wasmgear_proto::units::now_ms();
    let f = encode(id.function.as_str());
    let job = encode(&id.to_string());
    let mut main = format!(
        "<h1>Job {}</h1><p>{} of <a href=\"/ui/functions/{f}\">{}</a></p>",
        esc(&id.to_string()),
        state_badge(record.state),
        esc(id.function.as_str())
    );
    if record.state == JobState::Running {
        let (done, total, message) = record
            .progress
            .as_ref()
            .map_or((0, 0, None), |p| (p.done, p.total, p.message.as_deref()));
        main.push_str(&progress_bar(&id, done, total, message));
    }
    main.push_str("<div class=\"actions\">");
    if !record.state.is_final() {
        main.push_str(&action(
            &state.csrf,
            &format!("/ui/jobs/{job}/cancel"),
            "Cancel",
            &format!("Cancel job {id}?"),
            "",
        ));
    }
    if matches!(record.state, JobState::Failed | JobState::Cancelled) {
        main.push_str(&action(
            &state.csrf,
            &format!("/ui/jobs/{job}/retry"),
            "Retry",
            &format!("Run job {id} again?"),
            "",
        ));
    }
    if matches!(
        record.state,
        JobState::Queued | JobState::Scheduled | JobState::Waiting
    ) {
        let extra = format!(
            "<label for=\"priority\">Priority</label><input id=\"priority\" name=\"priority\" type=\"number\" value=\"{}\" required>",
            record.priority
        );
        main.push_str(&action(
            &state.csrf,
            &format!("/ui/jobs/{job}/priority"),
            "Change priority",
            &format!("Change the priority of job {id}?"),
            &extra,
        ));
    }
    main.push_str("</div>");
    let row = |name: &str, value: String| {
        format!("<tr><th scope=\"row\">{name}</th><td>{value}</td></tr>")
    };
    let links = |ids: &[String]| {
        ids.iter()
            .map(|i| format!("<a href=\"/ui/jobs/{}\">{}</a>", encode(i), esc(i)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    main.push_str("<div class=\"table\"><table class=\"facts\"><caption>The job</caption><tbody>");
    main.push_str(&row(
        "attempt",
        format!("{} of {}", record.attempt, record.max_attempts),
    ));
    main.push_str(&row("priority", record.priority.to_string()));
    main.push_str(&row("created", time(Some(record.created_ms), now)));
    if record.run_at_ms.is_some() {
        main.push_str(&row("runs at", time(record.run_at_ms, now)));
    }
    main.push_str(&row("started", time(record.started_ms, now)));
    main.push_str(&row("finished", time(record.finished_ms, now)));
    if let Some(worker) = &record.worker {
        main.push_str(&row("worker", esc(worker)));
    }
    main.push_str(&row("timeout", format!("{} ms", record.timeout_ms)));
    if !record.tags.is_empty() {
        main.push_str(&row("tags", esc(&record.tags.join(", "))));
    }
    if let (Some(schedule), Some(tick)) = (&record.schedule, record.tick_ms) {
        main.push_str(&row(
            "schedule",
            format!(
                "{}, tick {}",
                esc(schedule),
                esc(&wasmgear_proto::units::utc_text(tick))
            ),
        ));
    }
    if !record.after.is_empty() {
        main.push_str(&row("after", links(&record.after)));
    }
    if let Some(parent) = &record.parent {
        main.push_str(&row("parent", links(std::slice::from_ref(parent))));
    }
    if !record.children.is_empty() {
        main.push_str(&row("children", links(&record.children)));
    }
    if !record.waiting_on.is_empty() {
        main.push_str(&row("waiting on", links(&record.waiting_on)));
    }
    if !record.dependents.is_empty() {
        main.push_str(&row("dependents", links(&record.dependents)));
    }
    main.push_str("</tbody></table></div>");
    if let Some(error) = &record.error {
        let _ = write!(
            main,
            "<h2>Error</h2><p class=\"error\"><strong>{}</strong></p><pre>{}</pre>",
            esc(&error.class),
            esc(&error.message)
        );
    }
    if let Some(output) = &status.output {
        main.push_str("<h2>Output</h2>");
        main.push_str(&preview(output));
    }
    main.push_str("<h2>Input</h2>");
    match &input {
        Some(input) => main.push_str(&preview(input)),
        None => main.push_str("<p class=\"muted\">Not kept.</p>"),
    }
    if !record.history.is_empty() {
        main.push_str(
            "<h2>Attempts</h2><div class=\"table\"><table><thead><tr><th scope=\"col\">attempt</th>\
             <th scope=\"col\">outcome</th><th scope=\"col\">worker</th><th scope=\"col\">started</th>\
             <th scope=\"col\">ended</th><th scope=\"col\">plugin version</th><th scope=\"col\">message</th></tr></thead><tbody>",
        );
        for attempt in &record.history {
            let _ = write!(
                main,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
                attempt.attempt,
                esc(&attempt.outcome),
                esc(attempt.worker.as_deref().unwrap_or("–")),
                time(attempt.started_ms, now),
                time(Some(attempt.ended_ms), now),
                esc(attempt.version.as_deref().unwrap_or("–")),
                esc(attempt.message.as_deref().unwrap_or("")),
            );
        }
        main.push_str("</tbody></table></div>");
    }
    main.push_str("<h2>Log</h2>");
    if log.is_empty() {
        main.push_str("<p class=\"muted\">Nothing logged.</p>");
    } else {
        let _ = write!(main, "<pre class=\"log\">{}</pre>", esc(&log));
    }
    let live = format!("function={}", id.function.as_str());
    respond(&headers, &format!("Job {id}"), "queues", Some(&live), main)
}

/// Failure groups with their counts, each with "retry all" and its jobs.
async fn failures_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let groups = match state.client.failure_groups(None).await {
        Ok(groups) => groups,
        Err(error) => return error_page(&error),
    };
    let mut main = String::from("<h1>Failures</h1>");
    if groups.is_empty() {
        main.push_str("<p>No failed jobs are kept.</p>");
    } else {
        main.push_str(
            "<div class=\"table\"><table><caption>Failed jobs by function and error class</caption><thead><tr>\
             <th scope=\"col\">function</th><th scope=\"col\">error class</th><th scope=\"col\">jobs</th>\
             <th scope=\"col\">latest</th><th scope=\"col\"></th></tr></thead><tbody>",
        );
        for group in &groups {
            let Ok(function) = FunctionName::new(&group.function) else {
                continue;
            };
            let latest = match state
                .client
                .failed_jobs(&function, &group.group, 0, 3)
                .await
            {
                Ok((_, jobs)) => jobs
                    .iter()
                    .map(|j| {
                        format!(
                            "<a href=\"/ui/jobs/{}\">{}</a>",
                            encode(&j.id.to_string()),
                            esc(&j.id.to_string())
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                Err(_) => String::new(),
            };
            let retry = action(
                &state.csrf,
                &format!(
                    "/ui/failures/{}/{}/retry",
                    encode(&group.function),
                    encode(&group.group)
                ),
                "Retry all",
                &format!(
                    "Run all {} failed jobs of {} in group {} again?",
                    group.count, group.function, group.group
                ),
                "",
            );
            let _ = write!(
                main,
                "<tr><th scope=\"row\"><a href=\"/ui/functions/{}?state=failed\">{}</a></th><td>{}</td><td>{}</td><td>{latest}</td><td>{retry}</td></tr>",
                encode(&group.function),
                esc(&group.function),
                esc(&group.group),
                group.count,
            );
        }
        main.push_str("</tbody></table></div>");
    }
    respond(&headers, "Failures", "failures", Some(""), main)
}

/// The live workers: their plugins and the jobs they run.
async fn workers_page(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let workers = match state.client.workers().await {
        Ok(workers) => workers,
        Err(error) => return error_page(&error),
    };
    let now = wasmgear_proto::units::now_ms();
    let mut main = String::from("<h1>Workers</h1>");
    if workers.is_empty() {
        main.push_str("<p>No live worker.</p>");
    }
    for worker in &workers {
        let _ = write!(
            main,
            "<section class=\"worker\"><h2>{}</h2>",
            esc(&worker.id)
        );
        match &worker.ad {
            Ok(ad) => {
                let _ = write!(
                    main,
                    "<p>{} (pid {}), wasmgear {}, started {}, concurrency {}</p>",
                    esc(&ad.host),
                    ad.pid,
                    esc(&ad.version),
                    time(Some(ad.started_ms), now),
                    ad.concurrency
                );
                let plugins: Vec<String> = ad
                    .functions
                    .iter()
                    .map(|(f, v)| format!("<li>{} <code>{}</code></li>", esc(f), esc(v)))
                    .collect();
                let _ = write!(main, "<h3>Plugins</h3><ul>{}</ul>", plugins.concat());
                let running: Vec<String> = ad
                    .running
                    .iter()
                    .map(|j| format!("<li><a href=\"/ui/jobs/{}\">{}</a></li>", encode(j), esc(j)))
                    .collect();
                let _ = write!(
                    main,
                    "<h3>Running ({})</h3><ul>{}</ul>",
                    running.len(),
                    running.concat()
                );
                if !ad.plugin_errors.is_empty() {
                    let errors: Vec<String> = ad
                        .plugin_errors
                        .iter()
                        .map(|e| format!("<li>{}</li>", esc(e)))
                        .collect();
                    let _ = write!(
                        main,
                        "<h3>Plugin errors</h3><ul class=\"error\">{}</ul>",
                        errors.concat()
                    );
                }
                if !ad.sources.is_empty() {
                    let _ = write!(main, "<p>Sources: {}</p>", esc(&ad.sources.join(", ")));
                }
            }
            Err(text) => {
                let _ = write!(main, "<pre>{}</pre>", esc(text));
            }
        }
        main.push_str("</section>");
    }
    respond(&headers, "Workers", "workers", Some(""), main)
}

#[derive(Deserialize)]
struct DayQuery {
    day: Option<String>,
}

/// A function's statistics for one day, as charts.
async fn stats_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
    Query(query): Query<DayQuery>,
) -> Response {
    let function = match function_of(&function) {
        Ok(f) => f,
        Err(response) => return *response,
    };
    let day = match query.day.as_deref().filter(|d| !d.is_empty()) {
        Some(text) => match wasmgear_proto::units::day_of_date(text) {
            Ok(day) => day,
            Err(error) => {
                return error_page(&QueueError::BadOption(format!("day {text:?}: {error}")));
            }
        },
        None => wasmgear_proto::units::today(),
    };
    let stats = match state.client.stats(&function, day).await {
        Ok(stats) => stats,
        Err(error) => return error_page(&error),
    };
    let f = encode(function.as_str());
    let mut main = format!(
        "<h1>Statistics of <a href=\"/ui/functions/{f}\">{}</a></h1>\
         <form method=\"get\" class=\"search\"><label for=\"day\">Day (UTC)</label>\
         <input id=\"day\" name=\"day\" type=\"date\" value=\"{}\"><button type=\"submit\">Show</button></form>\
         <p>{} failed attempts, {} retries, {} failed for good.</p>",
        esc(function.as_str()),
        esc(&stats.date),
        stats.failures,
        stats.retries,
        stats.failed
    );
    for (name, times) in [("Wait in the queue", &stats.wait), ("Run time", &stats.run)] {
        let _ = write!(
            main,
            "<section><h2>{name}</h2><p>{} jobs, mean {:.1} ms, standard deviation {:.1} ms</p>{}</section>",
            times.count,
            times.mean_ms,
            times.std_dev_ms,
            histogram(name, &times.histogram)
        );
    }
    respond(
        &headers,
        &format!("Statistics of {function}"),
        "queues",
        None,
        main,
    )
}

/// A bar chart of `buckets` (name, count), as inline SVG with its numbers in a table for
/// screen readers.
fn histogram(name: &str, buckets: &[(String, u64)]) -> String {
    if buckets.is_empty() {
        return "<p class=\"muted\">No jobs that day.</p>".into();
    }
    let max = buckets.iter().map(|(_, n)| *n).max().unwrap_or(1).max(1);
    let bar = 28;
    let width = buckets.len() * bar;
    let mut svg = format!(
        "<svg class=\"chart\" width=\"{width}\" height=\"140\" viewBox=\"0 0 {width} 140\" role=\"img\" aria-label=\"{}\">",
        esc(name)
    );
    for (i, (bucket, n)) in buckets.iter().enumerate() {
        let height = (*n as f64 / max as f64 * 100.0).ceil() as usize;
        let x = i * bar;
        let _ = write!(
            svg,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{height}\"><title>{} {n}</title></rect>\
             <text x=\"{}\" y=\"135\" text-anchor=\"middle\">{}</text>",
            x + 3,
            110 - height,
            bar - 6,
            esc(bucket),
            x + bar / 2,
            esc(bucket)
        );
    }
    svg.push_str("</svg>");
    let rows: String = buckets
        .iter()
        .map(|(b, n)| format!("<tr><th scope=\"row\">{}</th><td>{n}</td></tr>", esc(b)))
        .collect();
    format!(
        "{svg}<details><summary>The numbers</summary><table><thead><tr><th scope=\"col\">up to</th><th scope=\"col\">jobs</th></tr></thead><tbody>{rows}</tbody></table></details>"
    )
}

// ----- Actions -------------------------------------------------------------------------------

#[derive(Deserialize)]
struct ActionForm {
    csrf: String,
    priority: Option<String>,
}

/// Refuses a form without the server's anti-forgery value.
fn check_form(state: &AppState, form: &ActionForm) -> Result<(), Box<Response>> {
    if same_secret(form.csrf.as_bytes(), state.csrf.as_bytes()) {
        return Ok(());
    }
    Err(Box::new((
        StatusCode::FORBIDDEN,
        Html(shell(
            "Refused",
            "",
            None,
            "<p class=\"error\" role=\"alert\">This form did not come from this dashboard: reload the page and try again.</p>".into(),
        )),
    )
        .into_response()))
}

/// The job an action on `id` is about, once its form is checked.
fn checked_job(state: &AppState, form: &ActionForm, id: &str) -> Result<JobId, Box<Response>> {
    check_form(state, form)?;
    job_of(id)
}

/// Back to the page the action came from (a dashboard page), or `fallback`.
fn back(headers: &HeaderMap, fallback: &str) -> Response {
    let referer = headers
        .get(header::REFERER)
        .and_then(|v| v.to_str().ok())
        .and_then(|r| r.find("/ui").map(|at| r[at..].to_string()))
        .filter(|path| !path.contains("//"));
    Redirect::to(referer.as_deref().unwrap_or(fallback)).into_response()
}

/// The outcome of an action as a page, when it could not be done.
fn refused(message: String) -> Response {
    (
        StatusCode::CONFLICT,
        Html(shell(
            "Not done",
            "",
            None,
            format!("<p class=\"error\" role=\"alert\">{}</p><p><a href=\"javascript:history.back()\">Back</a></p>", esc(&message)),
        )),
    )
        .into_response()
}

async fn pause(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    set_paused(state, headers, function, form, true).await
}

async fn resume(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(function): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    set_paused(state, headers, function, form, false).await
}

async fn set_paused(
    state: AppState,
    headers: HeaderMap,
    function: String,
    form: ActionForm,
    paused: bool,
) -> Response {
    if let Err(response) = check_form(&state, &form) {
        return *response;
    }
    let function = match function_of(&function) {
        Ok(f) => f,
        Err(response) => return *response,
    };
    if let Err(error) = state.client.check_function(&function).await {
        return error_page(&error);
    }
    match state
        .client
        .configure(&function, &[Setting::Paused(paused)])
        .await
    {
        Ok(_) => back(&headers, "/ui"),
        Err(error) => error_page(&error),
    }
}

async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    let id = match checked_job(&state, &form, &id) {
        Ok(id) => id,
        Err(response) => return *response,
    };
    match state.client.cancel(&id).await {
        Ok(CancelOutcome::AlreadyEnded(state)) => {
            refused(format!("Job {id} had already ended ({state})."))
        }
        Ok(_) => back(&headers, &format!("/ui/jobs/{}", encode(&id.to_string()))),
        Err(error) => error_page(&error),
    }
}

async fn retry(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    let id = match checked_job(&state, &form, &id) {
        Ok(id) => id,
        Err(response) => return *response,
    };
    match state.client.retry(&id).await {
        Ok(true) => back(&headers, &format!("/ui/jobs/{}", encode(&id.to_string()))),
        Ok(false) => refused(format!(
            "Job {id} has not failed or been cancelled: nothing to retry."
        )),
        Err(error) => error_page(&error),
    }
}

async fn priority(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ActionForm>,
) -> Response {
    let id = match checked_job(&state, &form, &id) {
        Ok(id) => id,
        Err(response) => return *response,
    };
    let given = form.priority.as_deref().unwrap_or("").trim();
    let priority = match given
        .parse::<i32>()
        .map_err(|e| e.to_string())
        .and_then(|p| Priority::new(p).map_err(|e| e.to_string()))
    {
        Ok(p) => p,
        Err(why) => return refused(format!("Priority {given:?}: {why}")),
    };
    match state.client.set_priority(&id, priority).await {
        Ok((true, _)) => back(&headers, &format!("/ui/jobs/{}", encode(&id.to_string()))),
        Ok((false, state)) => refused(format!(
            "Job {id} is {state}: only a job that has not started can change priority."
        )),
        Err(error) => error_page(&error),
    }
}

async fn retry_group(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((function, group)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Err(response) = check_form(&state, &form) {
        return *response;
    }
    let function = match function_of(&function) {
        Ok(f) => f,
        Err(response) => return *response,
    };
    match state
        .client
        .retry_group(&function, &group, usize::MAX)
        .await
    {
        Ok(_) => back(&headers, "/ui/failures"),
        Err(error) => error_page(&error),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue, header};

    use super::*;

    #[test]
    fn text_is_escaped_and_paths_encoded() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(encode("count:1"), "count%3A1");
        assert_eq!(encode("/ui/jobs/a b"), "/ui/jobs/a%20b");
    }

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
        assert!(cookie_signed_in(&auth, &headers));
        assert!(!cookie_signed_in(&Auth::Token("s3creT".into()), &headers));
        assert!(!cookie_signed_in(&auth, &HeaderMap::new()));
        assert!(cookie_signed_in(&Auth::None, &HeaderMap::new()));
        // A token with what a cookie may not hold, as the sign-in writes it.
        let odd = "a b;c=d%/+";
        let mut headers = HeaderMap::new();
        let value = format!("{TOKEN_COOKIE}={}", encode(odd));
        headers.insert(header::COOKIE, HeaderValue::from_str(&value).unwrap());
        assert!(cookie_signed_in(&Auth::Token(odd.into()), &headers));
        assert_eq!(decode("100%"), b"100%");
    }

    #[test]
    fn previews_cut_between_characters_and_bars_take_any_number() {
        let long = "é".repeat(PREVIEW_BYTES);
        let shown = preview(long.as_bytes());
        assert!(
            shown.contains(&format!("({} bytes in all)", long.len())),
            "{}",
            &shown[shown.len() - 60..]
        );
        assert!(preview(&[0xff, 0xfe]).contains("2 bytes, not UTF-8 text"));
        let id: JobId = "f:1".parse().unwrap();
        assert!(progress_bar(&id, u64::MAX, u64::MAX, None).contains("value=\"100\""));
        assert!(progress_bar(&id, 5, 0, None).contains("value=\"0\""));
    }

    #[test]
    fn throughput_keeps_the_last_hour_by_minute() {
        let throughput = Throughput::default();
        throughput.count("f", 100);
        throughput.count("f", 100);
        throughput.count("f", 159);
        let hour = throughput.last_hour("f", 159);
        assert_eq!(hour.len(), 60);
        assert_eq!((hour[0], hour[59]), (2, 1));
        // A minute later, minute 100 has left the hour.
        throughput.count("f", 160);
        let hour = throughput.last_hour("f", 160);
        assert_eq!(hour.iter().sum::<u64>(), 2);
        assert_eq!(throughput.last_hour("g", 160).iter().sum::<u64>(), 0);
    }
}
