//! The Lua scripts, loaded once and invoked by SHA (redis-rs re-sends a script after NOSCRIPT).

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!(concat!("lua/", $file))));
    };
}

script!(ENQUEUE, "enqueue.lua");
script!(LEASE, "lease.lua");
script!(HEARTBEAT, "heartbeat.lua");
script!(PROGRESS, "progress.lua");
script!(COMPLETE, "complete.lua");
script!(FAIL, "fail.lua");
script!(RELEASE, "release.lua");
script!(CANCEL, "cancel.lua");
script!(ADVERTISE, "advertise.lua");
script!(ROLLCALL, "rollcall.lua");
script!(WORKERS, "workers.lua");
