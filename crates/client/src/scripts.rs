//! The Lua scripts, loaded once and invoked by SHA (redis-rs re-sends a script after NOSCRIPT).
//!
//! Scripts that work on one function's queue start with `lua/lib.lua` (the shared KEYS
//! layout and helpers) and are invoked through [`on_function`].

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};

use super::keys::FunctionKeys;
use crate::job::FunctionName;

/// A script on one function's keys, built from the shared constants
/// ([`wasmgear_proto::limits::lua_constants`]), `lua/lib.lua` and `lua/FILE`.
macro_rules! function_script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(&format!(
                "{}{}{}",
                wasmgear_proto::limits::lua_constants(),
                include_str!("lua/lib.lua"),
                include_str!(concat!("lua/", $file))
            ))
        });
    };
}

/// A script on other keys, on its own.
macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))));
    };
}

function_script!(ENQUEUE, "enqueue.lua");
function_script!(LEASE, "lease.lua");
function_script!(HEARTBEAT, "heartbeat.lua");
function_script!(PROGRESS, "progress.lua");
function_script!(COMPLETE, "complete.lua");
function_script!(FAIL, "fail.lua");
function_script!(RELEASE, "release.lua");
function_script!(CANCEL, "cancel.lua");
function_script!(LINK, "link.lua");
function_script!(RESOLVE, "resolve.lua");
function_script!(TOLD, "told.lua");
function_script!(RECHECK, "recheck.lua");
function_script!(TAG, "tag.lua");
function_script!(RETRY, "retry.lua");
function_script!(CONFIGURE, "configure.lua");
function_script!(PRIORITY, "priority.lua");
script!(ADVERTISE, "advertise.lua");
script!(ROLLCALL, "rollcall.lua");
script!(WORKERS, "workers.lua");

/// Prepares `script` (one of the function scripts) on `function`'s keys, with the function
/// name as its first argument; add the script's own arguments after it.
pub(crate) fn on_function<'a>(script: &'a Script, function: &FunctionName) -> ScriptInvocation<'a> {
    let mut call = script.prepare_invoke();
    for key in FunctionKeys::new(function).all() {
        call.key(key);
    }
    call.arg(function.as_str());
    call
}
