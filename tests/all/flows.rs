//! Flows: graphs of jobs of several functions submitted in one call, run by real worker
//! processes serving real plugins, whose dependents read their dependencies' outputs.

use std::time::Duration;

use wasmgear_client::{
    Client, EnqueueOptions, Flow, FlowEdge, FlowJob, FlowStatus, JobState, OnFailure, QueueError,
};
use wasmgear_testkit::{TestRedis, WorkerProcess, eventually, function, plugin_copies, plugin_dir};

const WAIT: Duration = Duration::from_secs(120);

fn job(name: &str, function_name: &str, input: &str) -> FlowJob {
    FlowJob::new(name, function(function_name), input.as_bytes())
}

fn edge(job: &str, on_failure: OnFailure) -> FlowEdge {
    FlowEdge {
        job: job.into(),
        on_failure,
    }
}

/// The state and output of the flow's job `name`.
async fn outcome(client: &Client, status: &FlowStatus, name: &str) -> (JobState, Vec<u8>) {
    let job = status
        .jobs
        .iter()
        .find(|j| j.name == name)
        .unwrap_or_else(|| panic!("the flow has no job {name}"));
    let job_status = client.status(&job.id).await.unwrap();
    (
        job_status.record.state,
        job_status.output.unwrap_or_default(),
    )
}

fn worker(redis: &TestRedis, plugins: &[&str]) -> (WorkerProcess, tempfile::TempDir) {
    let dir = plugin_dir(plugins);
    let worker = WorkerProcess::builder(&redis.url())
        .plugins(dir.path())
        .args(&["--concurrency", "8"])
        .start();
    (worker, dir)
}

/// A diamond across two functions: `a` first, then `b` and `c`, then `d` (a `join`) reads
/// `b`'s and `c`'s outputs in the order of its edges. Each job's record names the flow,
/// and the flow's status lists every job after those it waits on, with `d` its one sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_runs_each_job_after_its_dependencies_and_join_reads_their_outputs() {
    let redis = TestRedis::start();
    let (_worker, _plugins) = worker(&redis, &["reverse", "join"]);
    let client = redis.client().await;
    let flow = Flow {
        name: "diamond".into(),
        jobs: vec![
            job("d", "join", "").after(["c", "b"]),
            job("b", "reverse", "bb1").after(["a"]),
            job("c", "reverse", "cc2").after(["a"]),
            job("a", "reverse", "aa0"),
        ],
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    assert_eq!(
        submitted
            .jobs
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["d", "b", "c", "a"]
    );
    let status = client.wait_flow(submitted.id, Some(WAIT)).await.unwrap();
    assert!(status.ended());
    assert_eq!(status.name, "diamond");
    let order: Vec<&str> = status.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(order, ["a", "b", "c", "d"], "dependencies first");
    assert_eq!(
        status
            .sinks()
            .iter()
            .map(|j| j.name.as_str())
            .collect::<Vec<_>>(),
        ["d"]
    );
    assert!(
        status
            .jobs
            .iter()
            .all(|j| j.state == Some(JobState::Succeeded)),
        "{status:?}"
    );
    let (_, joined) = outcome(&client, &status, "d").await;
    assert_eq!(joined, b"2cc\n1bb");
    // Each job started after its dependencies ended.
    let record = |name: &str| {
        let id = status
            .jobs
            .iter()
            .find(|j| j.name == name)
            .unwrap()
            .id
            .clone();
        let client = client.clone();
        async move { client.status(&id).await.unwrap().record }
    };
    let (a, b, c, d) = (
        record("a").await,
        record("b").await,
        record("c").await,
        record("d").await,
    );
    for (before, after) in [(&a, &b), (&a, &c), (&b, &d), (&c, &d)] {
        assert!(before.finished_ms.unwrap() <= after.started_ms.unwrap());
    }
    assert!(
        [&a, &b, &c, &d]
            .iter()
            .all(|r| r.flow == Some(submitted.id))
    );
}

/// A fan-out of 1,000 `reverse` jobs and a fan-in through `join`: its output is theirs, one
/// per line, in the order of its edges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_in_of_a_thousand_jobs_joins_every_output_in_order() {
    let redis = TestRedis::start();
    let (_worker, _plugins) = worker(&redis, &["reverse", "join"]);
    let client = redis.client().await;
    let names: Vec<String> = (0..1000).map(|i| format!("part{i}")).collect();
    let mut jobs: Vec<FlowJob> = names
        .iter()
        .enumerate()
        .map(|(i, name)| job(name, "reverse", &format!("{i:04}")))
        .collect();
    jobs.push(job("all", "join", "").after(names.iter().rev().cloned()));
    let flow = Flow {
        name: "fan".into(),
        jobs,
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    let status = client.wait_flow(submitted.id, Some(WAIT)).await.unwrap();
    let (state, joined) = outcome(&client, &status, "all").await;
    assert_eq!(state, JobState::Succeeded);
    let expected: Vec<String> = (0..1000)
        .rev()
        .map(|i| format!("{i:04}").chars().rev().collect())
        .collect();
    assert_eq!(String::from_utf8(joined).unwrap(), expected.join("\n"));
}

/// Each failure policy with a failing dependency: `cancel` (the default) cancels the
/// dependent; `ignore` lets it run and read the error where the output would be, unless
/// a `cancel` edge fails too; `continue` runs it once every dependency has ended, however.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_policy_decides_what_a_failed_dependency_does_to_its_dependent() {
    let redis = TestRedis::start();
    let (_worker, _plugins) = worker(&redis, &["reverse", "join", "fail"]);
    let client = redis.client().await;
    let mut ignored = job("ignored", "join", "");
    ignored.after = vec![
        edge("ok", OnFailure::Cancel),
        edge("bad", OnFailure::Ignore),
    ];
    let mut ignored_but_cancelled = job("ignored_but_cancelled", "join", "");
    ignored_but_cancelled.after = vec![
        edge("bad", OnFailure::Ignore),
        edge("bad2", OnFailure::Cancel),
    ];
    let mut continued = job("continued", "join", "");
    continued.after = vec![
        edge("bad", OnFailure::Continue),
        edge("bad2", OnFailure::Cancel),
        edge("ok", OnFailure::Cancel),
    ];
    let flow = Flow {
        name: "policies".into(),
        jobs: vec![
            job("ok", "reverse", "ko"),
            job("bad", "fail", "one"),
            job("bad2", "fail", "two"),
            job("cancelled", "join", "").after(["ok", "bad"]),
            ignored,
            ignored_but_cancelled,
            continued,
        ],
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    let status = client.wait_flow(submitted.id, Some(WAIT)).await.unwrap();
    let (state, _) = outcome(&client, &status, "cancelled").await;
    assert_eq!(state, JobState::Cancelled);
    let (state, output) = outcome(&client, &status, "ignored").await;
    assert_eq!(state, JobState::Succeeded);
    let output = String::from_utf8(output).unwrap();
    let (first, second) = output.split_once('\n').unwrap();
    assert_eq!(first, "ok");
    assert!(
        second.starts_with("error: fail:") && second.contains("failed on purpose: one"),
        "{second}"
    );
    let (state, _) = outcome(&client, &status, "ignored_but_cancelled").await;
    assert_eq!(state, JobState::Cancelled);
    let (state, output) = outcome(&client, &status, "continued").await;
    assert_eq!(state, JobState::Succeeded);
    let lines: Vec<String> = String::from_utf8(output)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].contains("failed on purpose: one"), "{lines:?}");
    assert!(lines[1].contains("failed on purpose: two"));
    assert_eq!(lines[2], "ok");
}

/// A flow cancelled while its jobs wait: every unfinished job ends cancelled (a running one
/// would be asked to stop); cancelling again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_flow_cancels_every_unfinished_job() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let mut later = job("later", "reverse", "x");
    later.options = EnqueueOptions {
        delay: Duration::from_secs(3600),
        ..EnqueueOptions::default()
    };
    let flow = Flow {
        name: "to-cancel".into(),
        jobs: vec![
            later,
            job("next", "join", "").after(["later"]),
            job("last", "reverse", "y").after(["next"]),
        ],
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    let status = client.flow(submitted.id).await.unwrap();
    assert_eq!(
        status.counts(),
        [("waiting", 2), ("scheduled", 1)],
        "{status:?}"
    );
    assert_eq!(client.cancel_flow(submitted.id).await.unwrap(), 3);
    let status = client.flow(submitted.id).await.unwrap();
    assert_eq!(status.counts(), [("cancelled", 3)]);
    assert_eq!(client.cancel_flow(submitted.id).await.unwrap(), 0);
}

/// A flow whose middle step's plugin fails: its dependent is cancelled, and the flow ends.
/// Once the plugin is fixed (another worker serves the function with a working plugin), the
/// retried flow runs the failed and cancelled jobs again; the succeeded one keeps its
/// output and is not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_retried_after_its_plugin_was_fixed_runs_only_what_did_not_succeed() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let flow = Flow {
        name: "fix-me".into(),
        jobs: vec![
            job("first", "reverse", "abc"),
            job("step", "step", "xyz").after(["first"]),
            job("end", "join", "").after(["first", "step"]),
        ],
    };
    let broken = plugin_copies("fail", &["step".into()]);
    let joins = plugin_dir(&["reverse", "join"]);
    for (from, to) in [("reverse.wasm", "reverse.wasm"), ("join.wasm", "join.wasm")] {
        std::fs::copy(joins.path().join(from), broken.path().join(to)).unwrap();
    }
    let submitted = {
        let _worker = WorkerProcess::builder(&redis.url())
            .plugins(broken.path())
            .start();
        let submitted = client.submit_flow(&flow).await.unwrap();
        let status = client.wait_flow(submitted.id, Some(WAIT)).await.unwrap();
        let states: Vec<_> = status
            .jobs
            .iter()
            .map(|j| (j.name.as_str(), j.state))
            .collect();
        assert_eq!(
            states,
            [
                ("first", Some(JobState::Succeeded)),
                ("step", Some(JobState::Failed)),
                ("end", Some(JobState::Cancelled)),
            ]
        );
        submitted
    };
    let fixed = plugin_copies("reverse", &["step".into(), "reverse".into()]);
    std::fs::copy(
        joins.path().join("join.wasm"),
        fixed.path().join("join.wasm"),
    )
    .unwrap();
    let _worker = WorkerProcess::builder(&redis.url())
        .plugins(fixed.path())
        .start();
    let retried = client.retry_flow(submitted.id).await.unwrap();
    assert_eq!(retried.len(), 2, "{retried:?}");
    let status = client.wait_flow(submitted.id, Some(WAIT)).await.unwrap();
    assert!(
        status
            .jobs
            .iter()
            .all(|j| j.state == Some(JobState::Succeeded)),
        "{status:?}"
    );
    let (_, joined) = outcome(&client, &status, "end").await;
    assert_eq!(joined, b"cba\nzyx");
    let first = &status.jobs[0];
    assert_eq!(client.status(&first.id).await.unwrap().record.attempt, 1);
}

/// Bad graphs are refused with one sentence, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_graph_is_refused_whole_and_nothing_is_written() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let mut uniq = job("u", "reverse", "");
    uniq.options.uniq = Some("k".into());
    let too_many = Flow {
        name: "big".into(),
        jobs: (0..10_001)
            .map(|i| job(&format!("j{i}"), "reverse", ""))
            .collect(),
    };
    let cases: Vec<(Flow, &str)> = vec![
        (
            Flow {
                name: "unknown".into(),
                jobs: vec![
                    job("a", "reverse", ""),
                    job("b", "join", "").after(["nope"]),
                ],
            },
            "job \"b\" waits on \"nope\", which the flow does not have",
        ),
        (
            Flow {
                name: "cycle".into(),
                jobs: vec![
                    job("a", "reverse", "").after(["c"]),
                    job("b", "join", "").after(["a"]),
                    job("c", "reverse", "").after(["b"]),
                ],
            },
            "the flow has a cycle: a → c → b → a (each waits on the next)",
        ),
        (
            too_many,
            "has 10001 jobs, more than the 10000 a flow may have",
        ),
        (
            Flow {
                name: "twice".into(),
                jobs: vec![job("a", "reverse", ""), job("a", "join", "")],
            },
            "job \"a\" is named twice",
        ),
        (
            Flow {
                name: "uniq".into(),
                jobs: vec![uniq],
            },
            "a flow's jobs are always new, so they take no uniq",
        ),
        (
            Flow {
                name: "self".into(),
                jobs: vec![job("a", "reverse", "").after(["a"])],
            },
            "job \"a\" waits on itself",
        ),
    ];
    for (flow, expected) in cases {
        let error = client.submit_flow(&flow).await.unwrap_err();
        assert!(matches!(error, QueueError::BadOption(_)), "{error:?}");
        assert!(
            error.to_string().contains(expected),
            "{error} (expected {expected})"
        );
    }
    let keys: u64 = redis::cmd("DBSIZE")
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    assert_eq!(keys, 0, "a refused flow wrote nothing");
}

/// The diamond of [`a_diamond_runs_each_job_after_its_dependencies_and_join_reads_their_outputs`]
/// as the flow document the HTTP API, the CLI and the other clients send.
pub(crate) fn diamond_document() -> serde_json::Value {
    serde_json::json!({
        "name": "diamond",
        "jobs": {
            "a": { "function": "reverse", "input": "aa0" },
            "b": { "function": "reverse", "input": "bb1", "after": ["a"] },
            "c": { "function": "reverse", "input_json": { "n": 2 }, "after": ["a"] },
            "d": { "function": "join", "after": ["c", { "job": "b", "on_failure": "ignore" }] },
        }
    })
}

/// The HTTP API submits the diamond (`POST /v1/flows`), answers its status, and refuses a
/// bad graph (400, nothing written); cancel and retry of a flow answer what they did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_submits_reads_cancels_and_retries_a_flow() {
    use crate::http_api::{Server, get, post};
    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    // A flow read by position from an array is no flow.
    let array = post(
        &server,
        "/v1/flows",
        serde_json::json!(["bad", { "a": { "function": "reverse" } }]),
    )
    .await;
    assert_eq!(array.status, 400, "{}", array.json());
    let refused = post(
        &server,
        "/v1/flows",
        serde_json::json!({ "name": "bad", "jobs": {
            "a": { "function": "reverse", "after": ["b"] },
            "b": { "function": "reverse", "after": ["a"] } } }),
    )
    .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the flow has a cycle"),
        "{}",
        refused.json()
    );
    let keys: u64 = redis::cmd("DBSIZE")
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    assert_eq!(keys, 0);

    let (_worker, _plugins) = worker(&redis, &["reverse", "join"]);
    let answer = post(&server, "/v1/flows", diamond_document()).await;
    assert_eq!(answer.status, 201, "{}", answer.json());
    let submitted = answer.json();
    let id = submitted["id"].as_u64().unwrap();
    assert_eq!(submitted["jobs"].as_object().unwrap().len(), 4);
    let client = redis.client().await;
    client.wait_flow(id, Some(WAIT)).await.unwrap();
    let flow = get(&server, &format!("/v1/flows/{id}")).await.json();
    assert_eq!(flow["name"], "diamond");
    assert_eq!(flow["ended"], true);
    assert_eq!(flow["counts"], serde_json::json!({ "succeeded": 4 }));
    assert_eq!(flow["sinks"], serde_json::json!(["d"]));
    let d = flow["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "d")
        .unwrap();
    assert_eq!(
        d["after"][1],
        serde_json::json!({ "job": "b", "on_failure": "ignore" })
    );
    let d_id: wasmgear_client::JobId = d["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        client.status(&d_id).await.unwrap().output.unwrap(),
        b"}2:\"n\"{\n1bb"
    );
    let cancelled = post(
        &server,
        &format!("/v1/flows/{id}/cancel"),
        serde_json::json!({}),
    )
    .await;
    assert_eq!(cancelled.json()["cancelled"], 0);
    let retried = post(
        &server,
        &format!("/v1/flows/{id}/retry"),
        serde_json::json!({}),
    )
    .await;
    assert_eq!(retried.json()["retried"], serde_json::json!([]));
    assert_eq!(get(&server, "/v1/flows/999").await.status, 404);
}

/// `wasmgear flow submit FILE --wait` reads a TOML flow, follows it and prints its last
/// job's output; `flow status` draws the graph as a tree (each job under those waiting on
/// it, one met again marked `(above)`), and `--json` prints the API's object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_submits_a_toml_flow_waits_for_it_and_draws_it() {
    use wasmgear_testkit::{stderr, stdout, wasmgear};
    let redis = TestRedis::start();
    let (_worker, _plugins) = worker(&redis, &["reverse", "join"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("album.toml");
    std::fs::write(
        &file,
        r#"name = "album"
[jobs.a]
function = "reverse"
input = "aa0"
[jobs.b]
function = "reverse"
input = "bb1"
after = ["a"]
[jobs.c]
function = "reverse"
input = "cc2"
after = ["a"]
[jobs.d]
function = "join"
after = ["c", { job = "b", on_failure = "continue" }]
"#,
    )
    .unwrap();
    let env = [("WASMGEAR_REDIS_URL", redis.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = wasmgear(
        &[
            "flow",
            "submit",
            file.to_str().unwrap(),
            "--wait",
            "--wait-timeout",
            "2m",
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "2cc\n1bb\n");
    let out = wasmgear(&["flow", "status", "1"], &env);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tree = stdout(&out);
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(lines[0], "flow 1 \"album\": 4 jobs, 4 succeeded", "{tree}");
    assert!(lines[1].starts_with("d  join:1  succeeded"), "{tree}");
    assert!(lines[2].starts_with("├── c  reverse:"), "{tree}");
    assert!(lines[3].starts_with("│   └── a  reverse:"), "{tree}");
    assert!(lines[4].starts_with("└── [continue] b  reverse:"), "{tree}");
    assert!(
        lines[5].starts_with("    └── a  reverse:") && lines[5].ends_with("(above)"),
        "{tree}"
    );
    let out = wasmgear(&["flow", "status", "1", "--json"], &env);
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["counts"]["succeeded"], 4);
    let out = wasmgear(&["flow", "status", "7"], &env);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(stderr(&out).contains("no flow 7"), "{}", stderr(&out));
}

/// The dashboard's flow page: the graph is SVG made by the server, one box per job linking
/// to the job's page, coloured by state and live (a waiting job turns succeeded without a
/// reload, in headless Chromium); the flows list links to it, a job's page links back, and
/// the page's cancel and retry act on the whole flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_draws_a_flow_live_and_acts_on_it() {
    use crate::dashboard::{FORM, csrf_of, send, sign_in};
    use crate::http_api::{Server, TOKEN};
    use crate::support::browser::Browser;
    let redis = TestRedis::start();
    let (_worker, _plugins) = worker(&redis, &["count", "reverse", "join"]);
    let server = Server::with_token(&redis);
    let client = redis.client().await;
    let flow = Flow {
        name: "drawn".into(),
        jobs: vec![
            // Ten seconds: the browser (started below) sees the last box waiting even on a
            // loaded machine, then turn succeeded live.
            job("slow", "count", "100 100"),
            job("next", "reverse", "xyz").after(["slow"]),
            job("end", "join", "").after(["next", "slow"]),
        ],
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    let id = submitted.id;
    let cookie = sign_in(&server).await;
    let page = send(
        &server,
        "GET",
        &format!("/ui/flows/{id}"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.body.matches("<a href=\"/ui/jobs/").count(),
        6,
        "three boxes and three rows"
    );
    for (name, job_id) in &submitted.jobs {
        assert!(
            page.body.contains(&format!("data-job=\"{name}\"")),
            "{name}"
        );
        assert!(
            page.body.contains(&format!(
                "/ui/jobs/{}",
                job_id.to_string().replace(':', "%3A")
            )),
            "{job_id}"
        );
    }
    assert_eq!(page.body.matches("class=\"edge edge-cancel\"").count(), 3);
    let list = send(&server, "GET", "/ui/flows", &[("cookie", &cookie)], "").await;
    assert!(
        list.body.contains(&format!("href=\"/ui/flows/{id}\"")),
        "{}",
        list.body
    );
    let end = &submitted.jobs[2].1;
    let job_page = send(
        &server,
        "GET",
        &format!("/ui/jobs/{end}"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert!(job_page.body.contains(&format!("href=\"/ui/flows/{id}\"")));

    let browser = Browser::start().await;
    let base = format!("http://{}", server.address);
    browser.goto(&format!("{base}/ui/login")).await;
    browser.type_into("#token", TOKEN).await;
    browser.click("form.login button").await;
    browser
        .until(
            Duration::from_secs(10),
            "signed in",
            "return location.pathname === '/ui'",
        )
        .await;
    browser.goto(&format!("{base}/ui/flows/{id}")).await;
    browser
        .run("window.sameLoad = 7; return 1", serde_json::json!([]))
        .await;
    assert_eq!(
        browser
            .run("return document.querySelector('a.node[data-job=\"end\"]').classList.contains('state-waiting')", serde_json::json!([]))
            .await,
        true
    );
    browser
        .until(
            WAIT,
            "the last job's box to turn succeeded without a reload",
            "const n = document.querySelector('a.node[data-job=\"end\"]'); return n && n.classList.contains('state-succeeded')",
        )
        .await;
    assert_eq!(
        browser
            .run("return window.sameLoad", serde_json::json!([]))
            .await,
        7
    );
    browser.click("a.node[data-job=\"next\"]").await;
    browser
        .until(
            Duration::from_secs(10),
            "the job's page from its box",
            &format!(
                "return location.pathname === '/ui/jobs/{}'",
                submitted.jobs[1].1.to_string().replace(':', "%3A")
            ),
        )
        .await;

    // Cancel and retry from the page act on the whole flow.
    let mut later = job("later", "reverse", "x");
    later.options.delay = Duration::from_secs(3600);
    let second = client
        .submit_flow(&Flow {
            name: "to-cancel".into(),
            jobs: vec![later, job("after", "join", "").after(["later"])],
        })
        .await
        .unwrap();
    let page = send(
        &server,
        "GET",
        &format!("/ui/flows/{}", second.id),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    let form = format!("csrf={}", csrf_of(&page.body));
    let cancelled = send(
        &server,
        "POST",
        &format!("/ui/flows/{}/cancel", second.id),
        &[FORM, ("cookie", &cookie)],
        &form,
    )
    .await;
    assert_eq!(cancelled.status, 303, "{}", cancelled.body);
    assert_eq!(
        client.flow(second.id).await.unwrap().counts(),
        [("cancelled", 2)]
    );
    let retried = send(
        &server,
        "POST",
        &format!("/ui/flows/{}/retry", second.id),
        &[FORM, ("cookie", &cookie)],
        &form,
    )
    .await;
    assert_eq!(retried.status, 303, "{}", retried.body);
    assert_eq!(
        client.flow(second.id).await.unwrap().counts(),
        [("waiting", 1), ("scheduled", 1)]
    );
}

/// `enqueue`'s `dependent` (a flow's job naming its dependent, written first) is refused
/// without a reserved `number`, or naming a job of the same function or no job id, with
/// nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_named_on_enqueue_is_checked_before_anything_is_written() {
    let redis = TestRedis::start();
    // (A client loads the library.)
    let _client = redis.client().await;
    let f = function("child");
    let keys = wasmgear_client::queue_keys("enqueue", &f).unwrap();
    let mut conn = redis.raw().await;
    for (options, why) in [
        (vec!["dependent", "parent:1"], "dependent goes with number"),
        (
            vec!["number", "1", "dependent", "child:2"],
            "another function",
        ),
        (
            vec!["number", "1", "dependent", "nobody"],
            "another function",
        ),
    ] {
        let refused: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
            .arg("wg2_enqueue")
            .arg(keys.len())
            .arg(&keys[..])
            .arg(f.as_str())
            .arg(0)
            .arg(1)
            .arg(options.len() / 2)
            .arg(&options[..])
            .arg("input")
            .query_async(&mut conn)
            .await;
        let error = refused.unwrap_err();
        assert_eq!(error.code(), Some("BADJOB"), "{error}");
        assert!(error.to_string().contains(why), "{error}");
    }
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(keys, 0, "something was written");
}

/// A job of a flow may wait on a job outside it, named by id: one that was never made (a
/// number no function reaches) cancels it, and the submit itself goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_job_waiting_on_a_job_never_made_is_cancelled() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let never: wasmgear_proto::JobId = "elsewhere:1807131750823633341".parse().unwrap();
    let mut waiting = job("waiting", "echo", "x");
    waiting.options = EnqueueOptions {
        after: vec![never.clone()],
        ..EnqueueOptions::default()
    };
    let flow = Flow {
        name: "outside".into(),
        jobs: vec![waiting, job("free", "other", "y")],
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    let status = client.flow(submitted.id).await.unwrap();
    let record = client.status(&status.jobs[0].id).await.unwrap().record;
    assert_eq!(record.state, JobState::Cancelled, "{record:?}");
    let error = record.error.expect("the cancel says why");
    assert!(error.message.contains(&never.to_string()), "{error:?}");
}

/// A job waits on a job of its own function written in the same call (nothing runs yet: no
/// worker), and is its dependency's dependent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waits_on_one_of_its_function_written_in_the_same_call() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let flow = Flow {
        name: "chain".into(),
        jobs: vec![
            job("first", "reverse", "a"),
            job("second", "reverse", "b").after(["first"]),
        ],
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    let (first, second) = (&submitted.jobs[0].1, &submitted.jobs[1].1);
    let second_record = client.status(second).await.unwrap().record;
    assert_eq!(second_record.state, JobState::Waiting, "{second_record:?}");
    let first_record = client.status(first).await.unwrap().record;
    assert_eq!(first_record.state, JobState::Queued);
    assert_eq!(first_record.dependents, [second.to_string()]);
}

/// A dependency's output outlives its retention while its dependent has not ended: the
/// dependent runs long after it (no worker served its function until then) and still
/// reads it; once the dependent has succeeded, the dependency goes as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_is_kept_for_its_dependent_past_its_retention() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let short = EnqueueOptions {
        retention: Duration::from_secs(1),
        ..EnqueueOptions::default()
    };
    let mut first = job("first", "reverse", "abc");
    first.options = short.clone();
    let flow = Flow {
        name: "late".into(),
        jobs: vec![first, job("joined", "join", "").after(["first"])],
    };
    let submitted = client.submit_flow(&flow).await.unwrap();
    let (first, joined) = (&submitted.jobs[0].1, &submitted.jobs[1].1);
    let (reverse_worker, _reverse) = worker(&redis, &["reverse"]);
    client.wait(first, Some(WAIT), |_| {}).await.unwrap();
    // A job of the same retention finished after `first` is forgotten: `first`'s retention
    // is over too.
    let later = client
        .enqueue(&function("reverse"), b"x", &short)
        .await
        .unwrap();
    client.wait(&later, Some(WAIT), |_| {}).await.unwrap();
    eventually(Duration::from_secs(20), "the retention to pass", || async {
        // Enqueueing runs the housekeeping.
        client
            .enqueue(&function("reverse"), b"tick", &short)
            .await
            .unwrap();
        client.status(&later).await.is_err().then_some(())
    })
    .await;
    assert!(client.status(first).await.is_ok(), "{first} must be kept");
    drop(reverse_worker);

    let (_join_worker, _join) = worker(&redis, &["join"]);
    let status = client.wait(joined, Some(WAIT), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&b"cba"[..]));
    eventually(
        Duration::from_secs(20),
        "the released dependency to go",
        || async {
            client
                .enqueue(&function("reverse"), b"tick", &short)
                .await
                .unwrap();
            client.status(first).await.is_err().then_some(())
        },
    )
    .await;
}
