//! The document around every dashboard page, and the pieces pages share: times, state
//! badges, progress bars, previews of bytes, links to jobs, action forms, and the
//! percent-encoding of what goes into a link. All of it maud markup, which escapes what it
//! splices in.

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, PreEscaped, html};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use wasmgear_client::{JobId, JobState};

/// The most bytes of an input or output shown on a job's page.
pub(super) const PREVIEW_BYTES: usize = 16 * 1024;

/// What a path segment or query value keeps as it is: letters, digits, `-_.~` and `/`.
const KEPT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Percent-encodes `text` for a URL path segment or query value.
pub(super) fn encode(text: &str) -> String {
    utf8_percent_encode(text, KEPT).to_string()
}

/// The navigation link a page belongs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nav {
    Queues,
    Flows,
    Batches,
    Failures,
    Workers,
    Audit,
    /// None of them (sign-in and error pages).
    Nowhere,
}

/// A page: its title, where it sits in the navigation, and the event stream's query when
/// it follows events (`""`: every function).
pub(super) struct Page<'a> {
    pub(super) title: &'a str,
    pub(super) nav: Nav,
    pub(super) live: Option<&'a str>,
}

impl Page<'_> {
    /// A page outside the navigation that does not follow events.
    pub(super) fn plain(title: &str) -> Page<'_> {
        Page {
            title,
            nav: Nav::Nowhere,
            live: None,
        }
    }

    /// The whole document around `main`.
    pub(super) fn document(&self, main: Markup) -> Markup {
        let links = [
            ("/ui", Nav::Queues, "Queues"),
            ("/ui/flows", Nav::Flows, "Flows"),
            ("/ui/batches", Nav::Batches, "Batches"),
            ("/ui/failures", Nav::Failures, "Failures"),
            ("/ui/workers", Nav::Workers, "Workers"),
            ("/ui/audit", Nav::Audit, "Audit"),
        ];
        html! {
            (PreEscaped("<!doctype html>"))
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (self.title) " · wasmgear" }
                    link rel="stylesheet" href="/ui/assets/style.css";
                    script src="/ui/assets/app.js" defer {}
                }
                body {
                    header {
                        a class="brand" href="/ui" { "wasmgear" }
                        nav aria-label="Dashboard" {
                            @for (href, nav, label) in links {
                                a href=(href) aria-current=[(nav == self.nav).then_some("page")] { (label) }
                            }
                        }
                        form method="post" action="/ui/logout" class="logout" {
                            button type="submit" { "Sign out" }
                        }
                    }
                    main id="main" data-live=[self.live] { (main) }
                }
            }
        }
    }

    /// The page, or only its `main` when the script asks for it to refresh the page in
    /// place.
    pub(super) fn respond(&self, headers: &HeaderMap, main: Markup) -> Response {
        if headers.contains_key("x-wasmgear-fragment") {
            return main.into_response();
        }
        self.document(main).into_response()
    }
}

/// An action's form: a button that posts to `action` after the script asks `confirm`;
/// `fields` go before the button.
pub(super) fn action(
    csrf: &str,
    action: &str,
    label: &str,
    confirm: &str,
    fields: Option<Markup>,
) -> Markup {
    html! {
        form method="post" action=(action) class="action" data-confirm=(confirm) {
            input type="hidden" name="csrf" value=(csrf);
            @if let Some(fields) = fields { (fields) }
            button type="submit" { (label) }
        }
    }
}

/// How long ago `then_ms` was, at `now_ms`: `5s ago`, `3m 2s ago`, `2h 5m ago`, `4d 1h ago`.
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

/// A moment, as how long ago with the UTC time on hover; `–` for none.
pub(super) fn time(ms: Option<u64>, now_ms: u64) -> Markup {
    html! {
        @if let Some(ms) = ms {
            @let iso = iso(ms);
            time datetime=(iso) title=(iso) { (ago(now_ms, ms)) }
        } @else {
            "–"
        }
    }
}

fn iso(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

pub(super) fn state_badge(state: JobState) -> Markup {
    html! { span class={ "state state-" (state.as_str()) } { (state.as_str()) } }
}

/// A progress bar that the script moves as `progress` events for `id` arrive.
pub(super) fn progress_bar(id: &JobId, done: u64, total: u64, message: Option<&str>) -> Markup {
    // In u128: a job may report any u64.
    let percent = (u128::from(done.min(total)) * 100)
        .checked_div(u128::from(total))
        .unwrap_or(0);
    let id = id.to_string();
    html! {
        div class="progress" data-progress-job=(id) {
            progress max="100" value=(percent) aria-label={ "progress of " (id) } {}
            span class="progress-text" {
                @if total == 0 { (done) } @else { (done) "/" (total) }
                @if let Some(message) = message { " " (message) }
            }
        }
    }
}

/// Bytes shown as text when they are UTF-8 (the first [`PREVIEW_BYTES`], cut between
/// characters), else said to be binary, or sealed (a server without the key).
pub(super) fn preview(bytes: &[u8]) -> Markup {
    if let Some(key) = wasmgear_proto::crypto::sealed_with(bytes) {
        return html! {
            p class="muted" {
                "Encrypted (key " code { (key) } "); no key here: start "
                code { "wasmgear serve" } " with the key file to read it."
            }
        };
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return html! { p class="muted" { (bytes.len()) " bytes, not UTF-8 text." } };
    };
    let cut = &text[..text.floor_char_boundary(PREVIEW_BYTES)];
    html! {
        pre {
            (cut)
            @if text.len() > cut.len() { "\n… (" (text.len()) " bytes in all)" }
        }
    }
}

/// A link to the job with id `id` (as stored: shown as it is, whatever it holds).
pub(super) fn job_link(id: &str) -> Markup {
    html! { a href={ "/ui/jobs/" (encode(id)) } { (id) } }
}

/// Links to the jobs `ids`, separated by commas.
pub(super) fn job_links(ids: &[String]) -> Markup {
    html! {
        @for (i, id) in ids.iter().enumerate() {
            @if i > 0 { ", " }
            (job_link(id))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spliced_text_is_escaped_and_paths_encoded() {
        let page = Page::plain("<b>").document(html! { p { ("<a href=\"x\">&</a>") } });
        let page = page.into_string();
        assert!(
            page.contains("<title>&lt;b&gt; · wasmgear</title>"),
            "{page}"
        );
        assert!(
            page.contains("<p>&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;</p>"),
            "{page}"
        );
        assert_eq!(encode("count:1"), "count%3A1");
        assert_eq!(encode("/ui/jobs/a b"), "/ui/jobs/a%20b");
        assert_eq!(encode("é<"), "%C3%A9%3C");
    }

    #[test]
    fn previews_cut_between_characters_and_bars_take_any_number() {
        let long = "é".repeat(PREVIEW_BYTES);
        let shown = preview(long.as_bytes()).into_string();
        assert!(
            shown.contains(&format!("({} bytes in all)", long.len())),
            "{}",
            &shown[shown.len() - 60..]
        );
        assert!(
            preview(&[0xff, 0xfe])
                .into_string()
                .contains("2 bytes, not UTF-8 text")
        );
        let id: JobId = "f:1".parse().unwrap();
        let full = progress_bar(&id, u64::MAX, u64::MAX, None).into_string();
        assert!(full.contains("value=\"100\""), "{full}");
        let unknown = progress_bar(&id, 5, 0, None).into_string();
        assert!(unknown.contains("value=\"0\""), "{unknown}");
    }
}
