//! Numbers the Rust side and the Lua scripts must agree on, each with one home. The
//! client prepends them to every function script as Lua constants (see
//! [`lua_constants`]), so the scripts never spell them out.

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

/// The most dependencies (`after`) one job may have.
pub const MAX_DEPENDENCIES: u64 = 100;

/// The longest uniq key, tag, `once` key or child key, in bytes.
pub const MAX_KEY_BYTES: u64 = 200;

/// The most attempts a job may be given.
pub const MAX_ATTEMPTS: u64 = 1000;

/// The longest timeout, retention, delay, lease or backoff accepted, ms (10 years).
pub const MAX_DURATION_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// The most jobs one worker runs at once (`--concurrency`), and so the most one lease call
/// or hand-off gives it: one call's reply carries every job's input, and a worker's pooling
/// allocator reserves address space per instance.
pub const MAX_CONCURRENCY: u64 = 1024;

/// The most jobs one `complete` call reports.
pub const MAX_COMPLETIONS_PER_CALL: u64 = 1024;

/// The most earlier calls one call may say it has the replies of (`acked`).
pub const MAX_ACKED: u64 = 1024;

/// The most children one job may have, whatever its manifest says.
pub const MAX_CHILDREN: u64 = 10_000;

/// The most entries a job's attempt history keeps (the newest; older ones are counted).
pub const MAX_HISTORY: u64 = 100;

/// The longest progress message kept, in bytes.
pub const MAX_PROGRESS_MESSAGE_BYTES: u64 = 1024;

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

/// These numbers as Lua `local` declarations, for the head of a script.
pub fn lua_constants() -> String {
    [
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
        ("MAX_CHILDREN", MAX_CHILDREN),
        ("MAX_HISTORY", MAX_HISTORY),
        ("MAX_PROGRESS_MESSAGE_BYTES", MAX_PROGRESS_MESSAGE_BYTES),
        ("CLOCK_SKEW_MS", CLOCK_SKEW_MS),
    ]
    .iter()
    .map(|(name, value)| format!("local {name} = {value}\n"))
    .collect()
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
        assert_eq!(lua.lines().count(), 18);
    }
}
