//! The Redis Functions library every state change runs in: `wasmgear_v1`, loaded once per
//! server (every primary of a cluster) with `FUNCTION LOAD` and called with `FCALL`.
//!
//! The library is assembled here from the Lua files in `lua/`: the shared constants
//! ([`wasmgear_proto::limits::lua_constants`]), `lib.lua` (the KEYS layout and the helpers,
//! built once when the library loads), then each operation's file as the body of a
//! registered function `wg1_NAME(KEYS, ARGV)`. Functions on one function's queue start with
//! `begin(KEYS, ARGV)` and are called through [`on_function`].
//!
//! The `1` in the names is the version of the calling convention (keys, arguments and replies,
//! PROTOCOL.md). A change that breaks it gets new names (`wasmgear_v2`, `wg2_`), so workers of
//! both versions can share a server while a fleet is upgraded; within a version, the library
//! loaded last wins, and `wg1_version` says which one is loaded (the SHA-1 of its text).

use std::sync::LazyLock;

use redis::{Cmd, FromRedisValue, ToRedisArgs};

use super::connection::Connection;
use super::keys::FunctionKeys;
use crate::job::FunctionName;

/// One operation of the library.
pub(crate) struct Function {
    /// The registered name, `wg1_...`.
    name: &'static str,
    /// The Lua file whose text is the function's body.
    body: &'static str,
    /// Whether the body works on one function's keys (starts with `begin`).
    on_queue: bool,
    /// Whether it only reads (registered `no-writes`).
    read_only: bool,
}

macro_rules! functions {
    ($($name:ident = $file:literal, $on_queue:expr, $read_only:expr;)*) => {
        $(
            pub(crate) static $name: Function = Function {
                name: concat!("wg1_", $file),
                body: include_str!(concat!("lua/", $file, ".lua")),
                on_queue: $on_queue,
                read_only: $read_only,
            };
        )*
        /// Every function of the library, in the order they are registered.
        static ALL: &[&Function] = &[$(&$name),*];
    };
}

functions! {
    ENQUEUE = "enqueue", true, false;
    LEASE = "lease", true, false;
    HEARTBEAT = "heartbeat", true, false;
    PROGRESS = "progress", true, false;
    COMPLETE = "complete", true, false;
    FAIL = "fail", true, false;
    RELEASE = "release", true, false;
    CANCEL = "cancel", true, false;
    LINK = "link", true, false;
    RESOLVE = "resolve", true, false;
    TOLD = "told", true, false;
    RECHECK = "recheck", true, false;
    TAG = "tag", true, false;
    RETRY = "retry", true, false;
    CONFIGURE = "configure", true, false;
    PRIORITY = "priority", true, false;
    GET = "get", true, true;
    ADVERTISE = "advertise", false, false;
    ROLLCALL = "rollcall", false, false;
    WORKERS = "workers", false, true;
}

/// The library's name in `FUNCTION LIST`.
const LIBRARY_NAME: &str = "wasmgear_v1";
/// The function that answers the loaded library's SHA-1.
const VERSION_FUNCTION: &str = "wg1_version";

/// The whole library, ending with its version function, and the SHA-1 of the text before it
/// (what the version function answers).
static SOURCE: LazyLock<(String, String)> = LazyLock::new(|| {
    let mut lua = format!("#!lua name={LIBRARY_NAME}\n");
    lua.push_str(&wasmgear_proto::limits::lua_constants());
    lua.push_str(include_str!("lua/lib.lua"));
    for f in ALL {
        // A function on one function's queue starts with begin() and, once its body has
        // returned, writes what the call gathered (end_call: statistics, events).
        let (begin, end) = if f.on_queue {
            (
                "begin(KEYS, ARGV)\nlocal reply = (function()\n",
                "\nend)()\nend_call()\nreturn reply\n",
            )
        } else {
            ("", "")
        };
        let flags = if f.read_only {
            ", flags = { 'no-writes' }"
        } else {
            ""
        };
        lua.push_str(&format!(
            "\nredis.register_function{{ function_name = '{}', callback = function(KEYS, ARGV)\n{begin}{}{end}\nend{flags} }}\n",
            f.name, f.body
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

/// The SHA-1 of this build's library (what `wg1_version` answers once it is loaded).
fn library_version() -> &'static str {
    &SOURCE.1
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
}

/// Loads the library unless this build's is loaded already: once per connection.
pub(crate) async fn ensure_library(conn: &mut Connection) -> redis::RedisResult<()> {
    let loaded: redis::RedisResult<String> = redis::cmd("FCALL")
        .arg(VERSION_FUNCTION)
        .arg(0)
        .query_async(conn)
        .await;
    match loaded {
        Ok(sha) if sha == library_version() => Ok(()),
        Ok(_) => load_library(conn).await,
        Err(e) if is_missing_function(&e) => load_library(conn).await,
        Err(e) => Err(e),
    }
}

/// Whether `error` says the function called is not loaded there (a server restarted without
/// persistence, a node that joined the cluster after the library was loaded, a flush).
fn is_missing_function(error: &redis::RedisError) -> bool {
    error.to_string().contains("Function not found")
}

impl Function {
    /// A call of this function; add its keys and arguments.
    pub(crate) fn call(&'static self) -> FunctionCall {
        FunctionCall {
            function: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// A call of this function with `key` as its first key.
    pub(crate) fn key<T: ToRedisArgs>(&'static self, key: T) -> FunctionCall {
        let mut call = self.call();
        call.key(key);
        call
    }
}

/// A prepared `FCALL`: the function, its keys and its arguments.
pub(crate) struct FunctionCall {
    function: &'static Function,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl FunctionCall {
    /// Adds a key (they go before the arguments, whenever they are added).
    pub(crate) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    /// Adds an argument.
    pub(crate) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    fn command(&self) -> Cmd {
        // A read-only function may run on a replica.
        let mut cmd = redis::cmd(if self.function.read_only {
            "FCALL_RO"
        } else {
            "FCALL"
        });
        cmd.arg(self.function.name).arg(self.keys.len());
        for key in &self.keys {
            cmd.arg(key);
        }
        for arg in &self.args {
            cmd.arg(arg);
        }
        cmd
    }

    /// Sends the call; where the library is not loaded, loads it and sends the call again.
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut Connection,
    ) -> redis::RedisResult<T> {
        let cmd = self.command();
        match cmd.query_async(conn).await {
            Err(e) if is_missing_function(&e) => {
                load_library(conn).await?;
                cmd.query_async(conn).await
            }
            result => result,
        }
    }
}

/// Prepares a call of `function` (one of the functions on a queue) on the keys of queue
/// `name`, with the name as its first argument; add the function's own arguments after it.
pub(crate) fn on_function(function: &'static Function, name: &FunctionName) -> FunctionCall {
    let mut call = function.call();
    for key in FunctionKeys::new(name).all() {
        call.key(key);
    }
    call.arg(name.as_str());
    call
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_library_registers_every_function_with_its_version() {
        let lua = super::library();
        assert!(lua.starts_with("#!lua name=wasmgear_v1\n"));
        for f in super::ALL {
            assert!(
                lua.contains(&format!("function_name = '{}'", f.name)),
                "{}",
                f.name
            );
        }
        assert!(lua.contains(&format!("return '{}'", super::library_version())));
        assert_eq!(super::library_version().len(), 40);
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
        let mut answered = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let ids = answered.entry(function.clone()).or_default();
        if ids.len() >= Self::MAX {
            ids.remove(0);
        }
        ids.push(id);
    }

    /// Adds to `call` how many ids of `function`'s answered calls follow, and the ids (taken:
    /// each is told once).
    pub(crate) fn tell(&self, function: &FunctionName, call: &mut FunctionCall) {
        let ids = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(function)
            .unwrap_or_default();
        call.arg(ids.len());
        for id in &ids {
            call.arg(id);
        }
    }
}
