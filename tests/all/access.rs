//! Scoped tokens and the audit log: `wasmgear token add` writes hashes only; `serve
//! --tokens-file` lets each token do what its role allows to the functions it names and
//! refuses the rest with 403 and the reason, changing nothing; operate actions through the
//! API, the dashboard and the CLI, and every refusal, land in the audit log, which `wasmgear
//! audit`, `GET /v1/audit` (admin) and the dashboard's audit page show.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_testkit::{
    TestRedis, WorkerProcess, function, json as json_of, plugin_dir, stderr, stdout, wasmgear,
};

use crate::dashboard::{FORM, csrf_of, send};
use crate::http_api::{Server, TOKEN, request};

/// `wasmgear token add FILE NAME ARGS...`: the token it prints.
fn add_token(file: &Path, name: &str, args: &[&str]) -> String {
    let mut all = vec!["token", "add", file.to_str().unwrap(), name];
    all.extend_from_slice(args);
    let out = wasmgear(&all, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

/// A job that waits an hour: something to cancel.
async fn later_job(client: &wasmgear_client::Client) -> wasmgear_client::JobId {
    let options = EnqueueOptions {
        delay: Duration::from_secs(3600),
        ..EnqueueOptions::default()
    };
    client
        .enqueue(&function("later"), b"", &options)
        .await
        .unwrap()
}

/// The audit log through the API (admin), newest first.
async fn audit_log(server: &Server) -> Vec<Value> {
    let answer = request(server, "GET", "/v1/audit?limit=100", Some(TOKEN), None).await;
    assert_eq!(
        answer.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    // Nothing is older than the first id a stream can hold (Redis refuses `(0-0`).
    let first = request(server, "GET", "/v1/audit?before=0-0", Some(TOKEN), None).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert_eq!(first.json()["entries"], serde_json::json!([]));
    answer.json()["entries"].as_array().unwrap().clone()
}

fn has_entry(log: &[Value], actor: &str, action: &str, outcome_starts: &str) -> bool {
    log.iter().any(|e| {
        e["actor"] == actor
            && e["action"] == action
            && e["outcome"]
                .as_str()
                .unwrap_or("")
                .starts_with(outcome_starts)
    })
}

async fn seq_exists(redis: &TestRedis, function: &str) -> bool {
    let mut raw = redis.raw().await;
    let n: u64 = redis::cmd("EXISTS")
        .arg(
            wasmgear_proto::keys::FunctionKeys::new(
                &wasmgear_client::FunctionName::new(function).unwrap(),
            )
            .seq(),
        )
        .query_async(&mut raw)
        .await
        .unwrap();
    n == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_token_does_what_its_role_allows_and_the_audit_log_keeps_it() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.toml");
    let reader = add_token(&file, "dashboard", &["--role", "read"]);
    let ops = add_token(&file, "ops", &["--role", "operate"]);
    let billing = add_token(
        &file,
        "billing",
        &["--role", "enqueue", "--functions", "echo"],
    );
    let text = std::fs::read_to_string(&file).unwrap();
    for token in [&reader, &ops, &billing] {
        assert!(
            !text.contains(token.as_str()),
            "the file holds a token itself:\n{text}"
        );
    }
    // A name twice is refused and the file is left as it was.
    let again = wasmgear(
        &[
            "token",
            "add",
            file.to_str().unwrap(),
            "ops",
            "--role",
            "admin",
        ],
        &[],
    );
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);

    let server = Server::start(
        &redis,
        &["--tokens-file", file.to_str().unwrap()],
        &[("WASMGEAR_API_TOKEN", TOKEN)],
    );
    let plugins = plugin_dir(&["echo", "reverse"]);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(plugins.path())
        .start();

    // Read-only: reads, and is refused an enqueue, which writes nothing.
    let refused = request(
        &server,
        "POST",
        "/v1/functions/echo/jobs",
        Some(&reader),
        Some(json!({ "input": "x" })),
    )
    .await;
    assert_eq!(refused.status, 403);
    assert_eq!(refused.json()["error"]["class"], "forbidden");
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("role read") && message.contains("needs enqueue"),
        "{message}"
    );
    assert!(
        !seq_exists(&redis, "echo").await,
        "a refused enqueue wrote nothing"
    );
    assert_eq!(
        request(&server, "GET", "/v1/queues", Some(&reader), None)
            .await
            .status,
        200
    );

    // Enqueue, for its own function only.
    let enqueued = request(
        &server,
        "POST",
        "/v1/functions/echo/jobs",
        Some(&billing),
        Some(json!({ "input": "hi" })),
    )
    .await;
    assert!(
        enqueued.status == 200 || enqueued.status == 201,
        "{}",
        enqueued.status
    );
    let id = enqueued.json()["id"].as_str().unwrap().to_string();
    let job_id: wasmgear_client::JobId = id.parse().unwrap();
    client
        .wait(&job_id, Some(Duration::from_secs(30)), |_| {})
        .await
        .unwrap();
    let read = request(
        &server,
        "GET",
        &format!("/v1/jobs/{id}"),
        Some(&billing),
        None,
    )
    .await;
    assert_eq!(
        read.json()["output"],
        "hi",
        "{}",
        String::from_utf8_lossy(&read.body)
    );
    let other = request(
        &server,
        "POST",
        "/v1/functions/reverse/jobs",
        Some(&billing),
        Some(json!({ "input": "x" })),
    )
    .await;
    assert_eq!(other.status, 403);
    assert!(String::from_utf8_lossy(&other.body).contains("only functions echo"));
    assert!(!seq_exists(&redis, "reverse").await);
    let spans = request(&server, "GET", "/v1/queues", Some(&billing), None).await;
    assert_eq!(spans.status, 403);
    let cancel = format!("/v1/jobs/{id}/cancel");
    assert_eq!(
        request(&server, "POST", &cancel, Some(&billing), None)
            .await
            .status,
        403
    );
    assert_eq!(
        request(&server, "GET", "/v1/events", Some(&billing), None)
            .await
            .status,
        403
    );

    // Operate: acts on jobs, may not enqueue.
    let queued = later_job(&client).await;
    let cancelled = request(
        &server,
        "POST",
        &format!("/v1/jobs/{queued}/cancel"),
        Some(&ops),
        None,
    )
    .await;
    assert_eq!(
        cancelled.status,
        200,
        "{}",
        String::from_utf8_lossy(&cancelled.body)
    );
    assert_eq!(
        client.status(&queued).await.unwrap().record.state,
        JobState::Cancelled
    );
    assert_eq!(
        request(
            &server,
            "POST",
            "/v1/functions/echo/jobs",
            Some(&ops),
            Some(json!({}))
        )
        .await
        .status,
        403
    );

    // No token, or one the server does not know: 401.
    assert_eq!(
        request(&server, "GET", "/v1/queues", None, None)
            .await
            .status,
        401
    );
    assert_eq!(
        request(&server, "GET", "/v1/queues", Some("guess"), None)
            .await
            .status,
        401
    );
    // The audit log is the admin's.
    assert_eq!(
        request(&server, "GET", "/v1/audit", Some(&ops), None)
            .await
            .status,
        403
    );

    // The CLI's operate commands are audited with the user and host.
    let url = redis.url();
    let out = wasmgear(
        &["retry", &queued.to_string()],
        &[("WASMGEAR_REDIS_URL", &url), ("USER", "alice")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let log = audit_log(&server).await;
    assert!(
        has_entry(
            &log,
            "token dashboard",
            "POST /v1/functions/{function}/jobs",
            "refused: token \"dashboard\" has role read"
        ),
        "{log:#?}"
    );
    assert!(
        has_entry(
            &log,
            "token billing",
            "POST /v1/functions/{function}/jobs",
            "refused"
        ),
        "{log:#?}"
    );
    assert!(
        has_entry(&log, "token billing", "GET /v1/queues", "refused"),
        "{log:#?}"
    );
    assert!(
        has_entry(&log, "token ops", "POST /v1/jobs/{id}/cancel", "ok"),
        "{log:#?}"
    );
    assert!(
        log.iter()
            .any(|e| e["target"] == format!("/v1/jobs/{queued}/cancel")),
        "{log:#?}"
    );
    let cli = log
        .iter()
        .find(|e| e["action"] == "retry")
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert!(
        cli["actor"].as_str().unwrap().starts_with("cli alice@"),
        "{cli}"
    );
    assert_eq!(cli["target"], queued.to_string());
    assert!(
        !log.iter()
            .any(|e| e["actor"] == "token billing" && e["outcome"] == "ok"),
        "submissions are not audited: {log:#?}"
    );
    // `wasmgear audit` shows the same, newest first.
    let out = wasmgear(&["audit", "--json"], &[("WASMGEAR_REDIS_URL", &url)]);
    let listed = json_of(&out);
    assert_eq!(listed[0]["action"], "retry", "{listed:#}");
    assert_eq!(listed.as_array().unwrap().len(), log.len());
    let out = wasmgear(&["audit"], &[("WASMGEAR_REDIS_URL", &url)]);
    assert!(stdout(&out).contains("cli alice@"), "{}", stdout(&out));
    drop((server, worker));
}

/// The dashboard: a read-only token reads pages and is refused actions (which change
/// nothing, and are audited); a token limited to some functions cannot sign in; the audit
/// page is the admin's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_follows_the_token_s_role() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.toml");
    let reader = add_token(&file, "viewer", &["--role", "read"]);
    let scoped = add_token(
        &file,
        "tenant",
        &["--role", "operate", "--functions", "echo"],
    );
    let server = Server::start(
        &redis,
        &["--tokens-file", file.to_str().unwrap()],
        &[("WASMGEAR_API_TOKEN", TOKEN)],
    );
    let id = later_job(&client).await;
    let sign_in = |token: String| {
        let server = &server;
        async move {
            send(
                server,
                "POST",
                "/ui/login",
                &[FORM],
                &format!("token={token}&next=%2Fui"),
            )
            .await
        }
    };
    let tenant = sign_in(scoped).await;
    assert_eq!(tenant.status, 403);
    assert!(
        tenant.body.contains("may touch only functions echo"),
        "{}",
        tenant.body
    );

    let viewer = sign_in(reader).await;
    let cookie = viewer.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let with_cookie = [("cookie", cookie.as_str())];
    let page = send(&server, "GET", &format!("/ui/jobs/{id}"), &with_cookie, "").await;
    assert_eq!(page.status, 200);
    let csrf = csrf_of(&page.body);
    let refused = send(
        &server,
        "POST",
        &format!("/ui/jobs/{id}/cancel"),
        &[FORM, ("cookie", cookie.as_str())],
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(refused.status, 403);
    assert!(
        refused.body.contains("actions need operate"),
        "{}",
        refused.body
    );
    assert_eq!(
        client.status(&id).await.unwrap().record.state,
        JobState::Scheduled
    );
    let audit_page = send(&server, "GET", "/ui/audit", &with_cookie, "").await;
    assert_eq!(audit_page.status, 403);

    // The admin token's audit page shows the refusal.
    let admin = sign_in(TOKEN.to_string()).await;
    let cookie = admin.headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let audit_page = send(
        &server,
        "GET",
        "/ui/audit",
        &[("cookie", cookie.as_str())],
        "",
    )
    .await;
    assert_eq!(audit_page.status, 200);
    assert!(
        audit_page.body.contains("dashboard, token viewer"),
        "{}",
        audit_page.body
    );
    assert!(audit_page.body.contains("refused"), "{}", audit_page.body);
    drop(server);
}
