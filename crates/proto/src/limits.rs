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
        assert!(lua.contains("local CLOCK_SKEW_MS = 1000\n"), "{lua}");
        assert_eq!(lua.lines().count(), 7);
    }
}
