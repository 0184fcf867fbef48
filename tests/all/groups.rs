//! Groups inside a function, through the library: ready jobs leased round robin across
//! groups (priority, then FIFO, within each), each group's own concurrency, rate limit and
//! pause held across workers, a group of concurrency 1 a sequence, even through retries.

use std::time::Duration;

use wasmgear_client::{EnqueueOptions, GroupSetting, Priority, QueueError, Setting};
use wasmgear_proto::{ErrorClass, Lease};

use crate::support::hand::Hand;
use crate::support::library::Library;
use wasmgear_testkit::{TestRedis, eventually, function};

fn in_group(group: &str) -> EnqueueOptions {
    EnqueueOptions {
        group: Some(group.to_string()),
        ..EnqueueOptions::default()
    }
}

/// The inputs of `leases`, as text: the tests label each job by its input.
fn labels(leases: &[Lease]) -> Vec<String> {
    leases
        .iter()
        .map(|l| String::from_utf8_lossy(&l.input).into_owned())
        .collect()
}

/// Enqueues `n` jobs of `group` (`None`: without one) labelled `LABEL-I`.
async fn enqueue_labelled(
    client: &wasmgear_client::Client,
    f: &wasmgear_proto::FunctionName,
    group: Option<&str>,
    label: &str,
    n: usize,
) {
    let inputs: Vec<String> = (1..=n).map(|i| format!("{label}-{i}")).collect();
    let options = EnqueueOptions {
        group: group.map(str::to_string),
        ..EnqueueOptions::default()
    };
    let jobs: Vec<(&[u8], EnqueueOptions)> = inputs
        .iter()
        .map(|input| (input.as_bytes(), options.clone()))
        .collect();
    client.enqueue_many(f, &jobs).await.unwrap();
}

/// One group with many jobs does not hold back the others: each turn of the round leases
/// one job of each group (the jobs without a group take their turn as one group), and a
/// group's own jobs go by priority, then in the order they came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_jobs_are_leased_round_robin_across_groups() {
    let redis = TestRedis::start();
    check_round_robin(&redis.url()).await;
}

/// [`ready_jobs_are_leased_round_robin_across_groups`] on the Redis at `url` (a server or a
/// cluster).
pub(crate) async fn check_round_robin(url: &str) {
    let client = wasmgear_client::Client::connect(url).await.unwrap();
    let hand = Hand::connect(url, "hand").await;
    let f = function("fair");
    enqueue_labelled(&client, &f, Some("big"), "big", 20).await;
    enqueue_labelled(&client, &f, Some("a"), "a", 2).await;
    enqueue_labelled(&client, &f, Some("b"), "b", 2).await;
    enqueue_labelled(&client, &f, None, "none", 2).await;
    // Within group b, a later job of higher priority goes first.
    let urgent = EnqueueOptions {
        priority: Priority::HIGH,
        ..in_group("b")
    };
    client.enqueue(&f, b"b-urgent", &urgent).await.unwrap();
    assert_eq!(client.queue(&f).await.unwrap().queued, 27);

    let first = labels(&hand.take(&f, 8).await);
    assert_eq!(
        first,
        [
            "big-1", "a-1", "b-urgent", "none-1", "big-2", "a-2", "b-1", "none-2"
        ],
        "one job per group per turn"
    );
    // Only big and b are left to take turns; then big alone.
    let next = labels(&hand.take(&f, 4).await);
    assert_eq!(next, ["big-3", "b-2", "big-4", "big-5"]);
    assert_eq!(hand.take(&f, 100).await.len(), 15);
    assert!(hand.take(&f, 1).await.is_empty());
    let overview = client.groups(&f, 10, None).await.unwrap();
    assert_eq!(overview.ungrouped_ready, 0);
    let running: Vec<(String, u64, u64)> = overview
        .listed
        .iter()
        .map(|g| (g.group.clone(), g.ready, g.running))
        .collect();
    assert_eq!(
        running,
        [
            ("big".to_string(), 0, 20),
            ("b".to_string(), 0, 3),
            ("a".to_string(), 0, 2)
        ]
    );
}

/// A group's concurrency holds over all workers together: the function's default for every
/// group, a group's own over it; a job's end frees its slot for the group's next job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_concurrency_holds_across_workers() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let one = Hand::connect(&redis.url(), "one").await;
    let two = Hand::connect(&redis.url(), "two").await;
    let f = function("capped-groups");
    client
        .configure(&f, &[Setting::GroupConcurrency(Some(2))])
        .await
        .unwrap();
    let own = client
        .configure_group(&f, "wide", &[GroupSetting::Concurrency(Some(3))])
        .await
        .unwrap();
    assert_eq!(own.concurrency, Some(3));
    enqueue_labelled(&client, &f, Some("narrow"), "narrow", 5).await;
    enqueue_labelled(&client, &f, Some("wide"), "wide", 5).await;

    let mut held = one.take(&f, 1).await;
    held.extend(two.take(&f, 10).await);
    held.extend(one.take(&f, 10).await);
    let mut taken = labels(&held);
    taken.sort();
    assert_eq!(
        taken,
        ["narrow-1", "narrow-2", "wide-1", "wide-2", "wide-3"]
    );
    // A narrow job ends: the next narrow one may run, and only it.
    let narrow_1 = held.iter().find(|l| l.input == b"narrow-1").unwrap();
    one.succeed(narrow_1, b"").await;
    assert_eq!(labels(&two.take(&f, 10).await), ["narrow-3"]);
    assert!(one.take(&f, 10).await.is_empty());
    let groups = client.groups(&f, 10, None).await.unwrap();
    let narrow = groups.listed.iter().find(|g| g.group == "narrow").unwrap();
    assert_eq!((narrow.ready, narrow.running), (2, 2));

    // Its own concurrency cleared, wide falls back to the default of 2: with 3 running,
    // it waits for two of them to end.
    client
        .configure_group(&f, "wide", &[GroupSetting::Concurrency(None)])
        .await
        .unwrap();
    let wide: Vec<&Lease> = held
        .iter()
        .filter(|l| l.input.starts_with(b"wide"))
        .collect();
    one.succeed(wide[0], b"").await;
    assert!(one.take(&f, 10).await.is_empty());
    one.succeed(wide[1], b"").await;
    assert_eq!(labels(&one.take(&f, 10).await), ["wide-4"]);
}

/// A concurrency set while a group's jobs run counts them: with three running and a new
/// limit of two, the group's next job waits until two of them have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_set_while_jobs_run_counts_them() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("late-cap");
    enqueue_labelled(&client, &f, Some("late"), "late", 6).await;
    let running = hand.take(&f, 3).await;
    assert_eq!(running.len(), 3);
    client
        .configure_group(&f, "late", &[GroupSetting::Concurrency(Some(2))])
        .await
        .unwrap();
    assert!(hand.take(&f, 10).await.is_empty());
    hand.succeed(&running[0], b"").await;
    assert!(hand.take(&f, 10).await.is_empty());
    hand.succeed(&running[1], b"").await;
    assert_eq!(labels(&hand.take(&f, 10).await), ["late-4"]);
    // The function's default set while they run counts them too.
    let g = function("late-default");
    enqueue_labelled(&client, &g, Some("x"), "x", 4).await;
    let running = hand.take(&g, 2).await;
    client
        .configure(&g, &[Setting::GroupConcurrency(Some(2))])
        .await
        .unwrap();
    assert!(hand.take(&g, 10).await.is_empty());
    hand.succeed(&running[0], b"").await;
    assert_eq!(labels(&hand.take(&g, 10).await), ["x-3"]);
}

/// A paused group's jobs wait while the other groups' run; resumed, they run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_group_waits_while_the_others_run() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("paused-group");
    enqueue_labelled(&client, &f, Some("noisy"), "noisy", 3).await;
    enqueue_labelled(&client, &f, Some("quiet"), "quiet", 3).await;
    let own = client
        .configure_group(&f, "noisy", &[GroupSetting::Paused(true)])
        .await
        .unwrap();
    assert!(own.paused);
    assert_eq!(
        labels(&hand.take(&f, 10).await),
        ["quiet-1", "quiet-2", "quiet-3"]
    );
    let listed = client.groups(&f, 10, Some("noisy")).await.unwrap().listed;
    assert_eq!(listed.len(), 1);
    assert!(listed[0].config.paused);
    assert_eq!(listed[0].ready, 3);
    client
        .configure_group(&f, "noisy", &[GroupSetting::Paused(false)])
        .await
        .unwrap();
    assert_eq!(
        labels(&hand.take(&f, 10).await),
        ["noisy-1", "noisy-2", "noisy-3"]
    );
}

/// A group's rate limit holds over all workers: at most that many leases of the group per
/// window, while the other groups go on; the next window lets it lease again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_rate_limit_holds_the_group_only() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let one = Hand::connect(&redis.url(), "one").await;
    let two = Hand::connect(&redis.url(), "two").await;
    let f = function("rated-groups");
    client
        .configure(
            &f,
            &[Setting::GroupRateLimit(Some((2, Duration::from_secs(2))))],
        )
        .await
        .unwrap();
    enqueue_labelled(&client, &f, Some("t1"), "t1", 5).await;
    enqueue_labelled(&client, &f, Some("t2"), "t2", 1).await;
    let mut first = labels(&one.take(&f, 1).await);
    first.extend(labels(&two.take(&f, 10).await));
    first.sort();
    assert_eq!(first, ["t1-1", "t1-2", "t2-1"]);
    assert!(one.take(&f, 10).await.is_empty());
    let t1 = client.groups(&f, 10, Some("t1")).await.unwrap().listed;
    assert!(t1[0].rate_limited_until_ms.is_some(), "{t1:?}");
    enqueue_labelled(&client, &f, Some("t3"), "t3", 1).await;
    assert_eq!(labels(&two.take(&f, 10).await), ["t3-1"]);
    // The next window: two more of t1. The window slides: each of the two leases before
    // frees its place 2 s after it was made, and they were made by two calls, so the two
    // places may free a moment apart (on a loaded machine, between two polls).
    let next = std::sync::Mutex::new(Vec::new());
    eventually(Duration::from_secs(10), "t1's next window", || async {
        let taken = labels(&one.take(&f, 10).await);
        let mut next = next.lock().unwrap();
        next.extend(taken);
        (next.len() >= 2).then_some(())
    })
    .await;
    assert_eq!(next.into_inner().unwrap(), ["t1-3", "t1-4"]);
    // Two per window: t1-5 waits for t1-3's place to free.
    assert!(one.take(&f, 10).await.is_empty());
}

/// A group of concurrency 1 is a sequence: its jobs run one at a time in the order they
/// came, and a job waiting out a retry's backoff keeps its place (the next one does not
/// overtake it); the other groups are not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_runs_one_job_at_a_time_in_order_through_retries() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    let f = function("sequence");
    client
        .configure(&f, &[Setting::GroupConcurrency(Some(1))])
        .await
        .unwrap();
    let retried = EnqueueOptions {
        max_attempts: Some(3),
        ..in_group("order-7")
    };
    for step in ["create", "pay", "ship"] {
        client.enqueue(&f, step.as_bytes(), &retried).await.unwrap();
    }
    enqueue_labelled(&client, &f, Some("order-8"), "other", 2).await;
    let first = hand.take(&f, 10).await;
    assert_eq!(labels(&first), ["create", "other-1"]);
    hand.succeed(&first[0], b"").await;
    let pay = hand.take(&f, 10).await;
    assert_eq!(labels(&pay), ["pay"]);
    // pay fails and will be retried after a backoff: ship waits for it.
    let backing_off = Hand {
        queue: hand
            .queue
            .with_backoff(Duration::from_secs(3), Duration::from_secs(3)),
    };
    backing_off.fail(&pay[0], ErrorClass::Trap, true).await;
    let hand = Hand::connect(&redis.url(), "hand").await;
    assert!(
        labels(&hand.take(&f, 10).await).is_empty(),
        "ship overtook pay, which waits out its backoff"
    );
    let again = eventually(Duration::from_secs(10), "pay's retry", || async {
        let taken = hand.take(&f, 10).await;
        (!taken.is_empty()).then_some(taken)
    })
    .await;
    assert_eq!(labels(&again), ["pay"], "ship overtook pay's retry");
    hand.succeed(&again[0], b"").await;
    assert_eq!(labels(&hand.take(&f, 10).await), ["ship"]);
}

/// A group key that is not one (empty, too long, with a space or a '|') is refused before
/// anything is written, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_group_key_is_refused_and_nothing_is_written() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let f = function("bad-groups");
    let long = "g".repeat(201);
    for bad in ["", "two words", "a|b", "quote\"d", long.as_str()] {
        let error = client
            .enqueue_many(
                &f,
                &[
                    (&b"fine"[..], in_group("fine")),
                    (&b"bad"[..], in_group(bad)),
                ],
            )
            .await
            .unwrap_err();
        assert!(
            matches!(error, QueueError::BadOption(_)),
            "{bad:?}: {error}"
        );
        assert!(error.to_string().contains("group"), "{error}");
    }
    // The queue refuses them too, for a client that does not check first.
    let library = Library::new(redis.raw().await, &f);
    for bad in [
        "",
        "two words",
        "a|b",
        "quote\"d",
        "back\\slash",
        long.as_str(),
    ] {
        let enqueue = library
            .call::<redis::Value>(
                "enqueue",
                &["0", "2", "1", "group", "fine", "x", "1", "group", bad, "y"],
            )
            .await
            .unwrap_err();
        assert_eq!(enqueue.code(), Some("BADJOB"), "{bad:?}: {enqueue}");
        assert!(enqueue.to_string().contains("job 2: group"), "{enqueue}");
        let configure = library
            .call::<redis::Value>("configure_group", &[bad, "paused", "1"])
            .await
            .unwrap_err();
        assert_eq!(configure.code(), Some("BADARGS"), "{bad:?}: {configure}");
    }
    assert_eq!(client.queue(&f).await.unwrap().queued, 0);
    let written: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    assert!(written.is_empty(), "{written:?}");
    // Keys of every printable kind but those work.
    let id = client
        .enqueue(&f, b"", &in_group("org:42/user@example.com#x"))
        .await
        .unwrap();
    let hand = Hand::connect(&redis.url(), "hand").await;
    assert_eq!(hand.next(&f).await.info.id, id);
}

/// Over HTTP: jobs enqueued with a group (one by one, in bulk, in a flow), the groups listed
/// deepest first, a group's own limits set and cleared and a bad group or setting refused
/// (changing nothing); the dashboard's groups page lists them and pauses and resumes one;
/// the metrics count the groups and name the deepest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_over_http_on_the_dashboard_and_in_the_metrics() {
    use crate::dashboard::{FORM, csrf_of, send, sign_in};
    use crate::http_api::{Server, TOKEN, get, post, request};
    use serde_json::json;

    let redis = TestRedis::start();
    let server = Server::with_token(&redis);
    let client = redis.client().await;
    let enqueued = post(
        &server,
        "/v1/functions/tenants/jobs",
        json!({ "input": "one", "group": "acme" }),
    )
    .await;
    assert_eq!(enqueued.status, 201, "{}", enqueued.json());
    let bulk = post(
        &server,
        "/v1/functions/tenants/bulk",
        json!({ "jobs": [{ "input": "2", "group": "acme" }, { "input": "3", "group": "acme" },
                          { "input": "4", "group": "globex" }, { "input": "5" }] }),
    )
    .await;
    assert_eq!(bulk.status, 201, "{}", bulk.json());
    let flow = post(
        &server,
        "/v1/flows",
        json!({ "name": "grouped", "jobs": { "a": { "function": "tenants", "input": "6", "group": "initech" } } }),
    )
    .await;
    assert_eq!(flow.status, 201, "{}", flow.json());

    let listed = get(&server, "/v1/functions/tenants/groups").await;
    assert_eq!(listed.status, 200);
    let listed = listed.json();
    assert_eq!(listed["groups"], 3, "{listed}");
    assert_eq!(listed["ungrouped_ready"], 1, "{listed}");
    let depths: Vec<(String, u64)> = listed["listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["group"].as_str().unwrap().to_string(),
                g["ready"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        depths,
        [
            ("acme".into(), 3),
            ("globex".into(), 1),
            ("initech".into(), 1)
        ]
    );

    let set = request(
        &server,
        "PUT",
        "/v1/functions/tenants/groups/acme",
        Some(TOKEN),
        Some(json!({ "concurrency": 1, "rate_limit": { "limit": 10, "interval_ms": 60000 } })),
    )
    .await;
    assert_eq!(set.status, 200, "{}", set.json());
    assert_eq!(set.json()["concurrency"], 1);
    assert_eq!(set.json()["rate_limit"], "10/60000ms");
    let own = client
        .groups(&function("tenants"), 1, Some("acme"))
        .await
        .unwrap()
        .listed;
    assert_eq!(own[0].config.concurrency, Some(1));
    for (path, body) in [
        (
            "/v1/functions/tenants/groups/two%20words",
            json!({ "paused": true }),
        ),
        (
            "/v1/functions/tenants/groups/acme",
            json!({ "concurrency": "many" }),
        ),
        (
            "/v1/functions/tenants/groups/acme",
            json!({ "rate_limit": 5 }),
        ),
        (
            "/v1/functions/tenants/groups/acme",
            json!({ "colour": "red" }),
        ),
    ] {
        let refused = request(&server, "PUT", path, Some(TOKEN), Some(body.clone())).await;
        assert_eq!(refused.status, 400, "{path} {body}: {}", refused.json());
    }
    let unknown = request(
        &server,
        "PUT",
        "/v1/functions/nobody/groups/acme",
        Some(TOKEN),
        Some(json!({ "paused": true })),
    )
    .await;
    assert_eq!(unknown.status, 404);
    let still = client
        .groups(&function("tenants"), 1, Some("acme"))
        .await
        .unwrap()
        .listed;
    assert_eq!(
        still[0].config.concurrency,
        Some(1),
        "a refused call changed it"
    );
    let cleared = request(
        &server,
        "PUT",
        "/v1/functions/tenants/groups/acme",
        Some(TOKEN),
        Some(json!({ "concurrency": null, "rate_limit": null })),
    )
    .await;
    assert_eq!(cleared.json()["concurrency"], serde_json::Value::Null);
    assert_eq!(cleared.json()["rate_limit"], serde_json::Value::Null);

    // The dashboard: the groups page, a pause and a resume.
    let cookie = sign_in(&server).await;
    let signed_in = [("cookie", cookie.as_str())];
    let job_page = send(&server, "GET", "/ui/jobs/tenants:1", &signed_in, "").await;
    assert!(
        job_page
            .body
            .contains("<a href=\"/ui/functions/tenants/groups\">acme</a>"),
        "{}",
        job_page.body
    );
    let page = send(
        &server,
        "GET",
        "/ui/functions/tenants/groups",
        &signed_in,
        "",
    )
    .await;
    assert_eq!(page.status, 200);
    for text in ["acme", "globex", "initech", "1 ready jobs without a group"] {
        assert!(page.body.contains(text), "{text}: {}", page.body);
    }
    let csrf = csrf_of(&page.body);
    let paused = send(
        &server,
        "POST",
        "/ui/functions/tenants/groups/globex/pause",
        &[signed_in[0], FORM],
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(paused.status, 303, "{}", paused.body);
    let globex = client
        .groups(&function("tenants"), 1, Some("globex"))
        .await
        .unwrap()
        .listed;
    assert!(globex[0].config.paused);
    let page = send(
        &server,
        "GET",
        "/ui/functions/tenants/groups",
        &signed_in,
        "",
    )
    .await;
    assert!(page.body.contains("paused"), "{}", page.body);
    assert!(page.body.contains("/groups/globex/resume"), "{}", page.body);
    let forged = send(
        &server,
        "POST",
        "/ui/functions/tenants/groups/globex/resume",
        &[signed_in[0], FORM],
        "csrf=not-it",
    )
    .await;
    assert_eq!(forged.status, 403);
    send(
        &server,
        "POST",
        "/ui/functions/tenants/groups/globex/resume",
        &[signed_in[0], FORM],
        &format!("csrf={csrf}"),
    )
    .await;
    let globex = client
        .groups(&function("tenants"), 1, Some("globex"))
        .await
        .unwrap()
        .listed;
    assert!(!globex[0].config.paused);

    // The metrics: how many groups, and the deepest by name.
    let metrics = get(&server, "/metrics").await;
    let text = String::from_utf8(metrics.body).unwrap();
    assert!(
        text.contains("wasmgear_queue_groups{function=\"tenants\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("wasmgear_group_jobs{function=\"tenants\",group=\"acme\",state=\"ready\"} 3"),
        "{text}"
    );
}

/// The CLI: jobs enqueued with --group (one, in bulk, by a schedule's definition), every
/// group's default and one group's own settings, a group paused and resumed, the groups
/// listed (text and JSON), and a bad group key refused (exit 2, nothing written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_from_the_cli() {
    use wasmgear_testkit::{stderr, stdout, wasmgear, wasmgear_with_stdin};
    let redis = TestRedis::start();
    let url = redis.url();
    let env = [("WASMGEAR_REDIS_URL", url.as_str())];
    let run = |args: &[&str]| {
        let out = wasmgear(args, &env);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let id = run(&["enqueue", "resize", "--group", "acme", "a.jpg"]);
    let shown = run(&["status", id.trim()]);
    assert!(shown.contains("group     acme\n"), "{shown}");
    let bulk = wasmgear_with_stdin(
        &["bulk"],
        &env,
        b"{\"function\": \"resize\", \"input\": \"b.jpg\", \"group\": \"acme\"}\n{\"function\": \"resize\", \"input\": \"c.jpg\", \"group\": \"globex\"}\n",
    );
    assert!(bulk.status.success(), "{}", stderr(&bulk));
    run(&[
        "schedule",
        "add",
        "nightly",
        "--function",
        "resize",
        "--every",
        "1h",
        "--group",
        "initech",
    ]);
    let shown = run(&[
        "config",
        "resize",
        "--group-concurrency",
        "2",
        "--group-rate",
        "100/1m",
    ]);
    assert!(shown.contains("2 jobs of each group at once"), "{shown}");
    assert!(
        shown.contains("group rate   100 per 60s per group"),
        "{shown}"
    );
    let own = run(&["config", "resize", "--group", "acme", "--concurrency", "1"]);
    assert!(own.contains("concurrency  1\n"), "{own}");
    run(&["pause", "resize", "--group", "globex"]);
    let listed = run(&["groups", "resize"]);
    assert!(
        listed.starts_with("resize: 2 groups, 0 ready jobs without a group"),
        "{listed}"
    );
    let acme = listed.lines().find(|l| l.starts_with("acme")).unwrap();
    assert_eq!(
        acme.split_whitespace().collect::<Vec<_>>(),
        ["acme", "2", "0", "1", "100/60s*"]
    );
    let globex = listed.lines().find(|l| l.starts_with("globex")).unwrap();
    assert!(globex.ends_with("paused"), "{listed}");
    let json: serde_json::Value =
        serde_json::from_str(&run(&["groups", "resize", "--json"])).unwrap();
    assert_eq!(json["groups"], 2);
    assert_eq!(json["listed"][0]["group"], "acme");
    assert_eq!(json["listed"][0]["config"]["concurrency"], 1);
    run(&["resume", "resize", "--group", "globex"]);
    let client = redis.client().await;
    let globex = client
        .groups(&function("resize"), 1, Some("globex"))
        .await
        .unwrap();
    assert!(!globex.listed[0].config.paused);
    let schedule = client.schedules().await.unwrap();
    assert_eq!(schedule[0].def.group.as_deref(), Some("initech"));
    // A bad key: refused before anything is written.
    let bad = wasmgear(&["enqueue", "resize", "--group", "two words", "x"], &env);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("group \"two words\""),
        "{}",
        stderr(&bad)
    );
    assert_eq!(client.queue(&function("resize")).await.unwrap().queued, 3);
}
