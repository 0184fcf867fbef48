//! Least privilege in Redis: the ACL rules of a Redis user for each kind of program that
//! talks to the queue (`wasmgear acl ROLE` prints them as an `ACL SETUSER` line).
//!
//! - a **producer** enqueues (jobs, flows, batches) and reads jobs, flows, batches and
//!   events;
//! - a **worker** is a producer (child jobs, schedules' jobs) that also leases, reports,
//!   advertises itself and does the queue's upkeep (schedules, flows and batches due,
//!   collecting deployed chunks), and reads deployed plugins;
//! - an **operator** is a producer that also cancels, retries, reprioritises, tags,
//!   configures, deploys, changes schedules and writes and reads the audit log.
//!
//! None of them may load the library (`FUNCTION LOAD`: an admin, the default user or a
//! worker started as one, loads it once per version), run a command the queue does not use,
//! or touch a key or channel outside `wg:`. Each library function is allowed by name
//! (`+fcall|wg2_lease`, Redis 7's first-argument rules); a test checks that every function
//! of the library is given to a role on purpose.

use std::fmt;

use wasmgear_proto::keys::QueueKey;

/// A kind of Redis user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RedisRole {
    /// Enqueues and reads.
    Producer,
    /// Leases, runs and reports; a producer too.
    Worker,
    /// Operates the queue (cancel, retry, config, deploy, schedules); a producer too.
    Operator,
}

impl RedisRole {
    /// Every role.
    pub const ALL: [RedisRole; 3] = [RedisRole::Producer, RedisRole::Worker, RedisRole::Operator];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            RedisRole::Producer => "producer",
            RedisRole::Worker => "worker",
            RedisRole::Operator => "operator",
        }
    }

    /// The library functions (without the `wg2_` prefix) this role may call.
    pub fn functions(self) -> Vec<&'static str> {
        let mut all = PRODUCER.to_vec();
        match self {
            RedisRole::Producer => {}
            RedisRole::Worker => all.extend_from_slice(WORKER),
            RedisRole::Operator => all.extend_from_slice(OPERATOR),
        }
        all
    }

    /// The plain Redis commands this role may run (besides `FCALL`/`FCALL_RO` of its
    /// functions).
    pub fn commands(self) -> Vec<&'static str> {
        let mut all = COMMON_COMMANDS.to_vec();
        match self {
            RedisRole::Producer => {}
            RedisRole::Worker => all.extend_from_slice(WORKER_COMMANDS),
            RedisRole::Operator => all.extend_from_slice(OPERATOR_COMMANDS),
        }
        all
    }

    /// The key patterns this role may write (it may read every key under `wg:`).
    pub fn writes(self) -> Vec<String> {
        // A function's queue keys: `wg:{F}:SUFFIX` (a function name holds no brace).
        let mut all: Vec<String> = QueueKey::ALL
            .iter()
            .map(|k| k.suffix())
            .chain(["workers"])
            .map(|suffix| format!("wg:{{*}}:{suffix}"))
            .collect();
        all.extend(
            [
                "wg:{functions}:*",
                "wg:{flows}:*",
                "wg:{batch:*}:*",
                "wg:{batches}:*",
            ]
            .map(String::from),
        );
        match self {
            RedisRole::Producer => {}
            // Its advertisement and roll call, schedules firing, and collecting the chunks
            // of deployed versions nothing needs.
            RedisRole::Worker => all.extend(
                [
                    "wg:{workers}:*",
                    "wg:{schedules}:*",
                    "wg:{deploy}:*",
                    "wg:{plugin:*}:*",
                ]
                .map(String::from),
            ),
            RedisRole::Operator => all = vec!["wg:*".to_string()],
        }
        all
    }

    /// The ACL rules of a user of this role (after `on` and its password), in the order
    /// `ACL SETUSER` takes them: every key under `wg:` to read, only its role's to write,
    /// the queue's channels, and only the commands the queue runs.
    pub fn rules(self) -> Vec<String> {
        let mut rules: Vec<String> = ["resetkeys", "%R~wg:*"].map(String::from).to_vec();
        // Redis 7.0 wants one pattern to grant every access a command makes to a key (an
        // INCR reads and writes): the writable keys are granted both.
        rules.extend(self.writes().iter().map(|k| format!("~{k}")));
        rules.extend(["resetchannels", "&wg:*", "nocommands"].map(String::from));
        rules.extend(self.commands().iter().map(|c| format!("+{c}")));
        for function in self.functions() {
            rules.push(format!("+fcall|wg2_{function}"));
            rules.push(format!("+fcall_ro|wg2_{function}"));
        }
        rules
    }
}

impl fmt::Display for RedisRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RedisRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        RedisRole::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                format!("no Redis role {s:?}: the roles are producer, worker and operator")
            })
    }
}

/// What every role calls: enqueueing (jobs, flows, batches) and reading.
const PRODUCER: &[&str] = &[
    "version",
    // Counting a function's live workers forgets those that lapsed.
    "rollcall",
    "enqueue",
    "reserve",
    "link",
    "get",
    "watch",
    "outcomes",
    "output",
    "groups",
    "workers",
    "checkpoint_get",
    "flow_create",
    "flow_get",
    "batch_open",
    "batch_add",
    "batch_close",
    "batch_get",
    // Opening a batch puts it under the upkeep's watch; closing one whose jobs have all
    // ended fires its callbacks; a job after an ended job of another function is told at
    // once: what workers also do.
    "batches_due",
    "batch_fired",
    "batch_done",
    "resolve",
    "told",
];

/// What a worker adds: the job's life on a worker, and the queue's upkeep.
const WORKER: &[&str] = &[
    "lease",
    "heartbeat",
    "progress",
    "checkpoint",
    "complete",
    "fail",
    "release",
    "withdraw",
    "recheck",
    "adopt",
    "advertise",
    "deploy_collectable",
    "deploy_doom",
    "deploy_bury",
    "deploy_forget",
    "deploy_pin",
    "deploy_unpin",
    "schedule_due",
    "schedule_advance",
    "schedule_failed",
    "schedule_rewind",
    "schedule_forget",
    "flows_due",
    "flow_forget",
];

/// What an operator adds: acting on jobs and functions, deploys and schedules.
const OPERATOR: &[&str] = &[
    "cancel",
    "retry",
    "priority",
    "tag",
    "configure",
    "configure_group",
    "deploy",
    "deploy_activate",
    "deploy_rollback",
    "deploy_remove",
    "deploy_begin",
    "deploy_pin",
    "deploy_unpin",
    "deploy_forget",
    "deploy_collectable",
    "deploy_doom",
    "deploy_bury",
    "schedule_set",
    "schedule_pause",
    "schedule_remove",
    "schedule_forget",
    "reseal",
];

/// The plain commands every role uses: the connection's own (`HELLO`, `CLIENT SETNAME`,
/// `PING`, `INFO` for the eviction warning, `ROLE` and `WAIT` for replicas, the cluster's
/// slot map), pub/sub, the reads of records and directories, and the commands the library's
/// functions run: Redis checks a function's commands against its caller's rules, so these
/// are allowed as such too, and the write key patterns ([`RedisRole::writes`]) are what
/// keeps a role's writes to its own keys.
const COMMON_COMMANDS: &[&str] = &[
    "hello",
    "auth",
    "ping",
    "echo",
    "select",
    "client|setname",
    "client|id",
    "info",
    "role",
    "time",
    "wait",
    "readonly",
    "cluster|slots",
    "cluster|shards",
    "cluster|nodes",
    "command|docs",
    "command|info",
    "subscribe",
    "psubscribe",
    "unsubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "publish",
    // Reads.
    "exists",
    "get",
    "hget",
    "hgetall",
    "hmget",
    "hkeys",
    "hvals",
    "hexists",
    "hstrlen",
    "hscan",
    "lrange",
    "smembers",
    "sismember",
    "zrange",
    "zrangebylex",
    "zrangebyscore",
    "zlexcount",
    "zcard",
    "zscore",
    "pttl",
    // The library's writes.
    "set",
    "del",
    "incr",
    "incrby",
    "hset",
    "hsetnx",
    "hdel",
    "hincrby",
    "hincrbyfloat",
    "zadd",
    "zrem",
    "zremrangebyscore",
    "zremrangebylex",
    "zremrangebyrank",
    "rpush",
    "pexpire",
    "sadd",
];

/// A worker's plain commands besides those.
const WORKER_COMMANDS: &[&str] = &[];

/// An operator's: deploys write their chunks; the audit log.
const OPERATOR_COMMANDS: &[&str] = &["xadd", "xrevrange"];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every library function is given to some role on purpose, and no role names one the
    /// library does not have.
    #[test]
    fn every_library_function_has_a_role() {
        let library: Vec<String> = crate::scripts::function_names();
        for name in &library {
            let name = name.strip_prefix("wg2_").unwrap_or(name);
            assert!(
                RedisRole::ALL.iter().any(|r| r.functions().contains(&name)),
                "{name} is given to no Redis role (crates/client/src/acl.rs)"
            );
        }
        for role in RedisRole::ALL {
            for function in role.functions() {
                assert!(
                    library.contains(&format!("wg2_{function}")),
                    "{role} names {function}, which the library does not have"
                );
            }
        }
    }

    #[test]
    fn a_producer_may_neither_lease_nor_deploy_nor_load() {
        let rules = RedisRole::Producer.rules();
        for denied in [
            "+fcall|wg2_lease",
            "+fcall|wg2_deploy",
            "+function",
            "+xadd",
            "~wg:{deploy}:*",
            "~wg:*",
        ] {
            assert!(!rules.iter().any(|r| r == denied), "{denied}");
        }
        assert!(rules.contains(&"+fcall|wg2_enqueue".to_string()));
        assert_eq!("worker".parse::<RedisRole>(), Ok(RedisRole::Worker));
    }
}
