//! The Redis Functions library every state change runs in: `wasmgear_v2`, loaded once per
//! server (every primary of a cluster) with `FUNCTION LOAD` and called with `FCALL`.
//!
//! The library is assembled here from the Lua files in `lua/`: the shared constants
//! ([`wasmgear_proto::limits::lua_constants`]), `lib.lua` (the key names and the helpers,
//! built once when the library loads), then each operation's file as the body of a
//! registered function `wg2_NAME(KEYS, ARGV)`. A function on one function's queue declares
//! here the keys it may touch, in the order a caller passes them; its body starts with
//! `begin(KEYS, ARGV, KEYS_OF.NAME)` (`KEYS_OF.NAME` names its keys: `K.jobs`...), and it is
//! called through [`on_function`].
//!
//! The `2` in the names is the version of the calling convention (keys, arguments and
//! replies, PROTOCOL.md). A change that breaks it gets new names (`wasmgear_v3`, `wg3_`), so
//! workers of both versions can share a server while a fleet is upgraded; within a version,
//! the library loaded last wins, and `wg2_version` says which one is loaded (the SHA-1 of
//! its text).

use std::sync::LazyLock;

use redis::{Cmd, FromRedisValue, ToRedisArgs};
use wasmgear_proto::keys::QueueKey::{self, *};

use super::connection::Connection;
use wasmgear_proto::FunctionName;
use wasmgear_proto::keys::FunctionKeys;
use wasmgear_proto::sync::Locked;

/// One operation of the library.
pub(crate) struct Function {
    /// The operation's name: its Lua file, and `wg2_NAME` registered.
    file: &'static str,
    /// The Lua file whose text is the function's body.
    body: &'static str,
    /// For a function on one function's queue, the keys it declares (it may touch no
    /// other), in the order the caller passes them; `None` for the others, whose callers
    /// pass the keys their headers name.
    queue_keys: Option<&'static [QueueKey]>,
    /// Whether it only reads (registered `no-writes`, called with `FCALL_RO`).
    read_only: bool,
}

macro_rules! functions {
    ($($name:ident = $file:literal, $keys:expr, $read_only:expr;)*) => {
        $(
            pub(crate) static $name: Function = Function {
                file: $file,
                body: include_str!(concat!("lua/", $file, ".lua")),
                queue_keys: $keys,
                read_only: $read_only,
            };
        )*
        /// Every function of the library, in the order they are registered.
        static ALL: &[&Function] = &[$(&$name),*];
    };
}

/// What ending a job may touch (`finish`: the sets it leaves, its expiry, counts, failure
/// group, uniq key; its dependents made ready, scheduled or cancelled in turn; statistics
/// and events).
const ENDS: &[QueueKey] = &[
    Jobs,
    Logs,
    Ready,
    Scheduled,
    Leased,
    Waiting,
    Expires,
    Uniq,
    Failed,
    Counts,
    Stats,
    Config,
    Events,
    Work,
    Groups,
    GroupReady,
    GroupRunning,
    GroupConfig,
    Dedup,
    DedupExp,
    Expiring,
];
/// `lease` and `complete`, which lease: housekeeping, reclaim, leasing, calls sent again.
const LEASING: &[QueueKey] = &[
    Jobs,
    Input,
    Output,
    Logs,
    Ready,
    Scheduled,
    Leased,
    Waiting,
    Expires,
    Uniq,
    Tagged,
    Failed,
    Counts,
    Stats,
    Config,
    Rate,
    Events,
    Work,
    Calls,
    CallsExp,
    Idle,
    IdleArgs,
    Ticks,
    Groups,
    GroupReady,
    GroupRunning,
    GroupConfig,
    GroupRate,
    GroupWait,
    Dedup,
    DedupExp,
    Expiring,
    Checkpoints,
];

functions! {
    ENQUEUE = "enqueue", Some(&[
        Seq, Jobs, Input, Output, Logs, Ready, Scheduled, Leased, Waiting, Expires, Uniq, Tagged,
        Failed, Counts, Stats, Config, Rate, Events, Work, Calls, CallsExp, Idle, IdleArgs, Ticks,
        Reserved, Groups, GroupReady, GroupRunning, GroupConfig, GroupRate, GroupWait,
        Dedup, DedupExp, Expiring, Checkpoints,
    ]), false;
    RESERVE = "reserve", Some(&[Seq, Stats, Events, Reserved]), false;
    LEASE = "lease", Some(LEASING), false;
    HEARTBEAT = "heartbeat", Some(&[Jobs, Leased, Stats, Events]), false;
    PROGRESS = "progress", Some(&[Jobs, Stats, Config, Events, Work]), false;
    CHECKPOINT = "checkpoint", Some(&[Jobs, Checkpoints, Stats, Config, Events, Work]), false;
    CHECKPOINT_GET = "checkpoint_get", Some(&[Jobs, Checkpoints, Stats, Events]), true;
    COMPLETE = "complete", Some(LEASING), false;
    FAIL = "fail", Some(ENDS), false;
    RELEASE = "release", Some(ENDS), false;
    CANCEL = "cancel", Some(&[
        Jobs, Input, Output, Logs, Ready, Scheduled, Leased, Waiting, Expires, Uniq, Tagged,
        Failed, Counts, Stats, Config, Events, Work, Ticks, Groups, GroupReady, GroupRunning,
        GroupConfig, Dedup, DedupExp, Expiring, Checkpoints,
    ]), false;
    WITHDRAW = "withdraw", Some(&[Stats, Events, Idle, IdleArgs]), false;
    LINK = "link", Some(&[Jobs, Stats, Events, Reserved]), false;
    RESOLVE = "resolve", Some(ENDS), false;
    TOLD = "told", Some(&[Jobs, Expires, Stats, Events]), false;
    RECHECK = "recheck", Some(&[Jobs, Waiting, Stats, Events]), false;
    TAG = "tag", Some(&[Jobs, Tagged, Stats, Events]), false;
    ADOPT = "adopt", Some(&[Jobs, Stats, Events]), false;
    RETRY = "retry", Some(&[
        Jobs, Ready, Scheduled, Waiting, Expires, Uniq, Failed, Counts, Stats, Config, Events,
        Work, Groups, GroupReady, GroupRunning, GroupConfig, Checkpoints,
    ]), false;
    CONFIGURE = "configure", Some(&[
        Stats, Config, Events, Work, Jobs, Leased, GroupRunning, GroupConfig,
    ]), false;
    CONFIGURE_GROUP = "configure_group", Some(&[
        Ready, Stats, Config, Events, Work, Groups, GroupReady, GroupRunning, GroupConfig, Jobs,
        Leased,
    ]), false;
    GROUPS = "groups", Some(&[
        Ready, Stats, Events, Groups, GroupReady, GroupRunning, GroupConfig, GroupWait, Jobs,
        Leased,
    ]), true;
    PRIORITY = "priority", Some(&[Jobs, Ready, Stats, Events, Groups, GroupReady]), false;
    GET = "get", Some(&[Jobs, Output, Stats, Events]), true;
    WATCH = "watch", Some(&[Jobs, Output, Stats, Events]), false;
    OUTCOMES = "outcomes", Some(&[Jobs, Output, Stats, Events]), true;
    OUTPUT = "output", Some(&[Output, Stats, Events]), true;
    ADVERTISE = "advertise", None, false;
    ROLLCALL = "rollcall", None, false;
    WORKERS = "workers", None, true;
    DEPLOY = "deploy", None, false;
    DEPLOY_ACTIVATE = "deploy_activate", None, false;
    DEPLOY_ROLLBACK = "deploy_rollback", None, false;
    DEPLOY_FORGET = "deploy_forget", None, false;
    DEPLOY_REMOVE = "deploy_remove", None, false;
    DEPLOY_BEGIN = "deploy_begin", None, false;
    DEPLOY_PIN = "deploy_pin", None, false;
    DEPLOY_UNPIN = "deploy_unpin", None, false;
    DEPLOY_COLLECTABLE = "deploy_collectable", None, true;
    DEPLOY_DOOM = "deploy_doom", None, false;
    DEPLOY_BURY = "deploy_bury", None, false;
    RESEAL = "reseal", None, false;
    SCHEDULE_SET = "schedule_set", None, false;
    SCHEDULE_PAUSE = "schedule_pause", None, false;
    SCHEDULE_REMOVE = "schedule_remove", None, false;
    SCHEDULE_DUE = "schedule_due", None, true;
    SCHEDULE_ADVANCE = "schedule_advance", None, false;
    SCHEDULE_FAILED = "schedule_failed", None, false;
    SCHEDULE_REWIND = "schedule_rewind", None, false;
    SCHEDULE_FORGET = "schedule_forget", None, false;
    FLOW_CREATE = "flow_create", None, false;
    FLOW_GET = "flow_get", None, true;
    FLOWS_DUE = "flows_due", None, false;
    FLOW_FORGET = "flow_forget", None, false;
    BATCH_OPEN = "batch_open", None, false;
    BATCH_ADD = "batch_add", None, false;
    BATCH_CLOSE = "batch_close", None, false;
    BATCH_DONE = "batch_done", None, false;
    BATCH_FIRED = "batch_fired", None, false;
    BATCH_GET = "batch_get", None, true;
    BATCHES_DUE = "batches_due", None, false;
}

/// The library's name in `FUNCTION LIST`.
const LIBRARY_NAME: &str = "wasmgear_v2";
/// The prefix of its functions' names.
const PREFIX: &str = "wg2_";
/// The function that answers the loaded library's SHA-1.
const VERSION_FUNCTION: &str = "wg2_version";

/// The whole library, ending with its version function, and the SHA-1 of the text before it
/// (what the version function answers).
static SOURCE: LazyLock<(String, String)> = LazyLock::new(|| {
    let mut lua = format!("#!lua name={LIBRARY_NAME}\n");
    lua.push_str(&wasmgear_proto::limits::lua_constants());
    lua.push_str(include_str!("lua/lib.lua"));
    // Each function's key names, in one table (Lua allows a chunk at most 200 locals).
    lua.push_str("\nlocal KEYS_OF = {}\n");
    for f in ALL {
        // A function on one function's queue starts with begin() and, once its body has
        // returned, writes what the call gathered (end_call: statistics, events).
        let (names, begin, end) = match f.queue_keys {
            Some(keys) => {
                // K by name, built by one table constructor (sized at once).
                let fields: Vec<String> = keys
                    .iter()
                    .enumerate()
                    .map(|(i, k)| format!("{} = keys[{}]", k.lua_name(), i + 1))
                    .collect();
                (
                    format!(
                        "function KEYS_OF.{}(keys) return {{ {} }} end\n",
                        f.file,
                        fields.join(", ")
                    ),
                    format!(
                        "begin(KEYS, ARGV, KEYS_OF.{})\nlocal reply = (function()\n",
                        f.file
                    ),
                    "\nend)()\nend_call()\nreturn reply\n",
                )
            }
            None => (String::new(), String::new(), ""),
        };
        let flags = if f.read_only {
            ", flags = { 'no-writes' }"
        } else {
            ""
        };
        lua.push_str(&format!(
            "\n{names}redis.register_function{{ function_name = '{PREFIX}{}', callback = function(KEYS, ARGV)\n{begin}{}{end}\nend{flags} }}\n",
            f.file, f.body
        ));
    }
    let sha = redis::Script::new(&lua).get_hash().to_string();
    lua.push_str(&format!(
        "\nredis.register_function{{ function_name = '{VERSION_FUNCTION}', callback = function() return '{sha}' end, flags = {{ 'no-writes' }} }}\n"
    ));
    (lua, sha)
});

/// The whole library, as `FUNCTION LOAD` takes it: what another client loads.
pub fn library() -> &'static str {
    &SOURCE.0
}

/// The keys a call of the library's function `name` (`enqueue`, `lease`...) on `function`'s
/// queue takes, in order: what another client passes (`None` for a name that is not a
/// function on one function's queue).
pub fn queue_keys(name: &str, function: &FunctionName) -> Option<Vec<String>> {
    let f = ALL.iter().find(|f| f.file == name)?;
    let keys = FunctionKeys::new(function);
    Some(f.queue_keys?.iter().map(|&k| keys.get(k)).collect())
}

/// What a client in another language needs besides the library's text, as JSON: the
/// library's name, its functions' prefix, the SHA-1 `wg2_version` answers, how a queue key is
/// named (`wg:{F}:` then the key's suffix), and for each function whether it only reads and
/// the keys it takes, in order, by suffix (`null` for those taking the keys their headers
/// name), and the limits a client checks before it calls ([`wasmgear_proto::limits::for_clients`]).
/// The Python and Node clients ship it beside the library (`clients/*/protocol/`),
/// checked against this build by a test.
pub fn manifest() -> String {
    let functions: serde_json::Map<String, serde_json::Value> = ALL
        .iter()
        .map(|f| {
            let keys = f
                .queue_keys
                .map(|keys| keys.iter().map(|k| k.suffix()).collect::<Vec<_>>());
            (
                f.file.to_string(),
                serde_json::json!({ "keys": keys, "read_only": f.read_only }),
            )
        })
        .collect();
    let manifest = serde_json::json!({
        "library": LIBRARY_NAME,
        "prefix": PREFIX,
        "version": library_version(),
        "key_prefix": "wg:{FUNCTION}:",
        "functions_key": wasmgear_proto::keys::functions(),
        "worker_list_keys": [
            wasmgear_proto::keys::WorkerListKeys::expiry(),
            wasmgear_proto::keys::WorkerListKeys::info(),
        ],
        "functions": functions,
        "limits": wasmgear_proto::limits::for_clients()
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.into()))
            .collect::<serde_json::Map<String, serde_json::Value>>(),
    });
    let mut text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    text.push('\n');
    text
}

/// The SHA-1 of this build's library (what `wg2_version` answers once it is loaded).
fn library_version() -> &'static str {
    &SOURCE.1
}

/// The name every function of the library is registered under (`wg2_enqueue`...), its
/// version function last.
#[cfg(test)]
pub(crate) fn function_names() -> Vec<String> {
    let mut names: Vec<String> = ALL.iter().map(|f| format!("{PREFIX}{}", f.file)).collect();
    names.push(VERSION_FUNCTION.to_string());
    names
}

/// Loads this build's library (replacing one of the same name) on the server, or on every
/// primary of a cluster.
pub(crate) async fn load_library(conn: &mut Connection) -> redis::RedisResult<()> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(library())
        .query_async::<redis::Value>(conn)
        .await
        .map(drop)
        .map_err(may_not_load)
}

/// A refusal to load the library, said plainly: a least-privilege user (`wasmgear acl`)
/// may not, and this build's library is not there yet.
fn may_not_load(error: redis::RedisError) -> redis::RedisError {
    if !error.to_string().to_ascii_uppercase().contains("NOPERM") {
        return error;
    }
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "the queue's library (this build's version) is not loaded on this Redis, and this \
         Redis user may not load it (FUNCTION LOAD)",
        "run any wasmgear command once as a user who may (the default user, or the admin \
         who made the users with `wasmgear acl`), or start a worker as one"
            .to_string(),
    ))
}

/// Loads the library unless this build's is loaded already: once per connection. On a
/// cluster every primary is asked (a call without keys would reach one node only, and the
/// others may run an older library) and the library is loaded on each one whose version
/// differs.
pub(crate) async fn ensure_library(conn: &mut Connection) -> redis::RedisResult<()> {
    let Connection::Cluster(cluster) = conn else {
        let loaded: redis::RedisResult<String> = version_call().query_async(conn).await;
        return match loaded {
            Ok(sha) if sha == library_version() => Ok(()),
            Ok(_) => load_library(conn).await,
            Err(e) if is_missing_function(&e) => load_library(conn).await,
            Err(e) => Err(e),
        };
    };
    use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
    let answers = cluster
        .route_command(
            version_call(),
            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
        )
        .await?;
    for address in stale_primaries(answers)? {
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host.to_string(), port.parse().ok()?)))
            .ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a cluster primary has an address that does not read as HOST:PORT",
                    address.clone(),
                ))
            })?;
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(library());
        cluster
            .route_command(
                load,
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port }),
            )
            .await
            .map_err(may_not_load)?;
    }
    Ok(())
}

/// `FCALL wg2_version 0`: the loaded library's version.
fn version_call() -> Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(VERSION_FUNCTION).arg(0);
    cmd
}

/// The addresses (`HOST:PORT`) of the primaries whose answer to [`version_call`] (`answers`:
/// address → answer, as a cluster connection gives it) is not this build's version, or who
/// have no library loaded. Fails on any other error a primary answered.
fn stale_primaries(answers: redis::Value) -> redis::RedisResult<Vec<String>> {
    let redis::Value::Map(answers) = answers else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the primaries' library versions did not come as one answer per node",
        )));
    };
    let mut stale = Vec::new();
    for (address, answer) in answers {
        let address: String = redis::from_redis_value(address)?;
        let current = match answer {
            redis::Value::ServerError(error) => {
                let error = redis::RedisError::from(error);
                if !is_missing_function(&error) {
                    return Err(error);
                }
                false
            }
            answer => redis::from_redis_value::<String>(answer)? == library_version(),
        };
        if !current {
            stale.push(address);
        }
    }
    Ok(stale)
}

/// Whether `error` says the function called is not loaded there (a server restarted without
/// persistence, a node that joined the cluster after the library was loaded, a flush).
fn is_missing_function(error: &redis::RedisError) -> bool {
    error.to_string().contains("Function not found")
}

impl Function {
    /// A call of this function with `keys`; add its arguments.
    pub(crate) fn with_keys<T: ToRedisArgs>(&'static self, keys: &[T]) -> FunctionCall {
        let mut cmd = self.fcall(keys.len());
        for key in keys {
            cmd.arg(key);
        }
        FunctionCall { cmd }
    }

    /// `FCALL NAME NUMKEYS`, to which the keys and arguments are added.
    fn fcall(&self, keys: usize) -> Cmd {
        // A read-only function may run on a replica.
        let mut cmd = redis::cmd(if self.read_only { "FCALL_RO" } else { "FCALL" });
        cmd.arg(format!("{PREFIX}{}", self.file)).arg(keys);
        cmd
    }
}

/// A prepared `FCALL`: the function, its keys and its arguments.
pub(crate) struct FunctionCall {
    cmd: Cmd,
}

impl FunctionCall {
    /// Adds an argument.
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// Adds named option `name` with `value`.
    pub(crate) fn option<T: ToRedisArgs>(&mut self, name: &str, value: T) -> &mut Self {
        self.cmd.arg(name).arg(value);
        self
    }

    /// Sends the call; where the library is not loaded, loads it and sends the call again.
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut Connection,
    ) -> redis::RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(e) if is_missing_function(&e) => {
                load_library(conn).await?;
                self.cmd.query_async(conn).await
            }
            result => result,
        }
    }

    /// Sends the call and, on the same connection right after it, `WAIT replicas
    /// timeout_ms`: its reply and how many replicas confirmed the connection's writes.
    pub(crate) async fn invoke_waiting<T: FromRedisValue>(
        &self,
        conn: &mut Connection,
        replicas: u32,
        timeout_ms: u64,
    ) -> redis::RedisResult<(T, u32)> {
        let mut pipe = redis::pipe();
        pipe.add_command(self.cmd.clone())
            .cmd("WAIT")
            .arg(replicas)
            .arg(timeout_ms);
        match pipe.query_async(conn).await {
            Err(e) if is_missing_function(&e) => {
                load_library(conn).await?;
                pipe.query_async(conn).await
            }
            result => result,
        }
    }
}

/// Prepares a call of `function` (one of the functions on a queue) on the keys of queue
/// `name` it declares, with the name as its first argument; add the function's own
/// arguments after it.
pub(crate) fn on_function(function: &'static Function, name: &FunctionName) -> FunctionCall {
    let declared = function.queue_keys.unwrap_or_default();
    let mut cmd = function.fcall(declared.len());
    // Each key written into the command from one buffer (they are on every call's path).
    let mut key = FunctionKeys::new(name).get(QueueKey::Seq);
    let base = key.len() - QueueKey::Seq.suffix().len();
    for k in declared {
        key.truncate(base);
        key.push_str(k.suffix());
        cmd.arg(key.as_bytes());
    }
    cmd.arg(name.as_str());
    FunctionCall { cmd }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn the_library_registers_every_function_with_its_version() {
        let lua = super::library();
        assert!(lua.starts_with("#!lua name=wasmgear_v2\n"));
        for f in super::ALL {
            assert!(
                lua.contains(&format!("function_name = 'wg2_{}'", f.file)),
                "{}",
                f.file
            );
        }
        assert!(lua.contains(&format!("return '{}'", super::library_version())));
        assert_eq!(super::library_version().len(), 40);
    }

    /// The Python and Node clients ship this build's library and manifest: a change to a
    /// script without `WASMGEAR_BLESS=1 cargo test -p wasmgear-client` (which rewrites
    /// them) fails here, so no client runs a protocol that drifted from the worker's.
    #[test]
    fn the_clients_ship_this_build_s_protocol() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients");
        let bless = std::env::var_os("WASMGEAR_BLESS").is_some();
        for client in ["python/wasmgear/protocol", "node/protocol"] {
            let dir = root.join(client);
            for (file, text) in [
                ("wasmgear_v2.lua", super::library().to_string()),
                ("manifest.json", super::manifest()),
            ] {
                let path = dir.join(file);
                if bless {
                    std::fs::create_dir_all(&dir).unwrap();
                    std::fs::write(&path, &text).unwrap();
                }
                let shipped = std::fs::read_to_string(&path).unwrap_or_default();
                assert!(
                    shipped == text,
                    "{} is not this build's; run WASMGEAR_BLESS=1 cargo test -p wasmgear-client",
                    path.display()
                );
            }
        }
    }

    /// No helper of lib.lua is defined twice: a second `local function NAME` would hide the
    /// first from every function after it (two different `whole`s once did).
    #[test]
    fn lib_lua_defines_each_helper_once() {
        let mut seen = BTreeSet::new();
        for line in include_str!("lua/lib.lua").lines() {
            if let Some(name) = helper_name(line) {
                assert!(seen.insert(name.clone()), "lib.lua defines {name} twice");
            }
        }
    }

    /// The name of the helper a line of lib.lua starts to define: `local function NAME(`,
    /// or `function TABLE.NAME(` for the helpers kept in a table (`GROUP.join`).
    fn helper_name(line: &str) -> Option<String> {
        let rest = line
            .strip_prefix("local function ")
            .or_else(|| line.strip_prefix("function "))?;
        Some(rest.chars().take_while(|c| *c != '(').collect())
    }

    /// The `K.name` keys used in `text`, and the names of `helpers` it calls.
    fn uses(text: &str, helpers: &BTreeSet<String>) -> (BTreeSet<String>, BTreeSet<String>) {
        let word = |rest: &str| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        };
        let keys = text
            .match_indices("K.")
            .filter(|(at, _)| {
                !text[..*at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            })
            .map(|(at, _)| word(&text[at + 2..]))
            .collect();
        let calls = helpers
            .iter()
            .filter(|h| {
                text.match_indices(&format!("{h}(")).any(|(at, _)| {
                    !text[..at]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                })
            })
            .cloned()
            .collect();
        (keys, calls)
    }

    /// Every function declares every key its code may reach, through lib.lua's helpers
    /// too (a key it has not declared is nil in `K`: the call would fail), and its file's
    /// header names them in the order callers pass them.
    #[test]
    fn every_function_declares_the_keys_its_code_reaches() {
        let lib = include_str!("lua/lib.lua");
        // lib.lua's helpers: `local function NAME(` up to the `end` that closes it.
        let mut bodies = BTreeMap::new();
        let mut current: Option<(String, String)> = None;
        for line in lib.lines() {
            if let Some(name) = helper_name(line) {
                current = Some((name, String::new()));
            }
            if let Some((_, body)) = current.as_mut() {
                body.push_str(line);
                body.push('\n');
            }
            let closes = line == "end" || (helper_name(line).is_some() && line.ends_with(" end"));
            if closes && let Some((name, body)) = current.take() {
                bodies.insert(name, body);
            }
        }
        let helpers: BTreeSet<String> = bodies.keys().cloned().collect();
        assert!(
            helpers.contains("finish") && helpers.contains("lease_jobs"),
            "{helpers:?}"
        );
        let direct: BTreeMap<&String, _> =
            bodies.iter().map(|(n, b)| (n, uses(b, &helpers))).collect();
        let reach = |text: &str| {
            let (mut keys, calls) = uses(text, &helpers);
            let mut todo: Vec<String> = calls
                .into_iter()
                .chain(["begin".into(), "end_call".into()])
                .collect();
            let mut seen = BTreeSet::new();
            while let Some(helper) = todo.pop() {
                if seen.insert(helper.clone()) {
                    let (k, c) = &direct[&helper];
                    keys.extend(k.iter().cloned());
                    todo.extend(c.iter().cloned());
                }
            }
            keys
        };
        for f in super::ALL {
            let Some(declared) = f.queue_keys else {
                continue;
            };
            let names: Vec<&str> = declared.iter().map(|k| k.lua_name()).collect();
            let declared_set: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
            let reached = reach(f.body);
            let missing: Vec<&String> = reached.difference(&declared_set).collect();
            assert!(
                missing.is_empty(),
                "{} reaches {missing:?} without declaring them",
                f.file
            );
            let header = format!("-- KEYS: {}\n", names.join(" "));
            assert!(
                f.body.contains(&header),
                "{}.lua's header should say {header:?}",
                f.file
            );
        }
    }
}

/// Per function, the ids of calls (`enqueue`, `lease`, `complete`) whose replies came: the
/// next `enqueue` or `complete` on that function tells Redis to forget what it kept to
/// answer them if they were sent again, so that what is kept stays small however fast calls
/// come (otherwise each is kept for 10 minutes).
#[derive(Clone, Default)]
pub(crate) struct Answered(
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<FunctionName, Vec<String>>>>,
);

impl Answered {
    /// The most ids kept per function; older ones are forgotten by Redis when their time is up.
    const MAX: usize = 1024;

    /// Notes that call `id` on `function` was answered.
    pub(crate) fn note(&self, function: &FunctionName, id: String) {
        let mut answered = self.0.locked();
        let ids = answered.entry(function.clone()).or_default();
        if ids.len() >= Self::MAX {
            ids.remove(0);
        }
        ids.push(id);
    }

    /// The ids of `function`'s answered calls, to tell with the next call (taken: each is
    /// told once).
    pub(crate) fn take(&self, function: &FunctionName) -> Vec<String> {
        self.0.locked().remove(function).unwrap_or_default()
    }
}
