//! Numbers the Rust side, the Lua scripts, the Python and Node clients and the HTTP API's
//! document must agree on, each with one home. The client prepends them to every function
//! script as Lua constants (see [`lua_constants`]), so the scripts never spell them out; the
//! generated `manifest.json` the other clients ship carries them as its `limits` object (see
//! [`for_clients`]); the OpenAPI document's bounds are built from them.

/// The longest function name, in bytes (of `[A-Za-z0-9_.-]`).
pub const MAX_FUNCTION_NAME_LEN: u64 = 100;

/// The largest input a client accepts for one job, in bytes.
pub const MAX_INPUT_BYTES: u64 = 16 * 1024 * 1024;

/// The lowest priority a job may have.
pub const MIN_PRIORITY: i64 = -1000;

/// The highest priority a job may have.
pub const MAX_PRIORITY: i64 = 1000;

/// The priority the word `low` stands for (`normal` is 0).
pub const PRIORITY_LOW: i64 = -10;

/// The priority the word `high` stands for.
pub const PRIORITY_HIGH: i64 = 10;

/// The shortest retention of a finished job, ms.
pub const MIN_RETENTION_MS: u64 = 1000;

/// Finished jobs kept per function when its config does not say (qless'
/// jobs-history-count); the oldest are forgotten first.
pub const DEFAULT_KEEP_FINISHED: u64 = 50_000;

/// A job's log in Redis keeps its newest this many bytes, over all attempts.
pub const JOB_LOG_BYTES: u64 = 256 * 1024;

/// Days of statistics kept per function (qless' stats-history).
pub const STATS_DAYS: u64 = 30;

/// How long a finished job is kept when the client does not say, ms (GearMonkey's 25 hours).
pub const DEFAULT_RETENTION_MS: u64 = 25 * 3600 * 1000;

/// How long a failed job is kept when the client does not say, ms: a week, so that someone
/// can look at it and retry it.
pub const DEFAULT_FAILED_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

/// The most tags one job may have.
pub const MAX_TAGS: u64 = 32;

/// The most dependencies (`after`) one job may have (a flow's fan-in of 10,000 jobs).
pub const MAX_DEPENDENCIES: u64 = 10_000;

/// The most jobs one flow may have.
pub const MAX_FLOW_JOBS: u64 = 10_000;

/// The longest name of a flow or of a job in it, in bytes.
pub const MAX_FLOW_NAME_BYTES: u64 = 200;

/// How long job numbers reserved for a flow stay reserved, ms: the flow's jobs are written
/// within this time, or a dependent waiting on one never written is cancelled (`missing`).
pub const RESERVATION_MS: u64 = 10 * 60 * 1000;

/// When a flow's record is first checked for being forgettable (all its jobs forgotten), ms
/// after it was submitted; the checks then come ever less often, at most daily.
pub const FLOW_CHECK_FIRST_MS: u64 = 3600 * 1000;

/// The longest time between two checks of a flow's record, ms.
pub const FLOW_CHECK_MAX_MS: u64 = 24 * 3600 * 1000;

/// The most dependents one `resolve` call tells, and the most finished jobs one `told` call
/// notes (a worker tells many at once: a fan-in's dependent is loaded and saved once per
/// call, not once per dependency).
pub const MAX_TELLS_PER_CALL: u64 = 1000;

/// The most jobs one batch may have.
pub const MAX_BATCH_JOBS: u64 = 100_000;

/// How long a batch is kept at most, ms (30 days): an open batch nobody closes is forgotten
/// then, with its callbacks never fired.
pub const BATCH_MAX_MS: u64 = 30 * 24 * 3600 * 1000;

/// How long a batch is kept once it has ended and its callbacks are enqueued, ms (7 days).
pub const BATCH_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;

/// How often the workers' upkeep re-checks an unfinished batch, ms.
pub const BATCH_CHECK_MS: u64 = 60_000;

/// The largest flow record (its name, jobs and edges as JSON), in bytes.
pub const MAX_FLOW_RECORD_BYTES: u64 = 16 * 1024 * 1024;

/// The longest uniq key, tag, `once` key or child key, in bytes.
pub const MAX_KEY_BYTES: u64 = 200;

/// The largest whole number the queue's scripts take as a count or limit (2^53 - 1: Lua
/// numbers are doubles).
pub const MAX_WHOLE: u64 = 9_007_199_254_740_991;

/// The most groups one `groups` call looks at (those with ready jobs, running jobs or their
/// own settings): beyond them, it says it stopped.
pub const MAX_GROUPS_SCANNED: u64 = 100_000;

/// The most groups one `groups` call lists (the deepest first), and the most the metrics
/// report (a bounded set of labels, not one series per tenant).
pub const MAX_GROUPS_LISTED: u64 = 1000;

/// The most jobs one `outcomes` call reports on (a dependent reads its dependencies' states
/// a page at a time).
pub const MAX_OUTCOMES: u64 = 1000;

/// The most bytes of a job's output one `output` call reads (a dependent reads its
/// dependencies' outputs a piece at a time).
pub const MAX_OUTPUT_PIECE: u64 = 1024 * 1024;

/// The most attempts a job may be given.
pub const MAX_ATTEMPTS: u64 = 1000;

/// The longest timeout, retention, delay, lease or backoff accepted, ms (10 years).
pub const MAX_DURATION_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// The latest time to run at (`at_ms`) a request may name, ms since the epoch: the largest
/// whole number a JavaScript number holds exactly. A time more than [`MAX_DURATION_MS`]
/// ahead of the clock is refused too, but as a conflict with the clock (HTTP 409).
pub const MAX_AT_MS: u64 = (1 << 53) - 1;

/// The most jobs one worker runs at once (`--concurrency`), and so the most one lease call
/// or hand-off gives it: one call's reply carries every job's input, and a worker's pooling
/// allocator reserves address space per instance.
pub const MAX_CONCURRENCY: u64 = 1024;

/// The most jobs one `complete` call reports.
pub const MAX_COMPLETIONS_PER_CALL: u64 = 1024;

/// The most bytes of output a `finish` event carries to a waiting client (`watch`): a
/// larger output, or one that is not printable ASCII text, is read with `get` instead.
pub const MAX_EVENT_OUTPUT: u64 = 1024;

/// The most earlier calls one call may say it has the replies of (`acked`).
pub const MAX_ACKED: u64 = 1024;

/// The most children one job may have, whatever its manifest says.
pub const MAX_CHILDREN: u64 = 10_000;

/// The most entries a job's attempt history keeps (the newest; older ones are counted).
pub const MAX_HISTORY: u64 = 100;

/// The longest progress message kept, in bytes.
pub const MAX_PROGRESS_MESSAGE_BYTES: u64 = 1024;

/// The largest checkpoint a job may keep, in bytes, whatever its plugin's manifest says
/// (`[limits] checkpoint`, by default [`DEFAULT_CHECKPOINT_BYTES`]).
pub const MAX_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;

/// The largest checkpoint a plugin's jobs may keep when its manifest does not say.
pub const DEFAULT_CHECKPOINT_BYTES: u64 = 1024 * 1024;

/// The most jobs a batch plugin's manifest may ask for in one call (`batch.max`).
pub const MAX_PLUGIN_BATCH: u64 = 1000;

/// The longest a batch plugin's manifest may have the worker wait for a batch to fill
/// (`batch.wait`), ms: the leases of the jobs gathered first run down meanwhile.
pub const MAX_PLUGIN_BATCH_WAIT_MS: u64 = 10_000;

/// How far the clocks of a cluster's nodes may disagree, ms: a schedule's last tick that a
/// function's queue keeps (fired on one node's clock, checked on another's) is taken for one
/// fired on a clock that has gone back since only when it is later than now by more.
pub const CLOCK_SKEW_MS: u64 = 1000;

/// The wait before a schedule's tick that could not fire is tried again, after its first
/// failure; it doubles with each failure in a row, up to [`SCHEDULE_RETRY_MAX_MS`].
pub const SCHEDULE_RETRY_FIRST_MS: u64 = 1000;

/// The longest wait before a schedule's tick that could not fire is tried again.
pub const SCHEDULE_RETRY_MAX_MS: u64 = 60_000;

/// How long a deploy may write a version's chunks before it is taken for an interrupted one
/// (its chunks collected, unless it records the version first: then it writes them again):
/// its pin and its note as under way last this long, renewed while it writes.
pub const DEPLOY_PIN_MS: u64 = 60_000;

/// How long a collector's pin on a version holds: it deletes the chunks within it, or not
/// at all.
pub const COLLECT_PIN_MS: u64 = 10_000;

/// How long connecting to Redis may take before it counts as unreachable, ms.
pub const CONNECT_TIMEOUT_MS: u64 = 5000;

/// How long one command may wait for its reply before the connection counts as lost, ms
/// (PROTOCOL.md, "Lost replies").
pub const RESPONSE_TIMEOUT_MS: u64 = 10_000;

/// The most replicas `min_replicas` may ask to confirm a write (a client's, a worker's or a
/// function's setting).
pub const MAX_MIN_REPLICAS: u64 = 16;

/// How long a write that asks for replicas (`min_replicas`) waits for them to confirm it
/// (`WAIT N timeout`) before it is reported as not replicated, ms.
pub const MIN_REPLICAS_TIMEOUT_MS: u64 = 1000;

/// How often a wait re-reads a job's record while it cannot hear events, ms.
pub const WAIT_POLL_MS: u64 = 500;

/// How often a wait re-reads a job's record while it hears its events (a safety net), ms.
pub const WAIT_RECHECK_MS: u64 = 5000;

/// The most jobs the Python and Node clients put in one `enqueue` call; a bigger batch goes
/// in several calls, each all or nothing.
pub const ENQUEUE_BATCH: u64 = 1000;

/// The most jobs one bulk request of the HTTP API may carry (enqueued in one atomic call).
pub const MAX_BULK_JOBS: u64 = 10_000;

/// How long a long poll of the HTTP API waits when the request names no timeout, ms.
pub const DEFAULT_WAIT_MS: u64 = 30_000;

/// The longest `tracestate` a job carries, in bytes (the W3C trace context's recommended
/// bound).
pub const MAX_TRACESTATE_BYTES: u64 = 512;

/// The longest a long poll of the HTTP API may wait, ms (proxies commonly cut idle requests
/// at a minute).
pub const MAX_WAIT_MS: u64 = 300_000;

/// The audit log keeps about its newest this many entries (`XADD MAXLEN ~`).
pub const AUDIT_KEEP: u64 = 10_000;

/// The longest text of one audit entry's field, in bytes (longer ones are cut).
pub const MAX_AUDIT_FIELD_BYTES: u64 = 1024;

/// The limits another client needs, by the names the `limits` object of `manifest.json`
/// gives them (the constants' names in lower case), in this order.
pub fn for_clients() -> Vec<(&'static str, i64)> {
    // Every value fits an i64 (and a JavaScript number, below 2^53).
    let n = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
    vec![
        ("max_function_name_len", n(MAX_FUNCTION_NAME_LEN)),
        ("max_input_bytes", n(MAX_INPUT_BYTES)),
        ("min_priority", MIN_PRIORITY),
        ("max_priority", MAX_PRIORITY),
        ("priority_low", PRIORITY_LOW),
        ("priority_high", PRIORITY_HIGH),
        ("max_attempts", n(MAX_ATTEMPTS)),
        ("max_tags", n(MAX_TAGS)),
        ("max_dependencies", n(MAX_DEPENDENCIES)),
        ("max_flow_jobs", n(MAX_FLOW_JOBS)),
        ("max_flow_name_bytes", n(MAX_FLOW_NAME_BYTES)),
        ("max_batch_jobs", n(MAX_BATCH_JOBS)),
        ("max_key_bytes", n(MAX_KEY_BYTES)),
        ("max_duration_ms", n(MAX_DURATION_MS)),
        ("min_retention_ms", n(MIN_RETENTION_MS)),
        ("default_retention_ms", n(DEFAULT_RETENTION_MS)),
        (
            "default_failed_retention_ms",
            n(DEFAULT_FAILED_RETENTION_MS),
        ),
        ("max_children", n(MAX_CHILDREN)),
        ("connect_timeout_ms", n(CONNECT_TIMEOUT_MS)),
        ("response_timeout_ms", n(RESPONSE_TIMEOUT_MS)),
        ("wait_poll_ms", n(WAIT_POLL_MS)),
        ("wait_recheck_ms", n(WAIT_RECHECK_MS)),
        ("enqueue_batch", n(ENQUEUE_BATCH)),
        ("max_min_replicas", n(MAX_MIN_REPLICAS)),
        ("min_replicas_timeout_ms", n(MIN_REPLICAS_TIMEOUT_MS)),
        ("max_tracestate_bytes", n(MAX_TRACESTATE_BYTES)),
    ]
}

/// These numbers as Lua `local` declarations, for the head of a script.
pub fn lua_constants() -> String {
    let unsigned = [
        ("DEFAULT_KEEP_FINISHED", DEFAULT_KEEP_FINISHED),
        ("MAX_LOG", JOB_LOG_BYTES),
        ("STATS_DAYS", STATS_DAYS),
        ("DAY_MS", crate::units::DAY_MS),
        ("DEFAULT_RETENTION_MS", DEFAULT_RETENTION_MS),
        ("DEFAULT_FAILED_RETENTION_MS", DEFAULT_FAILED_RETENTION_MS),
        ("MAX_TAGS", MAX_TAGS),
        ("MAX_DEPENDENCIES", MAX_DEPENDENCIES),
        ("MAX_KEY_BYTES", MAX_KEY_BYTES),
        ("MAX_ATTEMPTS", MAX_ATTEMPTS),
        ("MAX_DURATION_MS", MAX_DURATION_MS),
        ("MAX_CONCURRENCY", MAX_CONCURRENCY),
        ("MAX_COMPLETIONS_PER_CALL", MAX_COMPLETIONS_PER_CALL),
        ("MAX_ACKED", MAX_ACKED),
        ("MAX_EVENT_OUTPUT", MAX_EVENT_OUTPUT),
        ("MAX_CHILDREN", MAX_CHILDREN),
        ("MAX_HISTORY", MAX_HISTORY),
        ("MAX_PROGRESS_MESSAGE_BYTES", MAX_PROGRESS_MESSAGE_BYTES),
        ("MAX_CHECKPOINT_BYTES", MAX_CHECKPOINT_BYTES),
        ("CLOCK_SKEW_MS", CLOCK_SKEW_MS),
        ("MAX_OUTCOMES", MAX_OUTCOMES),
        ("MAX_OUTPUT_PIECE", MAX_OUTPUT_PIECE),
        ("RESERVATION_MS", RESERVATION_MS),
        ("FLOW_CHECK_FIRST_MS", FLOW_CHECK_FIRST_MS),
        ("FLOW_CHECK_MAX_MS", FLOW_CHECK_MAX_MS),
        ("MAX_FLOW_RECORD_BYTES", MAX_FLOW_RECORD_BYTES),
        ("MAX_FLOW_JOBS", MAX_FLOW_JOBS),
        ("MAX_BATCH_JOBS", MAX_BATCH_JOBS),
        ("MAX_TELLS_PER_CALL", MAX_TELLS_PER_CALL),
        ("BATCH_MAX_MS", BATCH_MAX_MS),
        ("BATCH_RETENTION_MS", BATCH_RETENTION_MS),
        ("BATCH_CHECK_MS", BATCH_CHECK_MS),
        ("MAX_GROUPS_SCANNED", MAX_GROUPS_SCANNED),
        ("MAX_GROUPS_LISTED", MAX_GROUPS_LISTED),
        ("MAX_MIN_REPLICAS", MAX_MIN_REPLICAS),
        ("MAX_TRACESTATE_BYTES", MAX_TRACESTATE_BYTES),
    ];
    let signed = [
        ("MIN_PRIORITY", MIN_PRIORITY),
        ("MAX_PRIORITY", MAX_PRIORITY),
    ];
    let unsigned = unsigned
        .iter()
        .map(|(name, value)| (*name, value.to_string()));
    let signed = signed
        .iter()
        .map(|(name, value)| (*name, value.to_string()));
    let mut lua: String = unsigned
        .chain(signed)
        .map(|(name, value)| format!("local {name} = {value}\n"))
        .collect();
    // What an encrypted input starts with, as a Lua string (each byte a decimal escape).
    let magic: String = (crate::crypto::MAGIC.iter())
        .map(|b| format!("\\{b}"))
        .collect();
    lua.push_str(&format!("local ENCRYPTED_MAGIC = \"{magic}\"\n"));
    lua
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_constants_become_lua_locals() {
        let lua = super::lua_constants();
        assert!(
            lua.contains("local DEFAULT_KEEP_FINISHED = 50000\n"),
            "{lua}"
        );
        assert!(lua.contains("local MAX_LOG = 262144\n"), "{lua}");
        assert!(lua.contains("local DAY_MS = 86400000\n"), "{lua}");
        assert!(
            lua.contains("local DEFAULT_RETENTION_MS = 90000000\n"),
            "{lua}"
        );
        assert!(lua.contains("local MIN_PRIORITY = -1000\n"), "{lua}");
        assert!(lua.contains("local MAX_GROUPS_LISTED = 1000\n"), "{lua}");
        assert!(lua.contains("local MAX_MIN_REPLICAS = 16\n"), "{lua}");
        assert!(lua.contains("local MAX_EVENT_OUTPUT = 1024\n"), "{lua}");
        assert!(
            lua.contains("local ENCRYPTED_MAGIC = \"\\0\\119\\103\\101\\110\\99\\49\"\n"),
            "{lua}"
        );
        assert_eq!(lua.lines().count(), 39);
    }

    /// Every limit a client reads from the manifest has a lower-case name, once, and a value
    /// a JavaScript number holds exactly.
    #[test]
    fn the_clients_limits_are_named_once_and_fit_a_javascript_number() {
        let limits = super::for_clients();
        let mut names: Vec<_> = limits.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), limits.len());
        for (name, value) in limits {
            assert_eq!(name, name.to_lowercase());
            assert!(value.unsigned_abs() < 1 << 53, "{name}");
        }
    }
}
