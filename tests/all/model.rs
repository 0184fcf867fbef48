//! A randomized model test of the queue's library (issue 36): random sequences of operations
//! from several simulated workers and clients, called with `FCALL` on a real redis-server whose
//! clock the test moves forward and back, each followed by a check of the queue against what
//! must hold whatever happened:
//!
//! - every job is in exactly the set its record's state says (and every set member has a
//!   record in that state); `counts` agrees with the records; uniq keys, tags, failure groups,
//!   `once` keys, inputs, outputs and logs belong to jobs that exist;
//! - no worker has more jobs running than it has slots (hand-offs included);
//! - a succeeded job's output is the first accepted one: a completion is accepted once;
//! - every key is bounded (replies kept for calls sent again, registrations, histories, logs,
//!   statistics' days);
//! - a refused call changes nothing, and a call sent again (its reply lost) is answered as the
//!   first and changes nothing.
//!
//! Proptest draws the sequences (seeded) and shrinks a failing one to a short one it prints;
//! such a sequence becomes a regular test. In CI the test runs a few thousand steps;
//! `scripts/model SECONDS` runs it for as long as asked, with fresh seeds, and prints the
//! steps run.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use crate::support::library::Library;
use wasmgear_testkit::clock::ClockedRedis;
use wasmgear_testkit::function;

/// The simulated workers: their ids and slots.
const WORKERS: &[(&str, usize)] = &[("w0", 2), ("w1", 3), ("w2", 1)];
/// Lease times: a short one the clock steps run out, a long one they do not.
const LEASES_MS: &[u64] = &[2_000, 600_000];
/// How the clock moves, ms: forward a little, past leases and delays, past retentions, and
/// back.
const CLOCK_STEPS_MS: &[i64] = &[
    5,
    1_500,
    30_000,
    700_000,
    3 * 3_600_000,
    26 * 3_600_000,
    -1_000,
    -45_000,
];
/// The most replies kept for calls sent again that a case can leave (each call keeps one).
const MAX_CALLS_KEPT: usize = 600;

/// One job of an `enqueue` call, as drawn.
#[derive(Debug, Clone)]
struct JobSpec {
    priority: i16,
    delay_ms: u64,
    uniq: Option<u8>,
    tag: Option<u8>,
    /// A dependency: the n-th known job (mod how many there are).
    after: Option<usize>,
    attempts: u8,
    /// A child's `once` key (parent job n-th known, key k).
    once: Option<(usize, u8)>,
    short_retention: bool,
    /// A schedule's tick (schedule s, tick t seconds from now).
    tick: Option<(u8, u8)>,
}

/// One operation.
#[derive(Debug, Clone)]
enum Op {
    Enqueue(Vec<JobSpec>),
    /// The last `enqueue` sent again with the same call id.
    EnqueueAgain,
    Lease {
        worker: usize,
        long: bool,
        register: bool,
    },
    /// The last `lease` that leased sent again with the same call id.
    LeaseAgain,
    Heartbeat {
        worker: usize,
        pick: usize,
    },
    Progress {
        worker: usize,
        pick: usize,
    },
    Complete {
        worker: usize,
        picks: Vec<usize>,
        next: usize,
    },
    /// The last `complete` sent again, under the same call id or another.
    CompleteAgain {
        same_id: bool,
    },
    Fail {
        worker: usize,
        pick: usize,
        retryable: bool,
    },
    Release {
        worker: usize,
        pick: usize,
    },
    Withdraw {
        worker: usize,
    },
    Cancel {
        pick: usize,
    },
    Retry {
        pick: usize,
    },
    Priority {
        pick: usize,
        priority: i16,
    },
    Tag {
        pick: usize,
        add: bool,
        tag: u8,
    },
    Configure(u8),
    Clock(usize),
    Refused(usize),
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        (
            -3i16..=3,
            prop_oneof![4 => Just(0u64), 1 => Just(1_000), 1 => Just(60_000)],
        ),
        (
            proptest::option::weighted(0.2, 0u8..3),
            proptest::option::weighted(0.3, 0u8..3),
        ),
        (proptest::option::weighted(0.2, any::<usize>()), 1u8..=3),
        (
            proptest::option::weighted(0.15, (any::<usize>(), 0u8..2)),
            proptest::bool::weighted(0.4),
            proptest::option::weighted(0.1, (0u8..2, 0u8..3)),
        ),
    )
        .prop_map(
            |(
                (priority, delay_ms),
                (uniq, tag),
                (after, attempts),
                (once, short_retention, tick),
            )| JobSpec {
                priority,
                delay_ms,
                uniq,
                tag,
                after,
                attempts,
                once,
                short_retention,
                tick,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let worker = 0..WORKERS.len();
    prop_oneof![
        6 => proptest::collection::vec(job_spec(), 1..4).prop_map(Op::Enqueue),
        1 => Just(Op::EnqueueAgain),
        6 => (worker.clone(), any::<bool>(), proptest::bool::weighted(0.6))
            .prop_map(|(worker, long, register)| Op::Lease { worker, long, register }),
        1 => Just(Op::LeaseAgain),
        2 => (worker.clone(), any::<usize>()).prop_map(|(worker, pick)| Op::Heartbeat { worker, pick }),
        1 => (worker.clone(), any::<usize>()).prop_map(|(worker, pick)| Op::Progress { worker, pick }),
        5 => (worker.clone(), proptest::collection::vec(any::<usize>(), 1..3), 0usize..3)
            .prop_map(|(worker, picks, next)| Op::Complete { worker, picks, next }),
        1 => any::<bool>().prop_map(|same_id| Op::CompleteAgain { same_id }),
        2 => (worker.clone(), any::<usize>(), any::<bool>())
            .prop_map(|(worker, pick, retryable)| Op::Fail { worker, pick, retryable }),
        1 => (worker.clone(), any::<usize>()).prop_map(|(worker, pick)| Op::Release { worker, pick }),
        1 => worker.clone().prop_map(|worker| Op::Withdraw { worker }),
        2 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Retry { pick }),
        1 => (any::<usize>(), -5i16..=5).prop_map(|(pick, priority)| Op::Priority { pick, priority }),
        1 => (any::<usize>(), any::<bool>(), 0u8..3).prop_map(|(pick, add, tag)| Op::Tag { pick, add, tag }),
        1 => (0u8..6).prop_map(Op::Configure),
        3 => (0..CLOCK_STEPS_MS.len()).prop_map(Op::Clock),
        1 => (0usize..REFUSED.len()).prop_map(Op::Refused),
    ]
}

/// Calls every function refuses (bad numbers, names, counts): the queue must be unchanged.
const REFUSED: &[(&str, &[&str])] = &[
    (
        "enqueue",
        &[
            "1", "call", "r1", "2", "1", "uniq", "x", "in", "1", "priority", "inf", "in",
        ],
    ),
    (
        "enqueue",
        &[
            "1", "call", "r2", "2", "1", "tag", "t", "in", "1", "delay", "1e999", "in",
        ],
    ),
    (
        "enqueue",
        &["1", "call", "r3", "1", "1", "attempts", "nan", "in"],
    ),
    ("lease", &["w0", "w0/bad", "99999", "1000", "1000", "3"]),
    ("lease", &["w0", "w0/bad", "1", "0x10", "1000", "3"]),
    ("complete", &["1", "lease", "-1", "0"]),
    ("fail", &["1", "t", "trap", "m", "1", "inf", "", ""]),
    ("heartbeat", &["1", "t", "nan"]),
    ("priority", &["1", "1e3"]),
    ("configure", &["concurrency", "0x1"]),
    ("retry", &["group", "g", "inf"]),
    ("adopt", &["1", "no-id"]),
];

/// A job's record, the fields the checks read (the hot fields of lib.lua's layout).
#[derive(Debug, Clone)]
struct Record {
    state: String,
    attempt: u64,
    worker: String,
    token: String,
    others: serde_json::Value,
}

fn parse_record(raw: &str) -> Record {
    let fields: Vec<&str> = raw.splitn(19, '|').collect();
    assert_eq!(
        fields.len(),
        19,
        "a record not in the hot-field layout: {raw}"
    );
    Record {
        state: fields[0].to_string(),
        attempt: fields[2].parse().unwrap_or(0),
        worker: fields[15].to_string(),
        token: fields[16].to_string(),
        others: if fields[18].is_empty() {
            serde_json::json!({})
        } else {
            serde_json::from_str(fields[18]).expect("the record's other fields are JSON")
        },
    }
}

/// What the test keeps between steps.
#[derive(Default)]
struct Model {
    /// Job numbers enqueued, in order.
    jobs: Vec<u64>,
    /// The first output accepted for each succeeded job.
    outputs: HashMap<u64, Vec<u8>>,
    /// The attempts whose lease a worker confirmed (a heartbeat or progress accepted).
    confirmed: BTreeSet<(u64, u64)>,
    /// Calls that may be sent again: the last `enqueue`, `lease` (that leased) and `complete`,
    /// with their replies.
    last_enqueue: Option<(Vec<String>, redis::Value, u64)>,
    last_lease: Option<(Vec<String>, u64)>,
    last_complete: Option<(Vec<String>, String, u64)>,
    calls: u64,
    steps: u64,
    /// The latest Redis time seen (the clock may have gone back since): a reply kept for a
    /// call sent again is forgotten once the clock has passed its 10 minutes, even if it
    /// came back.
    latest_ms: u64,
}

/// The whole state of one function's queue, read at once.
struct Snapshot {
    records: BTreeMap<u64, Record>,
    sets: HashMap<&'static str, BTreeSet<u64>>,
    counts: HashMap<String, i64>,
}

async fn hash(library: &Library, suffix: &str) -> HashMap<String, Vec<u8>> {
    redis::cmd("HGETALL")
        .arg(library.key(suffix))
        .query_async(&mut library.conn.clone())
        .await
        .unwrap()
}

async fn snapshot(library: &Library) -> Snapshot {
    let records = hash(library, "jobs")
        .await
        .into_iter()
        .map(|(n, raw)| {
            (
                n.parse().unwrap(),
                parse_record(&String::from_utf8(raw).unwrap()),
            )
        })
        .collect();
    let mut sets = HashMap::new();
    for set in ["ready", "scheduled", "leased", "waiting", "expires"] {
        let members: BTreeSet<u64> = library
            .members(set)
            .await
            .into_iter()
            .map(|m| m.parse().unwrap())
            .collect();
        sets.insert(set, members);
    }
    let counts = hash(library, "counts")
        .await
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v).unwrap().parse().unwrap()))
        .collect();
    Snapshot {
        records,
        sets,
        counts,
    }
}

/// The set a job in `state` belongs in.
fn set_of(state: &str) -> &'static str {
    match state {
        "queued" => "ready",
        "scheduled" => "scheduled",
        "running" => "leased",
        "waiting" => "waiting",
        _ => "expires",
    }
}

/// Checks every invariant; `Err` says which failed.
async fn check(library: &Library, model: &Model) -> Result<(), String> {
    let snap = snapshot(library).await;
    // Each job in exactly the set its state says, and each member with such a record.
    for (number, record) in &snap.records {
        for (set, members) in &snap.sets {
            let belongs = *set == set_of(&record.state);
            if members.contains(number) != belongs {
                return Err(format!(
                    "job {number} ({}) is {} {set}",
                    record.state,
                    if belongs { "not in" } else { "in" }
                ));
            }
        }
    }
    for (set, members) in &snap.sets {
        for number in members {
            if !snap.records.contains_key(number) {
                return Err(format!("{set} holds job {number}, which has no record"));
            }
        }
    }
    // `counts` agrees with the records.
    let mut counted: HashMap<String, i64> = HashMap::new();
    for record in snap.records.values() {
        if matches!(record.state.as_str(), "succeeded" | "failed" | "cancelled") {
            *counted.entry(record.state.clone()).or_default() += 1;
        }
        if record.state == "failed" {
            let group = record.others["group"]
                .as_str()
                .unwrap_or("unknown")
                .to_string();
            *counted.entry(format!("failed:{group}")).or_default() += 1;
        }
    }
    if counted != snap.counts {
        return Err(format!(
            "counts {:?}, the records say {counted:?}",
            snap.counts
        ));
    }
    // A job fails `lease-lost` only by a lease its worker confirmed: one that ran out
    // unconfirmed (the worker never had the job) never counts.
    for (number, record) in &snap.records {
        if record.state == "failed"
            && record.others["error"]["class"] == "lease-lost"
            && !model.confirmed.contains(&(*number, record.attempt))
        {
            return Err(format!(
                "job {number} failed lease-lost on attempt {}, never confirmed",
                record.attempt
            ));
        }
    }
    // No worker has more jobs running than slots.
    for (worker, slots) in WORKERS {
        let running = snap
            .records
            .values()
            .filter(|r| r.state == "running" && r.worker == *worker)
            .count();
        if running > *slots {
            return Err(format!("{worker} runs {running} jobs with {slots} slots"));
        }
    }
    // A succeeded job keeps the output first accepted.
    let outputs = hash(library, "output").await;
    for (number, first) in &model.outputs {
        if let Some(record) = snap.records.get(number)
            && record.state == "succeeded"
            && outputs.get(&number.to_string()) != Some(first)
        {
            return Err(format!(
                "job {number}'s output changed after it was accepted"
            ));
        }
    }
    // What belongs to jobs belongs to jobs that exist.
    for suffix in ["input", "output", "logs"] {
        for (number, value) in hash(library, suffix).await {
            let number: u64 = number.parse().unwrap();
            if !snap.records.contains_key(&number) {
                return Err(format!("{suffix} holds job {number}, which has no record"));
            }
            if suffix == "logs" && value.len() > 256 * 1024 {
                return Err(format!("job {number}'s log is {} bytes", value.len()));
            }
        }
    }
    for (key, number) in hash(library, "uniq").await {
        let number: u64 = String::from_utf8(number).unwrap().parse().unwrap();
        match snap.records.get(&number) {
            Some(r)
                if matches!(
                    r.state.as_str(),
                    "queued" | "scheduled" | "waiting" | "running"
                ) && r.others["cancel_requested_ms"].is_null() => {}
            other => return Err(format!("uniq key {key} is held by job {number}: {other:?}")),
        }
    }
    for member in library.members("tagged").await {
        let (tag, number) = member.split_once('\0').unwrap();
        let number: u64 = number.parse().unwrap();
        let tagged = snap.records.get(&number).is_some_and(|r| {
            r.others["tags"]
                .as_array()
                .is_some_and(|tags| tags.iter().any(|t| t == tag))
        });
        if !tagged {
            return Err(format!(
                "tag {tag} is indexed for job {number}, which has it not"
            ));
        }
    }
    for member in library.members("failed").await {
        let (group, number) = member.split_once('\0').unwrap();
        let number: u64 = number.parse().unwrap();
        let failed = snap
            .records
            .get(&number)
            .is_some_and(|r| r.state == "failed" && r.others["group"] == group);
        if !failed {
            return Err(format!(
                "failure group {group} lists job {number}, which is not failed in it"
            ));
        }
    }
    for (field, number) in hash(library, "ticks").await {
        if let Some(key) = field.strip_prefix("once\0") {
            let number: u64 = String::from_utf8(number).unwrap().parse().unwrap();
            let owns = snap
                .records
                .get(&number)
                .is_some_and(|r| r.others["once"] == key);
            if !owns {
                return Err(format!(
                    "once key {key} names job {number}, which is gone or not its"
                ));
            }
        }
    }
    // Bounded.
    let calls = hash(library, "calls").await.len();
    let kept: usize = redis::cmd("ZCARD")
        .arg(library.key("calls-exp"))
        .query_async(&mut library.conn.clone())
        .await
        .unwrap();
    if calls != kept || calls > MAX_CALLS_KEPT {
        return Err(format!("{calls} replies kept, {kept} expiries"));
    }
    let registered = hash(library, "idle-args").await.len();
    let idle = library.members("idle").await.len();
    if registered > WORKERS.len() || idle > WORKERS.len() {
        return Err(format!(
            "{registered} registrations for {} workers",
            WORKERS.len()
        ));
    }
    for (number, record) in &snap.records {
        let kept = record.others["history"].as_array().map_or(0, Vec::len);
        if kept > 100 {
            return Err(format!("job {number} keeps {kept} history entries"));
        }
    }
    let stats = hash(library, "stats").await;
    if let Some(days) = stats.get("days") {
        let days: Vec<u64> = serde_json::from_slice(days).unwrap();
        let distinct: BTreeSet<&u64> = days.iter().collect();
        if days.len() > 30 || distinct.len() != days.len() {
            return Err(format!("statistics keep the days {days:?}"));
        }
    }
    Ok(())
}

/// The jobs worker `w` runs: number and token.
fn running_of(snap: &Snapshot, worker: &str) -> Vec<(u64, String)> {
    snap.records
        .iter()
        .filter(|(_, r)| r.state == "running" && r.worker == worker)
        .map(|(n, r)| (*n, r.token.clone()))
        .collect()
}

/// `FCALL`s `name` with `args` (strings), the reply or error.
async fn call(library: &Library, name: &str, args: &[String]) -> redis::RedisResult<redis::Value> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    library.call(name, &args).await
}

fn s(x: impl ToString) -> String {
    x.to_string()
}

/// Applies `op`; `Err` when an invariant of the call itself failed.
async fn apply(
    redis: &mut ClockedRedis,
    library: &Library,
    model: &mut Model,
    op: &Op,
) -> Result<(), String> {
    model.calls += 1;
    let id = |prefix: &str| format!("{prefix}/{}", model.calls);
    match op {
        Op::Enqueue(jobs) => {
            let mut args = vec![s(1), s("call"), id("e"), s(jobs.len())];
            for job in jobs {
                let mut options: Vec<String> = Vec::new();
                let mut option = |name: &str, value: String| {
                    options.push(s(name));
                    options.push(value);
                };
                if job.priority != 0 {
                    option("priority", s(job.priority));
                }
                if job.delay_ms > 0 {
                    option("delay", s(job.delay_ms));
                }
                if let Some(u) = job.uniq {
                    option("uniq", format!("u{u}"));
                }
                if let Some(t) = job.tag {
                    option("tag", format!("t{t}"));
                }
                if let Some(n) = job.after
                    && !model.jobs.is_empty()
                {
                    option(
                        "after",
                        format!(
                            "{}:{}",
                            library.function.as_str(),
                            model.jobs[n % model.jobs.len()]
                        ),
                    );
                }
                option("attempts", s(job.attempts));
                if let Some((parent, key)) = job.once
                    && !model.jobs.is_empty()
                {
                    let parent = format!(
                        "{}:{}",
                        library.function.as_str(),
                        model.jobs[parent % model.jobs.len()]
                    );
                    option("parent", parent.clone());
                    option("once", format!("{parent}/k{key}"));
                }
                if job.short_retention {
                    option("retention", s(60_000));
                    option("failed_retention", s(60_000));
                }
                if let Some((schedule, tick)) = job.tick {
                    let now = now_ms(library).await;
                    option("schedule", format!("s{schedule}"));
                    option("tick", s(now / 1000 * 1000 + u64::from(tick) * 1000));
                }
                args.push(s(options.len() / 2));
                args.extend(options);
                args.push(format!("input {}", model.calls));
            }
            match call(library, "enqueue", &args).await {
                Ok(reply) => {
                    if let redis::Value::Array(parts) = &reply
                        && let Some(redis::Value::Array(numbers)) = parts.first()
                    {
                        for number in numbers {
                            let number: u64 = redis::from_redis_value(number.clone()).unwrap();
                            if !model.jobs.contains(&number) {
                                model.jobs.push(number);
                            }
                        }
                    }
                    model.last_enqueue = Some((args, reply, now_ms(library).await));
                }
                // A dependency that has failed or is gone, or a time the clock has passed, is
                // refused (the queue's state refuses it): nothing may change.
                Err(error) if error.code() == Some("CONFLICT") => {}
                Err(error) => return Err(format!("enqueue failed: {error}")),
            }
        }
        Op::EnqueueAgain => {
            if let Some((args, first, at)) = model.last_enqueue.clone()
                && remembered(library, model, at).await
            {
                let before = library.dump().await;
                let again = call(library, "enqueue", &args)
                    .await
                    .map_err(|e| e.to_string())?;
                if again != first {
                    return Err(format!(
                        "enqueue sent again answered {again:?}, first {first:?}"
                    ));
                }
                let after = library.dump().await;
                if after != before {
                    let changed: Vec<&String> = after
                        .iter()
                        .filter(|entry| !before.contains(entry))
                        .map(|(key, _)| key)
                        .collect();
                    return Err(format!("enqueue sent again changed the queue: {changed:?}"));
                }
            }
        }
        Op::Lease {
            worker,
            long,
            register,
        } => {
            let (name, slots) = WORKERS[*worker];
            let snap = snapshot(library).await;
            let running = running_of(&snap, name).len();
            let own = library.registration(name).await;
            let kept = own.as_ref().map_or(0, |r| r.1 as usize);
            let free = slots.saturating_sub(running + kept);
            let mut args = vec![
                s(name),
                id(name),
                s(free),
                s(LEASES_MS[usize::from(*long)]),
                s(60_000),
                s(3),
            ];
            if *register || own.is_some() {
                let channel = if *register {
                    format!("wg:handoff:{name}")
                } else {
                    String::new()
                };
                args.extend([
                    channel,
                    s(3_000),
                    s(free),
                    own.as_ref().map_or(String::new(), |r| r.0.clone()),
                    s(kept),
                ]);
            }
            let reply = call(library, "lease", &args)
                .await
                .map_err(|e| format!("lease: {e}"))?;
            let leased = matches!(&reply, redis::Value::Array(parts)
                if matches!(parts.first(), Some(redis::Value::Array(l)) if !l.is_empty()));
            if leased {
                model.last_lease = Some((args, now_ms(library).await));
            }
        }
        Op::LeaseAgain => {
            if let Some((args, at)) = model.last_lease.clone()
                && remembered(library, model, at).await
            {
                let before = library.dump().await;
                call(library, "lease", &args)
                    .await
                    .map_err(|e| e.to_string())?;
                let after = library.dump().await;
                if after != before {
                    return Err(format!(
                        "lease sent again changed the queue: {}",
                        changed(&before, &after)
                    ));
                }
            }
        }
        Op::Heartbeat { worker, pick } | Op::Progress { worker, pick } => {
            let snap = snapshot(library).await;
            let mine = running_of(&snap, WORKERS[*worker].0);
            if let Some((number, token)) = mine.get(pick % mine.len().max(1)) {
                let (name, args) = match op {
                    Op::Heartbeat { .. } => {
                        ("heartbeat", vec![s(number), token.clone(), s(LEASES_MS[0])])
                    }
                    _ => (
                        "progress",
                        vec![s(number), token.clone(), s(1), s(3), s("step")],
                    ),
                };
                let reply = call(library, name, &args)
                    .await
                    .map_err(|e| format!("{name}: {e}"))?;
                let held = match reply {
                    redis::Value::Array(parts) => parts.first() != Some(&redis::Value::Int(0)),
                    redis::Value::Int(stored) => stored == 1,
                    _ => false,
                };
                let attempt: u64 = token
                    .rsplit(':')
                    .next()
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0);
                if held {
                    model.confirmed.insert((*number, attempt));
                }
            }
        }
        Op::Complete {
            worker,
            picks,
            next,
        } => {
            let (name, slots) = WORKERS[*worker];
            let snap = snapshot(library).await;
            let mine = running_of(&snap, name);
            if mine.is_empty() {
                return Ok(());
            }
            let chosen: BTreeSet<usize> = picks.iter().map(|p| p % mine.len()).collect();
            let kept = library.registration(name).await.map_or(0, |r| r.1 as usize);
            // The slots the completions free, less what is kept for a hand-off.
            let free = (slots + chosen.len()).saturating_sub(mine.len() + kept);
            let want = (*next).min(free);
            let mut args = vec![s(if want > 0 { 6 } else { 1 }), s("call"), id(name)];
            if want > 0 {
                args.extend([
                    s("lease"),
                    s(want),
                    s("worker"),
                    s(name),
                    s("ttl"),
                    s(LEASES_MS[1]),
                    s("timeout"),
                    s(60_000),
                    s("attempts"),
                    s(3),
                ]);
            }
            args.push(s(chosen.len()));
            for i in &chosen {
                let (number, token) = &mine[*i];
                args.extend([
                    s(number),
                    token.clone(),
                    format!("out {number} {}", model.calls),
                    s("log"),
                    s("v1"),
                ]);
            }
            let reply = call(library, "complete", &args)
                .await
                .map_err(|e| format!("complete: {e}"))?;
            let letters: String = match &reply {
                redis::Value::Array(parts) => redis::from_redis_value(parts[0].clone()).unwrap(),
                other => return Err(format!("complete answered {other:?}")),
            };
            for (letter, i) in letters.chars().zip(&chosen) {
                let number = mine[*i].0;
                if letter == 's' && !model.outputs.contains_key(&number) {
                    model
                        .outputs
                        .insert(number, format!("out {number} {}", model.calls).into_bytes());
                }
            }
            model.last_complete = Some((args, letters, now_ms(library).await));
        }
        Op::CompleteAgain { same_id } => {
            if let Some((mut args, first, at)) = model.last_complete.clone()
                && remembered(library, model, at).await
            {
                if !*same_id {
                    // Another call id (the worker's own retry) and no leasing: the results
                    // must be the first's; a resend with the same id answers them as well.
                    let jobs: Vec<String> = args[args.len() - 5 * first.len()..].to_vec();
                    args = vec![s(1), s("call"), id("again")];
                    args.push(s(first.len()));
                    args.extend(jobs);
                }
                let before = library.dump().await;
                let reply = call(library, "complete", &args)
                    .await
                    .map_err(|e| format!("complete again: {e}"))?;
                let letters: String = match &reply {
                    redis::Value::Array(parts) => {
                        redis::from_redis_value(parts[0].clone()).unwrap()
                    }
                    other => return Err(format!("complete answered {other:?}")),
                };
                // A job accepted before is answered as before while it is still in the state
                // that answer gave it (it may have been forgotten since, or retried after it
                // was cancelled: then the old report is stale).
                let snap = snapshot(library).await;
                let reports: Vec<(u64, String)> = args[args.len() - 5 * first.len()..]
                    .chunks(5)
                    .map(|job| (job[0].parse().unwrap(), job[1].clone()))
                    .collect();
                for ((a, b), (number, token)) in first.chars().zip(letters.chars()).zip(reports) {
                    // (The job keeps the token of the report that ended it; once it is
                    // retried, leased again or ended otherwise, that report is stale.)
                    let state = snap
                        .records
                        .get(&number)
                        .filter(|r| r.token == token)
                        .map(|r| r.state.as_str());
                    let still = matches!(
                        (a, state),
                        ('s', Some("succeeded")) | ('c', Some("cancelled"))
                    );
                    if still && b != a {
                        return Err(format!(
                            "complete sent again answered {letters}, first {first}"
                        ));
                    }
                }
                if *same_id && library.dump().await != before {
                    return Err("complete sent again changed the queue".into());
                }
            }
        }
        Op::Fail {
            worker,
            pick,
            retryable,
        } => {
            let snap = snapshot(library).await;
            let mine = running_of(&snap, WORKERS[*worker].0);
            if let Some((number, token)) = mine.get(pick % mine.len().max(1)) {
                let args = [
                    s(number),
                    token.clone(),
                    s("trap"),
                    s("boom"),
                    s(u8::from(*retryable)),
                    s(500),
                    s("log"),
                    s("v1"),
                ];
                call(library, "fail", &args)
                    .await
                    .map_err(|e| format!("fail: {e}"))?;
            }
        }
        Op::Release { worker, pick } => {
            let snap = snapshot(library).await;
            let mine = running_of(&snap, WORKERS[*worker].0);
            if let Some((number, token)) = mine.get(pick % mine.len().max(1)) {
                call(library, "release", &[s(number), token.clone()])
                    .await
                    .map_err(|e| format!("release: {e}"))?;
            }
        }
        Op::Withdraw { worker } => {
            let name = WORKERS[*worker].0;
            if let Some((call_id, _)) = library.registration(name).await {
                call(library, "withdraw", &[s(name), call_id])
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        Op::Cancel { pick }
        | Op::Retry { pick }
        | Op::Priority { pick, .. }
        | Op::Tag { pick, .. } => {
            if model.jobs.is_empty() {
                return Ok(());
            }
            let number = s(model.jobs[pick % model.jobs.len()]);
            let (name, args) = match op {
                Op::Cancel { .. } => ("cancel", vec![number]),
                Op::Retry { .. } => ("retry", vec![s("job"), number]),
                Op::Priority { priority, .. } => ("priority", vec![number, s(priority)]),
                Op::Tag { add, tag, .. } => (
                    "tag",
                    vec![
                        number,
                        s(if *add { "add" } else { "remove" }),
                        format!("t{tag}"),
                    ],
                ),
                _ => unreachable!("matched above"),
            };
            match call(library, name, &args).await {
                Ok(_) => {}
                // A job gone, or one whose dependency is: refused, nothing changed.
                Err(error) if matches!(error.code(), Some("NOJOB" | "CONFLICT")) => {}
                Err(error) => return Err(format!("{name}: {error}")),
            }
        }
        Op::Configure(which) => {
            let args: Vec<String> = match which {
                0 => vec![s("paused"), s(1)],
                1 => vec![s("paused"), s("")],
                2 => vec![s("concurrency"), s(2)],
                3 => vec![s("concurrency"), s("")],
                4 => vec![s("keep_finished"), s(5)],
                _ => vec![s("keep_finished"), s("")],
            };
            call(library, "configure", &args)
                .await
                .map_err(|e| format!("configure: {e}"))?;
        }
        Op::Clock(step) => {
            let offset = redis.offset_ms() + CLOCK_STEPS_MS[*step];
            redis.set_offset(offset);
        }
        Op::Refused(which) => {
            let (name, args) = REFUSED[*which];
            let before = library.dump().await;
            if library.call::<redis::Value>(name, args).await.is_ok() {
                return Err(format!("{name} {args:?} was not refused"));
            }
            if library.dump().await != before {
                return Err(format!("{name} {args:?} was refused but changed the queue"));
            }
        }
    }
    Ok(())
}

/// Whether a call made at `at` (Redis' clock, ms) is still remembered for a resend: its
/// reply is kept 10 minutes, and forgotten by the first call after them (the clock may have
/// gone past them and come back since).
async fn remembered(library: &Library, model: &Model, at: u64) -> bool {
    model.latest_ms.max(now_ms(library).await) < at + 590_000
}

/// The keys that differ between two dumps.
fn changed(before: &[(String, Vec<u8>)], after: &[(String, Vec<u8>)]) -> String {
    let before: BTreeMap<&String, &Vec<u8>> = before.iter().map(|(k, v)| (k, v)).collect();
    let after: BTreeMap<&String, &Vec<u8>> = after.iter().map(|(k, v)| (k, v)).collect();
    let keys: BTreeSet<&&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Redis' clock, ms.
async fn now_ms(library: &Library) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut library.conn.clone())
        .await
        .unwrap();
    secs * 1000 + micros / 1000
}

/// Runs one sequence on an emptied queue; the number of steps done, or why it failed.
async fn run_case(
    redis: &mut ClockedRedis,
    library: &Library,
    ops: &[Op],
    steps: &std::cell::Cell<u64>,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut library.conn.clone())
        .await
        .unwrap();
    redis.set_offset(0);
    let mut model = Model::default();
    for (i, op) in ops.iter().enumerate() {
        apply(redis, library, &mut model, op)
            .await
            .map_err(|e| format!("step {i} ({op:?}): {e}"))?;
        check(library, &model)
            .await
            .map_err(|e| format!("after step {i} ({op:?}): {e}"))?;
        model.steps += 1;
        model.latest_ms = model.latest_ms.max(now_ms(library).await);
        steps.set(steps.get() + 1);
    }
    Ok(())
}

/// A connection to the model's Redis that waits as long as a busy machine needs for each
/// reply: redis-rs gives up after 500 ms by default, and a call given up on may still have
/// run, which the model would count as refused.
async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(60)));
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// Runs `cases` sequences of up to `length` operations from `seed`; returns the steps run.
fn run_model(seed: u64, cases: u32, length: usize) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = RefCell::new(ClockedRedis::start());
    let url = redis.borrow().url();
    let library = runtime.block_on(async {
        // A client connecting loads the library.
        let _ = wasmgear_client::Client::connect(&url).await.unwrap();
        Library::new(connect(&url).await, &function("model"))
    });
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let steps = std::cell::Cell::new(0u64);
    let result = runner.run(&proptest::collection::vec(op(), 1..length), |ops| {
        runtime
            .block_on(run_case(&mut redis.borrow_mut(), &library, &ops, &steps))
            .map_err(TestCaseError::fail)
    });
    if let Err(failure) = result {
        panic!("the model test failed (seed {seed}); the shortest sequence found:\n{failure}");
    }
    steps.get()
}

/// A few thousand random steps (CI): every invariant holds after each.
#[test]
fn the_queue_keeps_its_invariants_under_random_operations() {
    let steps = run_model(36, 24, 300);
    eprintln!("model test: {steps} steps");
    assert!(steps > 1_000, "only {steps} steps ran");
}

/// The long run (`scripts/model SECONDS`): `WASMGEAR_MODEL_SECONDS` seconds (an hour when
/// it is not set) of fresh seeds.
#[test]
#[ignore = "hours long: run it with scripts/model SECONDS"]
fn the_queue_keeps_its_invariants_for_as_long_as_asked() {
    let seconds = std::env::var("WASMGEAR_MODEL_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(3600);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let mut total = 0;
    // WASMGEAR_MODEL_SEED starts from a given seed (to run a failure's seed again).
    let mut seed = std::env::var("WASMGEAR_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(1)
        });
    while std::time::Instant::now() < until {
        total += run_model(seed, 16, 400);
        eprintln!("model test: seed {seed} done, {total} steps so far");
        seed += 1;
    }
    eprintln!("model test: {total} steps in {seconds} s");
}

fn plain_job() -> JobSpec {
    JobSpec {
        priority: 0,
        delay_ms: 0,
        uniq: None,
        tag: None,
        after: None,
        attempts: 1,
        once: None,
        short_retention: false,
        tick: None,
    }
}

/// Runs one fixed sequence (a shrunk failure of an earlier run) and its checks.
fn run_sequence(ops: &[Op]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut redis = ClockedRedis::start();
    let url = redis.url();
    let library = runtime.block_on(async {
        let _ = wasmgear_client::Client::connect(&url).await.unwrap();
        Library::new(connect(&url).await, &function("model"))
    });
    let steps = std::cell::Cell::new(0);
    if let Err(failure) = runtime.block_on(run_case(&mut redis, &library, ops, &steps)) {
        panic!("{failure}");
    }
}

/// Found by a long run: a `lease` sent again after Redis' clock went past the 10 minutes its
/// reply is kept, then back, leases afresh (the reply was forgotten when the clock passed):
/// the queue stays consistent, and a resend is checked only while its reply is kept.
#[test]
fn a_resend_after_the_clock_passed_its_memory_and_came_back() {
    run_sequence(&[
        Op::Enqueue(vec![plain_job()]),
        Op::Lease {
            worker: 0,
            long: false,
            register: false,
        },
        Op::Configure(0),
        Op::Clock(7),
        Op::Clock(3),
        Op::Clock(7),
        Op::Enqueue(vec![plain_job()]),
        Op::Clock(7),
        Op::LeaseAgain,
    ]);
}

/// Found by a long run: a completion reported again after its job (cancelled while it ran)
/// was retried (and cancelled again) is stale, not answered as the first was.
#[test]
fn a_report_sent_again_after_its_job_was_retried_is_stale() {
    let delayed = JobSpec {
        delay_ms: 1_000,
        ..plain_job()
    };
    run_sequence(&[
        Op::Enqueue(vec![delayed.clone(), delayed.clone(), delayed]),
        Op::Enqueue(vec![plain_job(), plain_job()]),
        Op::Lease {
            worker: 0,
            long: false,
            register: false,
        },
        Op::Cancel { pick: 3 },
        Op::Complete {
            worker: 0,
            picks: vec![0],
            next: 0,
        },
        Op::CompleteAgain { same_id: false },
        Op::Retry { pick: 3 },
        Op::CompleteAgain { same_id: false },
        Op::Cancel { pick: 3 },
        Op::CompleteAgain { same_id: false },
    ]);
}
