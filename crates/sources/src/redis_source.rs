//! What the Redis-backed sources (GearMonkey, redis-work-queue, worqr, qless) share:
//! connecting to one Redis server ([`ConnectError`] says why not), their Lua scripts
//! ([`lua_scripts!`], one file each under `src/lua/PROTOCOL/`), and reading a script's
//! answer as a lease status or a completion.

use wasmgear_proto::LeaseStatus;

/// Why a source could not start.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Redis could not be reached, or the URL is bad.
    #[error(transparent)]
    Queue(#[from] wasmgear_client::QueueError),
    /// The URL names a Redis Cluster.
    #[error(
        "{url} is a Redis Cluster: {protocol}'s keys have no hash tag, so the keys of one \
         queue lie on different nodes; point the {protocol} source at one Redis server"
    )]
    Cluster {
        /// The URL, password hidden.
        url: String,
        /// The protocol.
        protocol: &'static str,
    },
    /// A server of a protocol other than Redis could not be reached.
    #[error("{what} cannot be reached ({error}): start it, or fix the address")]
    Unreachable {
        /// What was to be reached.
        what: String,
        /// Why not.
        error: String,
    },
}

/// Declares each script of a protocol as a `static NAME: LazyLock<redis::Script>`, its Lua
/// read from `src/lua/DIR/FILE` at build time, after the protocol's shared prelude
/// (`src/lua/DIR/PRELUDE`) when one is named with `with`.
macro_rules! lua_scripts {
    ($dir:literal with $prelude:literal: $($name:ident = $file:literal),+ $(,)?) => {
        $(
            static $name: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
                redis::Script::new(concat!(
                    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lua/", $dir, "/", $prelude)),
                    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lua/", $dir, "/", $file))
                ))
            });
        )+
    };
    ($dir:literal: $($name:ident = $file:literal),+ $(,)?) => {
        $(
            static $name: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
                redis::Script::new(include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"), "/src/lua/", $dir, "/", $file
                )))
            });
        )+
    };
}
pub(crate) use lua_scripts;

/// A renewal script's answer (1: the lease is still this worker's) as a lease status.
pub(crate) fn lease_status(held: i64) -> LeaseStatus {
    match held {
        1 => LeaseStatus::Held,
        _ => LeaseStatus::Lost,
    }
}

/// Connects to the Redis at `url` for a protocol whose keys carry no hash tag: a Redis
/// Cluster is refused, as one queue's keys would lie on different nodes.
pub(crate) async fn connect_standalone(
    url: &str,
    protocol: &'static str,
) -> Result<
    (
        wasmgear_client::connection::Endpoint,
        wasmgear_client::connection::Connection,
    ),
    ConnectError,
> {
    use wasmgear_client::connection::{self, Connection};
    let (client, conn) = connection::connect(url).await?;
    if matches!(conn, Connection::Cluster(_)) {
        return Err(ConnectError::Cluster {
            url: connection::redact(url),
            protocol,
        });
    }
    Ok((client, conn))
}
