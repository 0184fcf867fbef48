//! The dashboard (`wasmgear serve`, `/ui`): signing in and refusing what comes without the
//! token, over HTTP; and in a real headless Chromium: the overview, a running job's progress
//! moving without a reload, a cancel, a failed job retried and succeeding.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::json;
use wasmgear_client::EnqueueOptions;

use crate::http_api::{Server, TOKEN};
use crate::support::browser::Browser;
use wasmgear_testkit::{TestRedis, WorkerProcess, artifact, eventually, function};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));

/// An answer: status, headers, body text.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: hyper::HeaderMap,
    pub(crate) body: String,
}

/// One request to `server` with `headers` and a form or JSON `body`.
pub(crate) async fn send(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let stream = tokio::net::TcpStream::connect(&server.address)
        .await
        .expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", &server.address);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(
            request
                .body(Full::new(Bytes::from(body.to_string())))
                .expect("a request"),
        )
        .await
        .expect("an answer");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    // An event stream never ends: its status and headers are enough.
    if headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
    {
        return Answer {
            status,
            headers,
            body: String::new(),
        };
    }
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

pub(crate) const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

/// The value of the hidden `csrf` field in a page.
pub(crate) fn csrf_of(page: &str) -> String {
    page.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a form with the anti-forgery value")
        .to_string()
}

/// Signing in puts the token in an HttpOnly, SameSite=Strict cookie; pages without it go to
/// the sign-in page; actions need the cookie and the page's anti-forgery value, and change
/// nothing without them; the API takes the cookie for reads (the event stream) only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_in_and_refusals() {
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let client = redis.client().await;
    let id = client
        .enqueue(&function("nobody"), b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    let job_path = format!("/ui/jobs/{id}");

    let page = send(&server, "GET", &job_path, &[], "").await;
    assert_eq!(page.status, 303);
    assert_eq!(
        page.headers["location"],
        format!("/ui/login?next=/ui/jobs/nobody%3A1")
    );
    let login = send(&server, "GET", "/ui/login", &[], "").await;
    assert_eq!(login.status, 200);
    assert!(
        login.body.contains("<label for=\"token\">"),
        "{}",
        login.body
    );

    let wrong = send(
        &server,
        "POST",
        "/ui/login",
        &[FORM],
        "token=nope&next=%2Fui",
    )
    .await;
    assert_eq!(wrong.status, 303);
    assert!(
        wrong.headers["location"]
            .to_str()
            .unwrap()
            .contains("failed=1")
    );
    assert!(wrong.headers.get("set-cookie").is_none());
    let right = send(
        &server,
        "POST",
        "/ui/login",
        &[FORM],
        &format!("token={TOKEN}&next=%2Fui%2Fjobs%2Fnobody%253A1"),
    )
    .await;
    assert_eq!(right.status, 303);
    let cookie = right.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    // Behind a TLS proxy, the cookie is kept to HTTPS.
    let proxied = send(
        &server,
        "POST",
        "/ui/login",
        &[FORM, ("x-forwarded-proto", "https")],
        &format!("token={TOKEN}&next=%2Fui"),
    )
    .await;
    assert!(
        proxied.headers["set-cookie"]
            .to_str()
            .unwrap()
            .split("; ")
            .any(|attribute| attribute == "Secure")
    );
    // Only a dashboard path is followed after signing in.
    let elsewhere = send(
        &server,
        "POST",
        "/ui/login",
        &[FORM],
        &format!("token={TOKEN}&next=https%3A%2F%2Fevil.example%2F"),
    )
    .await;
    assert_eq!(elsewhere.headers["location"], "/ui");
    let signed_in = cookie.split(';').next().unwrap().to_string();
    let with_cookie = [("cookie", signed_in.as_str())];

    let page = send(&server, "GET", &job_path, &with_cookie, "").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("state-queued"), "{}", page.body);
    let csrf = csrf_of(&page.body);

    // An action without the cookie, or without the page's value, changes nothing.
    let cancel = format!("/ui/jobs/{id}/cancel");
    let anonymous = send(&server, "POST", &cancel, &[FORM], &format!("csrf={csrf}")).await;
    assert_eq!(anonymous.status, 401);
    let forged = send(
        &server,
        "POST",
        &cancel,
        &[FORM, ("cookie", signed_in.as_str())],
        "csrf=0000",
    )
    .await;
    assert_eq!(forged.status, 403);
    assert!(forged.body.contains("did not come from this dashboard"));
    // The API's changes want the bearer token, not the cookie; its reads take either.
    let api_cancel = send(
        &server,
        "POST",
        &format!("/v1/jobs/{id}/cancel"),
        &with_cookie,
        "",
    )
    .await;
    assert_eq!(api_cancel.status, 401);
    assert_eq!(
        client.status(&id).await.unwrap().record.state.as_str(),
        "queued"
    );
    let events = send(&server, "GET", "/v1/events", &with_cookie, "").await;
    assert_eq!(events.status, 200);
    assert_eq!(
        send(&server, "GET", "/v1/events", &[], "").await.status,
        401
    );

    // With both, the action is done and the browser goes back to the page.
    let done = send(
        &server,
        "POST",
        &cancel,
        &[
            FORM,
            ("cookie", signed_in.as_str()),
            ("referer", &format!("http://{}{job_path}", server.address)),
        ],
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(done.headers["location"], job_path.as_str());
    assert_eq!(
        client.status(&id).await.unwrap().record.state.as_str(),
        "cancelled"
    );
    let script = send(&server, "GET", "/ui/assets/app.js", &[], "").await;
    assert!(
        script.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
}

/// In headless Chromium: sign in, see the overview, watch a running job's progress advance
/// without a reload, cancel it, and retry a failed job (its plugin fixed meanwhile) until it
/// succeeds. Set WASMGEAR_SCREENSHOTS=DIR to keep PNGs of the main pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_real_browser() {
    let redis = TestRedis::start();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(artifact("count"), plugins.path().join("count.wasm")).unwrap();
    std::fs::copy(artifact("fail"), plugins.path().join("flaky.wasm")).unwrap();
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    let server = Server::with_token(&redis);
    let client = redis.client().await;
    let once = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let flaky = client
        .enqueue(&function("flaky"), b"x", &once)
        .await
        .unwrap();
    let failed = client.wait(&flaky, WAIT, |_| {}).await.unwrap();
    assert_eq!(failed.record.state.as_str(), "failed");

    let browser = Browser::start().await;
    let base = format!("http://{}", server.address);
    browser.goto(&format!("{base}/ui")).await;
    assert!(browser.url().await.contains("/ui/login"));
    browser.type_into("#token", TOKEN).await;
    browser.click("form.login button").await;
    browser
        .until(
            Duration::from_secs(10),
            "the overview after signing in",
            "return location.pathname === '/ui' && document.querySelector('h1').textContent === 'Queues'",
        )
        .await;
    browser
        .until(
            Duration::from_secs(10),
            "flaky's failed job in the overview",
            "const c = document.querySelector('tr[data-function=\"flaky\"] td[data-count=\"failed\"]'); return c && c.textContent === '1'",
        )
        .await;

    // A running job's progress moves on its page, with no reload.
    let counting = client
        .enqueue(&function("count"), b"600 100", &EnqueueOptions::default())
        .await
        .unwrap();
    browser.goto(&format!("{base}/ui/jobs/{counting}")).await;
    browser
        .run("window.sameLoad = 42; return 1", json!([]))
        .await;
    let first = browser
        .until(
            Duration::from_secs(15),
            "a progress bar with progress",
            "const p = document.querySelector('[data-progress-job] progress'); return p && p.value > 0 ? p.value : 0",
        )
        .await
        .as_f64()
        .unwrap();
    let later = browser
        .until(
            Duration::from_secs(15),
            "the progress to advance",
            &format!("const p = document.querySelector('[data-progress-job] progress'); return p && p.value >= {} ? p.value : 0", first + 2.0),
        )
        .await;
    assert!(later.as_f64().unwrap() > first);
    assert_eq!(browser.run("return window.sameLoad", json!([])).await, 42);
    assert_eq!(
        browser
            .run("return [...document.querySelectorAll('input:not([type=hidden])')].every(i => i.labels.length > 0)", json!([]))
            .await,
        true,
        "every input has a label"
    );
    if let Some(dir) = std::env::var_os("WASMGEAR_SCREENSHOTS") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("dashboard-job.png"), browser.screenshot().await).unwrap();
        for (page, name) in [
            ("/ui", "dashboard-queues.png"),
            ("/ui/failures", "dashboard-failures.png"),
            ("/ui/workers", "dashboard-workers.png"),
            (
                "/ui/functions/count?state=running",
                "dashboard-function.png",
            ),
        ] {
            browser.goto(&format!("{base}{page}")).await;
            std::fs::write(dir.join(name), browser.screenshot().await).unwrap();
        }
        browser.goto(&format!("{base}/ui/jobs/{counting}")).await;
    }

    // Cancel it: the dashboard asks first, then the page follows the job to its end.
    browser.click("form[action$=\"/cancel\"] button").await;
    let question = browser.dialog(Duration::from_secs(10)).await;
    assert_eq!(question, format!("Cancel job {counting}?"));
    browser.accept().await;
    browser
        .until(
            Duration::from_secs(30),
            "the job to show as cancelled",
            "const s = document.querySelector('main .state'); return s && s.textContent === 'cancelled'",
        )
        .await;
    assert_eq!(
        client
            .status(&counting)
            .await
            .unwrap()
            .record
            .state
            .as_str(),
        "cancelled"
    );

    // The failed job's plugin is fixed (echo in its place); "retry all" runs it again and
    // its page shows it succeeded.
    // The worker list says which version of a plugin serves each function.
    let serving = || async {
        let workers = client.workers().await.ok()?;
        workers
            .into_iter()
            .find_map(|w| w.ad.ok()?.functions.get("flaky").cloned())
    };
    let before = eventually(Duration::from_secs(30), "flaky in the worker list", serving).await;
    std::fs::copy(artifact("echo"), plugins.path().join("flaky.wasm")).unwrap();
    eventually(
        Duration::from_secs(30),
        "the fixed plugin to serve flaky",
        || async { serving().await.filter(|version| *version != before) },
    )
    .await;
    browser.goto(&format!("{base}/ui/failures")).await;
    browser
        .click("form[action^=\"/ui/failures/flaky/\"] button")
        .await;
    let question = browser.dialog(Duration::from_secs(10)).await;
    assert!(
        question.starts_with("Run all 1 failed jobs of flaky"),
        "{question}"
    );
    browser.accept().await;
    // The form's answer brings the browser back to the failures page, the group gone.
    browser
        .until(
            Duration::from_secs(30),
            "the failures page without the group",
            "return location.pathname === '/ui/failures' && document.readyState === 'complete' && !document.querySelector('form[action^=\"/ui/failures/flaky/\"]')",
        )
        .await;
    browser.goto(&format!("{base}/ui/jobs/{flaky}")).await;
    browser
        .until(
            Duration::from_secs(30),
            "the retried job to show as succeeded",
            "const s = document.querySelector('main .state'); return s && s.textContent === 'succeeded'",
        )
        .await;
    let output = browser
        .run(
            "return document.querySelector('main pre').textContent",
            json!([]),
        )
        .await;
    assert_eq!(output, "x");

    // Readable in a narrow window: the page does not scroll sideways (wide tables scroll
    // inside their own box).
    browser.resize(400, 800).await;
    browser.goto(&format!("{base}/ui")).await;
    assert_eq!(
        browser
            .run(
                "return document.documentElement.scrollWidth <= window.innerWidth + 1",
                json!([])
            )
            .await,
        true
    );
    drop(worker);
}

/// Signs in over HTTP; returns the cookie header value.
pub(crate) async fn sign_in(server: &Server) -> String {
    let answer = send(
        server,
        "POST",
        "/ui/login",
        &[FORM],
        &format!("token={TOKEN}&next=%2Fui"),
    )
    .await;
    let cookie = answer.headers["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

/// Every page renders what it should: a function's jobs a page at a time and by tag, the
/// search by id, the statistics, the workers with their plugins; pause, resume and priority
/// change the queue (and a bad priority changes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_the_queue_actions() {
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let cookie = sign_in(&server).await;
    let signed_in = [("cookie", cookie.as_str())];
    let client = redis.client().await;
    let waiting = function("waiting");
    let tagged = EnqueueOptions {
        tags: vec!["blue".into()],
        ..EnqueueOptions::default()
    };
    for i in 0..60 {
        let options = if i < 3 {
            &tagged
        } else {
            &EnqueueOptions::default()
        };
        client.enqueue(&waiting, b"x", options).await.unwrap();
    }
    let get = |path: String| {
        let server = &server;
        async move {
            let answer = send(server, "GET", &path, &signed_in, "").await;
            assert_eq!(answer.status, 200, "{path}: {}", answer.body);
            answer.body
        }
    };
    let rows = |page: &str| {
        page.matches("<tr><th scope=\"row\"><a href=\"/ui/jobs/")
            .count()
    };
    let first = get("/ui/functions/waiting?state=queued".into()).await;
    assert_eq!(rows(&first), 50);
    assert!(first.contains("Settings: none"), "{first}");
    client
        .configure(&waiting, &[wasmgear_client::Setting::MinReplicas(Some(2))])
        .await
        .unwrap();
    let configured = get("/ui/functions/waiting?state=queued".into()).await;
    assert!(
        configured.contains("Settings: writes confirmed by 2 replicas"),
        "{configured}"
    );
    client
        .configure(&waiting, &[wasmgear_client::Setting::MinReplicas(None)])
        .await
        .unwrap();
    assert!(first.contains("rel=\"next\"") && !first.contains("rel=\"prev\""));
    let second = get("/ui/functions/waiting?state=queued&page=1".into()).await;
    assert_eq!(rows(&second), 10);
    assert!(second.contains("rel=\"prev\"") && !second.contains("rel=\"next\""));
    let blue = get("/ui/functions/waiting?tag=blue".into()).await;
    assert_eq!(rows(&blue), 3);
    let search = send(&server, "GET", "/ui/functions/waiting?id=7", &signed_in, "").await;
    assert_eq!(search.status, 303);
    assert_eq!(search.headers["location"], "/ui/jobs/waiting%3A7");

    // Priority: a queued job moves; a bad value is refused and changes nothing.
    let job = get("/ui/jobs/waiting:60".into()).await;
    let csrf = csrf_of(&job);
    let form_headers = [FORM, ("cookie", cookie.as_str())];
    let bad = send(
        &server,
        "POST",
        "/ui/jobs/waiting:60/priority",
        &form_headers,
        &format!("csrf={csrf}&priority=soon"),
    )
    .await;
    assert_eq!(bad.status, 409);
    let id: wasmgear_client::JobId = "waiting:60".parse().unwrap();
    assert_eq!(client.status(&id).await.unwrap().record.priority, 0);
    let moved = send(
        &server,
        "POST",
        "/ui/jobs/waiting:60/priority",
        &form_headers,
        &format!("csrf={csrf}&priority=100"),
    )
    .await;
    assert_eq!(moved.status, 303, "{}", moved.body);
    assert_eq!(client.status(&id).await.unwrap().record.priority, 100);
    let first = get("/ui/functions/waiting?state=queued".into()).await;
    let top = first.split("<tbody>").nth(1).unwrap();
    assert!(
        top.starts_with("<tr><th scope=\"row\"><a href=\"/ui/jobs/waiting%3A60\">"),
        "{top}"
    );

    // Pause and resume.
    for (path, paused) in [("pause", true), ("resume", false)] {
        let answer = send(
            &server,
            "POST",
            &format!("/ui/functions/waiting/{path}"),
            &form_headers,
            &format!("csrf={csrf}"),
        )
        .await;
        assert_eq!(answer.status, 303, "{}", answer.body);
        assert_eq!(client.config(&waiting).await.unwrap().paused, paused);
        let overview = get("/ui".into()).await;
        assert_eq!(
            overview.contains("<span class=\"badge\">paused</span>"),
            paused
        );
    }

    // A worker runs some echo jobs: the workers page names it and its plugin, the
    // statistics page charts today's run times.
    let plugins = wasmgear_testkit::plugin_dir(&["echo"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();
    for _ in 0..3 {
        let id = client
            .enqueue(&function("echo"), b"hi", &EnqueueOptions::default())
            .await
            .unwrap();
        client.wait(&id, WAIT, |_| {}).await.unwrap();
    }
    let workers = get("/ui/workers".into()).await;
    assert!(
        workers.contains("<h3>Plugins</h3><ul><li>echo <code>"),
        "{workers}"
    );
    let stats = get("/ui/functions/echo/stats".into()).await;
    assert!(stats.contains("<h2>Run time</h2><p>3 jobs"), "{stats}");
    assert!(stats.contains("<svg class=\"chart\""), "{stats}");
    let bad_day = send(
        &server,
        "GET",
        "/ui/functions/echo/stats?day=someday",
        &signed_in,
        "",
    )
    .await;
    assert_ne!(bad_day.status, 200);
    let succeeded = get("/ui/functions/echo?state=succeeded".into()).await;
    assert_eq!(rows(&succeeded), 3);
    drop(worker);
}

/// What the next test stores in every field that a producer, a plugin or a worker fills:
/// markup that would run a script if a page passed it on as HTML.
const MARKUP: &str = "<script>window.__xss=1</script><img src=x onerror=\"window.__xss=2\">";

/// Markup stored in a job's input, output, error message, tags, log, progress message and
/// plugin version, and in a worker's advertisement, is shown as text on every page that
/// lists or shows them (and in the error and sign-in pages that repeat a path): over HTTP it
/// comes escaped; in Chromium no element is injected and no script runs, also once the page
/// is fetched again into place as the live script does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_in_jobs_and_workers_is_shown_as_text() {
    use wasmgear_client::WorkerQueue;
    use wasmgear_proto::{AttemptNotes, ErrorClass, JobFailure, LeaseRequest, Progress, WorkerAd};
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let client = redis.client().await;
    let f = function("xss");
    let options = EnqueueOptions {
        tags: vec![MARKUP.into()],
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            client
                .enqueue(&f, MARKUP.as_bytes(), &options)
                .await
                .unwrap(),
        );
    }
    // A worker of any make, its id and advertisement holding markup too, runs the three:
    // one goes on running, one fails, one succeeds.
    let hand = WorkerQueue::connect(&redis.url(), format!("w{MARKUP}"))
        .await
        .unwrap();
    let ttl = Duration::from_secs(600);
    let leases = hand
        .lease(&[LeaseRequest::new(f.clone())], 3, ttl)
        .await
        .unwrap();
    let lease = |id: &wasmgear_client::JobId| {
        leases
            .iter()
            .find(|l| &l.info.id == id)
            .expect("each job leased")
    };
    let notes = AttemptNotes {
        log: format!("logged {MARKUP}"),
        plugin_version: Some(MARKUP.into()),
    };
    let progress = Progress {
        done: 1,
        total: 3,
        message: Some(MARKUP.into()),
    };
    assert!(hand.progress(lease(&ids[0]), &progress).await.unwrap());
    let failure = JobFailure::new(ErrorClass::GuestError, MARKUP);
    hand.fail(lease(&ids[1]), &failure, &notes).await.unwrap();
    hand.complete(lease(&ids[2]), MARKUP.as_bytes(), &notes)
        .await
        .unwrap();
    let ad = WorkerAd {
        host: MARKUP.into(),
        pid: 1,
        version: MARKUP.into(),
        started_ms: wasmgear_proto::units::now_ms(),
        concurrency: 1,
        functions: [("xss".to_string(), MARKUP.to_string())].into(),
        running: vec![ids[0].to_string()],
        plugin_errors: vec![MARKUP.into()],
        sources: vec![MARKUP.into()],
        deployed: Vec::new(),
        batches: [("xss".to_string(), 7)].into(),
    };
    hand.advertise(&ad, std::slice::from_ref(&f), ttl)
        .await
        .unwrap();
    let state = |i: usize| {
        let client = &client;
        let id = ids[i].clone();
        async move { client.status(&id).await.unwrap().record.state }
    };
    assert_eq!(state(1).await.as_str(), "failed");
    assert_eq!(state(2).await.as_str(), "succeeded");

    // Every page that lists or shows them: whether it shows the markup as text (`Text`), in
    // an attribute (`Attribute`, over HTTP only) or not at all; whether the live script
    // fetches it again into place.
    #[derive(Clone, Copy, PartialEq)]
    enum Shows {
        Text,
        Attribute,
        Nothing,
    }
    use Shows::{Attribute, Nothing, Text};
    let encoded: String = MARKUP.bytes().map(|b| format!("%{b:02X}")).collect();
    let pages = [
        ("/ui".to_string(), Nothing, true),
        ("/ui/functions/xss?state=running".into(), Text, true),
        ("/ui/functions/xss?state=failed".into(), Text, true),
        ("/ui/functions/xss?state=succeeded".into(), Text, true),
        (format!("/ui/functions/xss?tag={encoded}"), Text, true),
        (format!("/ui/jobs/{}", ids[0]), Text, true),
        (format!("/ui/jobs/{}", ids[1]), Text, true),
        (format!("/ui/jobs/{}", ids[2]), Text, true),
        ("/ui/failures".into(), Nothing, true),
        ("/ui/workers".into(), Text, true),
        ("/ui/functions/xss/stats".into(), Nothing, false),
        // Pages that repeat what the address holds.
        (format!("/ui/functions/{encoded}"), Text, false),
        (format!("/ui/jobs/xss:{encoded}"), Text, false),
        (format!("/ui/login?next=/ui{encoded}"), Attribute, false),
    ];
    // The markup up to its first quote (error messages quote what they repeat).
    let shown = "<script>window.__xss=1</script><img src=x onerror=";
    let escaped = "&lt;script&gt;window.__xss=1&lt;/script&gt;&lt;img src=x onerror=";
    let cookie = sign_in(&server).await;
    for (path, shows, _) in &pages {
        let page = send(&server, "GET", path, &[("cookie", cookie.as_str())], "").await;
        assert!(
            !page.body.contains("<script>window") && !page.body.contains("<img"),
            "{path} passes markup on as HTML: {}",
            page.body
        );
        assert_eq!(
            page.body.contains(escaped),
            *shows != Nothing,
            "{path}: {}",
            page.body
        );
    }
    let job = send(
        &server,
        "GET",
        &format!("/ui/jobs/{}", ids[1]),
        &[("cookie", cookie.as_str())],
        "",
    )
    .await;
    // Input, error, log, tags, the attempt's plugin version and message, its worker.
    assert!(job.body.matches(escaped).count() >= 6, "{}", job.body);
    // The worker's batch plugin says how many jobs a call takes.
    let workers = send(
        &server,
        "GET",
        "/ui/workers",
        &[("cookie", cookie.as_str())],
        "",
    )
    .await;
    assert!(
        workers.body.contains("</code> batches of up to 7</li>"),
        "{}",
        workers.body
    );

    let browser = Browser::start().await;
    let base = format!("http://{}", server.address);
    browser.goto(&format!("{base}/ui/login")).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("form.login button").await;
    browser
        .until(
            Duration::from_secs(10),
            "the overview after signing in",
            "return location.pathname === '/ui'",
        )
        .await;
    for (path, shows, live) in &pages {
        browser.goto(&format!("{base}{path}")).await;
        if *live {
            // Fetched again into place as the live script does (its `main` as HTML).
            browser
                .run(
                    "const m = document.getElementById('main'); \
                     fetch(location.href, { headers: { 'X-Wasmgear-Fragment': '1' } }) \
                     .then(r => r.text()).then(h => { m.innerHTML = h; m.setAttribute('data-again', '1'); }); \
                     return 1",
                    json!([]),
                )
                .await;
            browser
                .until(
                    Duration::from_secs(15),
                    &format!("{path} to be fetched again into place"),
                    "return document.getElementById('main').hasAttribute('data-again')",
                )
                .await;
        }
        let seen = browser
            .run(
                "return { ran: window.__xss === undefined ? 0 : window.__xss, \
                 images: document.images.length, \
                 scripts: [...document.scripts].filter(s => !s.src.endsWith('/ui/assets/app.js')).length, \
                 text: document.body.textContent.includes(arguments[0]) }",
                json!([shown]),
            )
            .await;
        assert_eq!(
            seen,
            json!({ "ran": 0, "images": 0, "scripts": 0, "text": *shows == Text }),
            "{path}"
        );
    }
    drop(hand);
}
