//! Every Redis key and channel name wasmgear uses, built in one place.
//!
//! All keys of one function share the hash tag `{FUNCTION}`, so every script, which only
//! ever touches the keys of one function, runs on one Redis Cluster node.
//! `PROTOCOL.md` documents each key's type and lifetime.

use crate::job::FunctionName;

/// The prefix of every key wasmgear writes.
pub const PREFIX: &str = "wg";

/// A key (or channel) of one function's queue, as the library's functions declare the keys
/// they take (each its own list, in its own order: see `crates/client/src/scripts.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKey {
    /// `seq`: the last job number handed out.
    Seq,
    /// `jobs`: number → job record.
    Jobs,
    /// `input`: number → input bytes.
    Input,
    /// `output`: number → output bytes.
    Output,
    /// `logs`: number → the job's log.
    Logs,
    /// `ready`: queued jobs.
    Ready,
    /// `scheduled`: jobs waiting for a time.
    Scheduled,
    /// `leased`: running jobs by lease expiry.
    Leased,
    /// `waiting`: jobs waiting on dependencies.
    Waiting,
    /// `expires`: finished jobs by when they are forgotten.
    Expires,
    /// `uniq`: uniq key → holder.
    Uniq,
    /// `tagged`: tag index.
    Tagged,
    /// `failed`: failure groups.
    Failed,
    /// `counts`: finished jobs kept, per state and group.
    Counts,
    /// `stats`: daily statistics.
    Stats,
    /// `config`: the function's settings.
    Config,
    /// `rate`: the rate-limit window.
    Rate,
    /// `events`: the events channel.
    Events,
    /// `work`: the workers' channel.
    Work,
    /// `calls`: replies kept for calls sent again.
    Calls,
    /// `calls-exp`: when those are forgotten.
    CallsExp,
    /// `idle`: workers waiting for a job handed to them, by when the wait lapses.
    Idle,
    /// `idle-args`: how each of those workers leases.
    IdleArgs,
    /// `ticks`: the last tick of each schedule a job was enqueued for.
    Ticks,
    /// `reserved`: job numbers reserved for a flow's jobs, by when the reservation lapses.
    Reserved,
    /// `groups`: the round of groups with ready jobs, by turn.
    Groups,
    /// `group-ready`: the ready jobs that have a group, by group, priority and number.
    GroupReady,
    /// `group-running`: group → its jobs holding a slot.
    GroupRunning,
    /// `group-config`: group → its own limits.
    GroupConfig,
    /// `group-rate`: each rate-limited group's leases in its window.
    GroupRate,
    /// `group-wait`: groups waiting for their rate window, by when it lets them lease.
    GroupWait,
    /// `dedup`: keys kept past their job (uniq windows, throttle windows).
    Dedup,
    /// `dedup-exp`: those keys, by when they end.
    DedupExp,
    /// `expiring`: jobs with a deadline to start by, by that deadline.
    Expiring,
    /// `checkpoints`: number → the latest checkpoint a job's attempts saved.
    Checkpoints,
}

impl QueueKey {
    /// Every queue key, in declaration order.
    pub const ALL: [QueueKey; 35] = [
        QueueKey::Seq,
        QueueKey::Jobs,
        QueueKey::Input,
        QueueKey::Output,
        QueueKey::Logs,
        QueueKey::Ready,
        QueueKey::Scheduled,
        QueueKey::Leased,
        QueueKey::Waiting,
        QueueKey::Expires,
        QueueKey::Uniq,
        QueueKey::Tagged,
        QueueKey::Failed,
        QueueKey::Counts,
        QueueKey::Stats,
        QueueKey::Config,
        QueueKey::Rate,
        QueueKey::Events,
        QueueKey::Work,
        QueueKey::Calls,
        QueueKey::CallsExp,
        QueueKey::Idle,
        QueueKey::IdleArgs,
        QueueKey::Ticks,
        QueueKey::Reserved,
        QueueKey::Groups,
        QueueKey::GroupReady,
        QueueKey::GroupRunning,
        QueueKey::GroupConfig,
        QueueKey::GroupRate,
        QueueKey::GroupWait,
        QueueKey::Dedup,
        QueueKey::DedupExp,
        QueueKey::Expiring,
        QueueKey::Checkpoints,
    ];

    /// The key's name in the Lua functions (`K.NAME`).
    pub fn lua_name(self) -> &'static str {
        match self {
            QueueKey::CallsExp => "calls_exp",
            QueueKey::IdleArgs => "idle_args",
            QueueKey::GroupReady => "group_ready",
            QueueKey::GroupRunning => "group_running",
            QueueKey::GroupConfig => "group_config",
            QueueKey::GroupRate => "group_rate",
            QueueKey::GroupWait => "group_wait",
            QueueKey::DedupExp => "dedup_exp",
            other => other.suffix(),
        }
    }

    /// The last part of the key's name, after `wg:{F}:`.
    pub fn suffix(self) -> &'static str {
        match self {
            QueueKey::Seq => "seq",
            QueueKey::Jobs => "jobs",
            QueueKey::Input => "input",
            QueueKey::Output => "output",
            QueueKey::Logs => "logs",
            QueueKey::Ready => "ready",
            QueueKey::Scheduled => "scheduled",
            QueueKey::Leased => "leased",
            QueueKey::Waiting => "waiting",
            QueueKey::Expires => "expires",
            QueueKey::Uniq => "uniq",
            QueueKey::Tagged => "tagged",
            QueueKey::Failed => "failed",
            QueueKey::Counts => "counts",
            QueueKey::Stats => "stats",
            QueueKey::Config => "config",
            QueueKey::Rate => "rate",
            QueueKey::Events => "events",
            QueueKey::Work => "work",
            QueueKey::Calls => "calls",
            QueueKey::CallsExp => "calls-exp",
            QueueKey::Idle => "idle",
            QueueKey::IdleArgs => "idle-args",
            QueueKey::Ticks => "ticks",
            QueueKey::Reserved => "reserved",
            QueueKey::Groups => "groups",
            QueueKey::GroupReady => "group-ready",
            QueueKey::GroupRunning => "group-running",
            QueueKey::GroupConfig => "group-config",
            QueueKey::GroupRate => "group-rate",
            QueueKey::GroupWait => "group-wait",
            QueueKey::Dedup => "dedup",
            QueueKey::DedupExp => "dedup-exp",
            QueueKey::Expiring => "expiring",
            QueueKey::Checkpoints => "checkpoints",
        }
    }
}

/// The keys of one function's queue.
#[derive(Debug, Clone)]
pub struct FunctionKeys {
    /// `wg:{FUNCTION}`: the common start of every key below.
    base: String,
}

impl FunctionKeys {
    /// The keys of `function`.
    pub fn new(function: &FunctionName) -> Self {
        FunctionKeys {
            base: format!("{PREFIX}:{{{function}}}"),
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.base)
    }

    /// String: the last job number handed out (`INCR`).
    pub fn seq(&self) -> String {
        self.key("seq")
    }
    /// Hash: job number → the job's record (JSON, without input and output).
    pub fn jobs(&self) -> String {
        self.key("jobs")
    }
    /// Hash: job number → input bytes.
    pub fn input(&self) -> String {
        self.key("input")
    }
    /// Hash: job number → output bytes of a succeeded job.
    pub fn output(&self) -> String {
        self.key("output")
    }
    /// Hash: job number → the job's log (its log lines and stdout/stderr, every attempt).
    pub fn logs(&self) -> String {
        self.key("logs")
    }
    /// Sorted set: jobs ready to run, scored by priority then number (lowest first).
    pub fn ready(&self) -> String {
        self.key("ready")
    }
    /// Sorted set: jobs waiting for a time (delayed, or retrying after backoff), scored by
    /// the time they become ready, in ms.
    pub fn scheduled(&self) -> String {
        self.key("scheduled")
    }
    /// Sorted set: running jobs, scored by the time their lease expires, in ms.
    pub fn leased(&self) -> String {
        self.key("leased")
    }
    /// Sorted set: finished jobs, scored by the time their record is deleted, in ms.
    pub fn expires(&self) -> String {
        self.key("expires")
    }
    /// Sorted set: jobs waiting on dependencies, scored by when to re-check their links to
    /// jobs of other functions (ms).
    pub fn waiting(&self) -> String {
        self.key("waiting")
    }
    /// Hash: uniq key → number of the unfinished job holding it.
    pub fn uniq(&self) -> String {
        self.key("uniq")
    }
    /// Sorted set: `TAG\0NUMBER` (number zero-padded), all scored 0, read by lex range.
    pub fn tagged(&self) -> String {
        self.key("tagged")
    }
    /// Sorted set: `GROUP\0NUMBER` of each retained failed job, all scored 0.
    pub fn failed(&self) -> String {
        self.key("failed")
    }
    /// Hash: retained finished jobs per state, and failed ones per group (`failed:GROUP`).
    pub fn counts(&self) -> String {
        self.key("counts")
    }
    /// Hash: `DAY:FIELD` → daily statistics.
    pub fn stats(&self) -> String {
        self.key("stats")
    }
    /// Hash: the function's settings (paused, concurrency, rate limit, finished jobs kept).
    pub fn config(&self) -> String {
        self.key("config")
    }
    /// Sorted set: lease tokens inside the rate-limit window, scored by lease time (ms).
    pub fn rate(&self) -> String {
        self.key("rate")
    }
    /// Hash: call id → the reply of an `enqueue` or `lease` call, kept 10 minutes so that
    /// the same call sent again is answered the same instead of applied twice.
    pub fn calls(&self) -> String {
        self.key("calls")
    }
    /// Sorted set: call id, scored by when its reply in `calls` is forgotten (ms).
    pub fn calls_expiry(&self) -> String {
        self.key("calls-exp")
    }
    /// Sorted set: idle workers of the function that asked to be handed the next job
    /// directly (`lease` found nothing), scored by when that lapses (ms).
    pub fn idle(&self) -> String {
        self.key("idle")
    }
    /// Hash: idle worker id → how it leases (`CALL_ID|WANT|LEASE_MS|TIMEOUT_MS|ATTEMPTS|CHANNEL`).
    pub fn idle_args(&self) -> String {
        self.key("idle-args")
    }
    /// Hash: schedule name → `TICK_MS,NUMBER`, the last tick of that schedule a job of the
    /// function was enqueued for and the job: a tick is never enqueued twice.
    pub fn ticks(&self) -> String {
        self.key("ticks")
    }
    /// Sorted set: the round of groups that may have ready jobs, scored by turn (`''`: the
    /// jobs without a group).
    pub fn groups(&self) -> String {
        self.key("groups")
    }
    /// Sorted set (lex): `GROUP\0PPPP\0NNNNNNNNNNNNN` of each ready job with a group.
    pub fn group_ready(&self) -> String {
        self.key("group-ready")
    }
    /// Hash: group → how many of its jobs hold a slot (leased, or a sequence's retry).
    pub fn group_running(&self) -> String {
        self.key("group-running")
    }
    /// Hash: group → its own limits, `CONCURRENCY|RATE_LIMIT|RATE_INTERVAL_MS|PAUSED`.
    pub fn group_config(&self) -> String {
        self.key("group-config")
    }
    /// Sorted set (lex): `GROUP\0TTTTTTTTTTTTT\0N` of each rate-limited group's leases in
    /// its window.
    pub fn group_rate(&self) -> String {
        self.key("group-rate")
    }
    /// Sorted set: groups waiting for their rate window, scored by when it lets them lease.
    pub fn group_wait(&self) -> String {
        self.key("group-wait")
    }
    /// Hash: key → what is kept of it past its job: `w|UNTIL` (a uniq key whose job
    /// succeeded with `uniq_for`) or `t|UNTIL|COUNT|NUMBER` (a throttle window).
    pub fn dedup(&self) -> String {
        self.key("dedup")
    }
    /// Sorted set: the keys of `dedup`, scored by when they end (ms).
    pub fn dedup_expiry(&self) -> String {
        self.key("dedup-exp")
    }
    /// Sorted set: jobs with a deadline to start by (`expires_ms`), scored by it, until they
    /// start or it passes.
    pub fn expiring(&self) -> String {
        self.key("expiring")
    }
    /// Hash: job number → the latest checkpoint its attempts saved (while it has not
    /// succeeded; a failed or cancelled job keeps it with its record, for `retry`).
    pub fn checkpoints(&self) -> String {
        self.key("checkpoints")
    }
    /// The pattern (`PSUBSCRIBE`) of every function's events channel.
    pub fn all_events_pattern() -> String {
        format!("{PREFIX}:{{*}}:events")
    }
    /// The function whose events channel `channel` is (`None` for any other name).
    pub fn function_of_events(channel: &str) -> Option<FunctionName> {
        let name = channel
            .strip_prefix(&format!("{PREFIX}:{{"))?
            .strip_suffix("}:events")?;
        FunctionName::new(name).ok()
    }
    /// The key `key` of the function.
    pub fn get(&self, key: QueueKey) -> String {
        self.key(key.suffix())
    }
    /// Sorted set: the live workers serving the function, scored by membership expiry (ms).
    pub fn workers(&self) -> String {
        self.key("workers")
    }
    /// Pub/sub channel: the function's events (`create`, `start`, `progress`, `finish`).
    pub fn events(&self) -> String {
        self.key("events")
    }
    /// Pub/sub channel: what the function's workers listen to, `work` (jobs may have become
    /// runnable) and `cancel ID` (a running job's cancellation was asked for). Much quieter
    /// than the events channel: no message per job started or finished.
    pub fn work(&self) -> String {
        self.key("work")
    }
}

/// Pub/sub channel of one worker: the jobs handed to it when it was idle (`lease` then
/// `enqueue`), each a message `lease FUNCTION ROW` and the input after the line break.
pub fn handoff_channel(worker_id: &str) -> String {
    format!("{PREFIX}:handoff:{worker_id}")
}

/// The directory of functions (in the `{functions}` slot): every function that has been
/// enqueued to or served, so that operators can list queues without scanning keys.
pub fn functions() -> String {
    format!("{PREFIX}:{{functions}}:names")
}

/// Stream: the audit log, one entry per action through `wasmgear serve` and the CLI's
/// operate commands (who, what, on what, with what outcome), about its newest
/// [`AUDIT_KEEP`](crate::limits::AUDIT_KEEP) kept.
pub fn audit() -> String {
    format!("{PREFIX}:{{audit}}:log")
}

/// The keys of the worker list (all in the `{workers}` slot).
pub struct WorkerListKeys;

impl WorkerListKeys {
    /// Sorted set: worker id scored by when its entry expires (ms).
    pub fn expiry() -> String {
        format!("{PREFIX}:{{workers}}:expiry")
    }
    /// Hash: worker id → its advertisement (JSON).
    pub fn info() -> String {
        format!("{PREFIX}:{{workers}}:info")
    }
}

/// The keys of the recurring jobs (`wasmgear schedule`), all in the `{schedules}` slot.
pub struct ScheduleKeys;

impl ScheduleKeys {
    /// Hash: schedule name → its definition (JSON).
    pub fn defs() -> String {
        format!("{PREFIX}:{{schedules}}:defs")
    }
    /// Hash: schedule name → the input of its jobs.
    pub fn inputs() -> String {
        format!("{PREFIX}:{{schedules}}:inputs")
    }
    /// Sorted set: schedule name, scored by its next tick (ms), or by when to try again a
    /// tick that could not fire; a paused schedule has none.
    pub fn next() -> String {
        format!("{PREFIX}:{{schedules}}:next")
    }
    /// Sorted set: schedule name, scored by when its score in [`next`](Self::next) was set
    /// (ms, Redis' clock): one later than now was set on a clock that has gone back since.
    pub fn advanced() -> String {
        format!("{PREFIX}:{{schedules}}:advanced")
    }
    /// Hash: schedule name → why its due tick could not fire, and when it is tried again
    /// (JSON, [`ScheduleFailure`](crate::schedule::ScheduleFailure)).
    pub fn errors() -> String {
        format!("{PREFIX}:{{schedules}}:errors")
    }
    /// All of them, in the order the schedule functions of the library take them.
    pub fn all() -> [String; 5] {
        [
            Self::defs(),
            Self::inputs(),
            Self::next(),
            Self::advanced(),
            Self::errors(),
        ]
    }
}

/// The keys of the flows (`wasmgear flow`), all in the `{flows}` slot.
pub struct FlowKeys;

impl FlowKeys {
    /// String: the last flow id handed out.
    pub fn seq() -> String {
        format!("{PREFIX}:{{flows}}:seq")
    }
    /// Hash: flow id → its record (JSON: name, jobs, edges).
    pub fn records() -> String {
        format!("{PREFIX}:{{flows}}:records")
    }
    /// Sorted set: flow id, scored by when to check whether its jobs are all forgotten (ms).
    pub fn due() -> String {
        format!("{PREFIX}:{{flows}}:due")
    }
    /// All of them, in the order the flow functions of the library take them.
    pub fn all() -> [String; 3] {
        [Self::seq(), Self::records(), Self::due()]
    }
}

/// The keys of a batch (`wasmgear batch`), all in the slot `{batch:ID}` of its own, so that
/// batches spread over a cluster; and the batches the workers' upkeep re-checks, in the
/// `{batches}` slot.
pub struct BatchKeys;

impl BatchKeys {
    /// Hash: the batch's definition (its name and callbacks, JSON), whether it is open, its
    /// counts (total, succeeded, failed, cancelled), times, and each callback's state.
    pub fn state(id: &str) -> String {
        format!("{PREFIX}:{{batch:{id}}}:state")
    }
    /// List: the ids of its jobs, in the order they were added.
    pub fn members(id: &str) -> String {
        format!("{PREFIX}:{{batch:{id}}}:members")
    }
    /// Hash: job id → the state it ended in (each job counted once).
    pub fn ended(id: &str) -> String {
        format!("{PREFIX}:{{batch:{id}}}:ended")
    }
    /// The three keys of batch `id`, in the order the batch functions take them.
    pub fn all(id: &str) -> [String; 3] {
        [Self::state(id), Self::members(id), Self::ended(id)]
    }
    /// Sorted set: batch id, scored by when the upkeep re-checks it (ms).
    pub fn due() -> String {
        format!("{PREFIX}:{{batches}}:due")
    }
}

/// The keys of the deployed-plugin store (`wasmgear deploy`). The registry is in the
/// `{deploy}` slot; each version's chunks are under a hash tag of their own, so a large
/// component fills one slot of a cluster, not the registry's.
pub struct DeployKeys;

impl DeployKeys {
    /// Hash: version → what was deployed (JSON: functions, manifest, size, SHA-256, chunks).
    pub fn versions() -> String {
        format!("{PREFIX}:{{deploy}}:versions")
    }
    /// Hash: function → the version serving it now.
    pub fn current() -> String {
        format!("{PREFIX}:{{deploy}}:current")
    }
    /// Hash: function → the versions it was given, oldest first, the current one last
    /// (JSON array): what `--rollback` goes back through.
    pub fn history() -> String {
        format!("{PREFIX}:{{deploy}}:history")
    }
    /// Pub/sub channel: `FUNCTION VERSION` after each change of a current version.
    pub fn events() -> String {
        format!("{PREFIX}:{{deploy}}:events")
    }
    /// Sorted set: `VERSION TOKEN` of each deploy under way, scored by when it lapses (ms,
    /// Redis' clock; 0 once a collector has doomed it).
    pub fn pending() -> String {
        format!("{PREFIX}:{{deploy}}:pending")
    }
    /// Sorted set: versions no record names any more, whose chunks are to be collected,
    /// scored by when their last record went (ms).
    pub fn graveyard() -> String {
        format!("{PREFIX}:{{deploy}}:graveyard")
    }
    /// The registry's six keys, in the order the library's deploy functions take them.
    pub fn registry() -> [String; 6] {
        [
            Self::versions(),
            Self::current(),
            Self::history(),
            Self::events(),
            Self::pending(),
            Self::graveyard(),
        ]
    }
    /// Hash: chunk number (`0`, `1`...) → that part of version `version`'s component.
    pub fn chunks(version: &str) -> String {
        format!("{PREFIX}:{{plugin:{version}}}:chunks")
    }
    /// String, expiring by itself: `deploy` while deploys write version `version`'s chunks,
    /// `collect:TOKEN` while a collector may delete them (in their slot).
    pub fn pin(version: &str) -> String {
        format!("{PREFIX}:{{plugin:{version}}}:pin")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_function_shares_its_hash_tag() {
        let keys = FunctionKeys::new(&FunctionName::new("echo").unwrap());
        for key in [QueueKey::Seq, QueueKey::CallsExp, QueueKey::Events]
            .map(|k| keys.get(k))
            .into_iter()
            .chain([keys.workers(), keys.calls_expiry()])
        {
            assert!(key.starts_with("wg:{echo}:"), "{key}");
        }
        assert_eq!(
            FunctionKeys::function_of_events(&keys.events()),
            Some(FunctionName::new("echo").unwrap())
        );
        for other in [keys.work(), "wg:{}:events".into(), "x".into()] {
            assert_eq!(FunctionKeys::function_of_events(&other), None, "{other}");
        }
    }
}
