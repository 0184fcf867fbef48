//! One connection type for a single Redis server, a replicated set behind Redis Sentinel,
//! and Redis Cluster.
//!
//! A `redis://` URL decides nothing: [`connect`] asks the server (`INFO cluster`) and, when
//! it is part of a cluster, uses it as the seed of a cluster connection that routes each
//! script to the node owning its keys' slot. Pub/sub always uses a plain connection to the
//! seed node: in a cluster, `PUBLISH` reaches the subscribers of every node. A
//! `redis+sentinel://` URL names sentinels: commands and pub/sub go to the primary they
//! name, and follow it when it moves ([`crate::sentinel`]).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::sentinel::{Sentinel, SentinelConnection, SentinelUrl};
use super::{QueueError, Result};

/// A connection that reconnects by itself, to one server, to the primary of a replicated
/// set, or to a cluster.
#[derive(Clone)]
pub enum Connection {
    /// A single server (or a replica set's primary, named in the URL).
    Single(ConnectionManager),
    /// The primary that Redis Sentinel names, followed when it moves.
    Sentinel(SentinelConnection),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

/// Where pub/sub connections go: the server (or a cluster's seed node), or the primary a
/// sentinel names at the time.
#[derive(Clone)]
pub enum Endpoint {
    /// One server, or any node of a cluster.
    Direct(Box<redis::Client>),
    /// The primary of a replicated set, as its sentinels name it.
    Sentinel(Arc<Sentinel>),
}

impl Endpoint {
    /// A new pub/sub connection to the endpoint.
    pub async fn pubsub(&self) -> redis::RedisResult<redis::aio::PubSub> {
        let client = match self {
            Endpoint::Direct(client) => (**client).clone(),
            Endpoint::Sentinel(sentinel) => sentinel.primary_client(),
        };
        client.get_async_pubsub().await
    }

    /// For a sentinel's primary: changes each time the primary moves (a pub/sub connection
    /// to the old one should be made again). `None` for a server that does not move.
    pub fn moves(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            Endpoint::Direct(_) => None,
            Endpoint::Sentinel(sentinel) => Some(sentinel.moves()),
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
            Connection::Sentinel(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Sentinel(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

/// How long connecting may take before Redis counts as unreachable.
pub(crate) const CONNECT_TIMEOUT: Duration =
    Duration::from_millis(wasmgear_proto::limits::CONNECT_TIMEOUT_MS);

/// How long one command may wait for its reply (the `redis` crate's default is 500 ms).
///
/// Chosen for the biggest replies wasmgear asks for: a lease of a worker's free slots with
/// their inputs, or a job's output for `status` and `wait` (16 MiB by default), which take
/// well under a second on a local network but several on a slow link or a busy server. A
/// command that times out is not lost work: `enqueue` and `lease` carry a call id and are
/// sent again ([`retrying`]), heartbeats are retried, and a worker that cannot renew a lease
/// stops the job by its own clock before the lease runs out.
pub const RESPONSE_TIMEOUT: Duration =
    Duration::from_millis(wasmgear_proto::limits::RESPONSE_TIMEOUT_MS);

/// How often a call that failed in a way that may pass is sent again by [`retrying`].
const RETRIES: usize = 6;

/// Invokes a script that is safe to send twice (it carries a call id), sending it again
/// while it fails in a way that may pass (see [`retrying`]).
pub(crate) async fn invoke_retrying<T: redis::FromRedisValue>(
    what: &str,
    conn: &Connection,
    call: &super::scripts::FunctionCall,
) -> redis::RedisResult<T> {
    retrying(what, || {
        let mut conn = conn.clone();
        async move { call.invoke_async(&mut conn).await }
    })
    .await
}

/// Whether a failed command may succeed when sent again: the connection dropped or timed
/// out, or the server is loading its data or the cluster is changing. Not an error reply
/// of a script, nor a refused password.
pub(crate) fn is_transient(error: &redis::RedisError) -> bool {
    use redis::RetryMethod;
    !matches!(error.retry_method(), RetryMethod::NoRetry)
        && !matches!(
            error.kind(),
            redis::ErrorKind::AuthenticationFailed | redis::ErrorKind::Parse
        )
}

/// Runs `call` until it succeeds, fails for good, or has failed [`RETRIES`] times in a way
/// that may pass ([`is_transient`]), waiting 50 ms, then about twice as long each time (with
/// jitter, at most 2 s). Only for calls that are safe to send twice (they carry a call id,
/// or change nothing).
pub(crate) async fn retrying<T, F, Fut>(what: &str, call: F) -> redis::RedisResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<T>>,
{
    use backon::{ExponentialBuilder, Retryable};
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(RETRIES)
        .with_jitter();
    call.retry(backoff)
        .when(is_transient)
        .notify(|error, wait| tracing::warn!(%error, ?wait, "{what} failed; sending it again"))
        .await
}

/// Connects to the Redis at `url`: returns where pub/sub connections go and a connection
/// for commands, cluster-aware when the server is part of a cluster, following the primary
/// when the URL names sentinels (`redis+sentinel://`).
pub async fn connect(url: &str) -> Result<(Endpoint, Connection)> {
    let shown = redact(url);
    if let Some(parsed) = SentinelUrl::parse(url) {
        let parsed = parsed.map_err(|reason| QueueError::BadSentinelUrl {
            url: shown.clone(),
            reason,
        })?;
        return connect_sentinel(parsed, shown).await;
    }
    let client = redis::Client::open(url).map_err(|source| QueueError::BadUrl {
        url: shown.clone(),
        source,
    })?;
    let unreachable = |reason: String| QueueError::Unreachable {
        url: shown.clone(),
        reason,
    };
    let probe = async {
        let mut probe = client.get_multiplexed_async_connection().await?;
        redis::cmd("INFO")
            .arg("cluster")
            .query_async::<String>(&mut probe)
            .await
    };
    let info = match tokio::time::timeout(CONNECT_TIMEOUT, probe).await {
        Err(_) => return Err(unreachable(format!("no answer within {CONNECT_TIMEOUT:?}"))),
        Ok(Err(e)) => return Err(unreachable(describe(&e))),
        Ok(Ok(info)) => info,
    };
    if !info.contains("cluster_enabled:") {
        return Err(unreachable(
            "it answered, but not like Redis (no cluster section in INFO)".into(),
        ));
    }
    let mut connection = if info.lines().any(|line| line.trim() == "cluster_enabled:1") {
        let cluster = redis::cluster::ClusterClient::builder(vec![url])
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .build()?
            .get_async_connection()
            .await
            .map_err(|e| unreachable(describe(&e)))?;
        Connection::Cluster(cluster)
    } else {
        Connection::Single(
            client
                .get_connection_manager_with_config(
                    redis::aio::ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(CONNECT_TIMEOUT))
                        .set_response_timeout(Some(RESPONSE_TIMEOUT)),
                )
                .await
                .map_err(|e| unreachable(describe(&e)))?,
        )
    };
    load_library(&mut connection, &shown).await?;
    Ok((Endpoint::Direct(Box::new(client)), connection))
}

/// Connects to the primary that the sentinels of `url` name (see [`connect`]).
async fn connect_sentinel(url: SentinelUrl, shown: String) -> Result<(Endpoint, Connection)> {
    let sentinel = Sentinel::connect(url)
        .await
        .map_err(|reason| QueueError::Unreachable {
            url: shown.clone(),
            reason: format!("no sentinel named a primary that answers as one: {reason}"),
        })?;
    let mut connection = Connection::Sentinel(SentinelConnection(sentinel.clone()));
    load_library(&mut connection, &shown).await?;
    Ok((Endpoint::Sentinel(sentinel), connection))
}

/// Loads this build's library where `connection` goes, unless it is there already.
async fn load_library(connection: &mut Connection, shown: &str) -> Result<()> {
    super::scripts::ensure_library(connection)
        .await
        .map_err(|e| {
            let text = e.to_string();
            let lower = text.to_lowercase();
            let hint = if lower.contains("unknown command") {
                " (Redis 7.0 or newer is needed: it has Functions)"
            } else if lower.contains("noperm") {
                " (the user needs the FUNCTION and FCALL commands)"
            } else {
                ""
            };
            QueueError::Library {
                url: shown.to_string(),
                reason: format!("{text}{hint}"),
            }
        })
}

/// Why connecting failed, in words that say what to do.
fn describe(e: &redis::RedisError) -> String {
    let text = e.to_string();
    if e.is_connection_refusal() {
        return format!("connection refused: is redis-server running there? ({text})");
    }
    if text.contains("NOAUTH") {
        return "the server wants a password: give it in the URL (redis://:PASSWORD@HOST:PORT or \
                redis://USER:PASSWORD@HOST:PORT)"
            .into();
    }
    let lower = text.to_lowercase();
    if text.contains("WRONGPASS") || lower.contains("password") || lower.contains("authentication")
    {
        return "the user or password in the URL was refused".into();
    }
    if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
        return format!(
            "{text} (is the host right, and is it Redis, with TLS if the URL says rediss://?)"
        );
    }
    // Parse errors run over several lines: the first says enough.
    let first = text.lines().next().unwrap_or_default();
    format!("it does not answer like Redis ({first}): is this the right port?")
}

/// `url` with its password (if any) replaced by `***`, for messages and logs. A user name
/// alone (`redis://TOKEN@host`) is hidden too: Redis takes it for a password.
pub fn redact(raw: &str) -> String {
    if SentinelUrl::parse(raw).is_some() {
        return redact_sentinel(raw);
    }
    let Ok(mut parsed) = url::Url::parse(raw) else {
        return raw.to_string();
    };
    let hidden = if parsed.password().is_some() {
        parsed.set_password(Some("***"))
    } else if !parsed.username().is_empty() {
        parsed.set_username("***")
    } else {
        return raw.to_string();
    };
    match hidden {
        Ok(()) => parsed.to_string(),
        // A URL whose user part cannot be set has none to hide, but say nothing of it.
        Err(()) => "(a Redis URL)".to_string(),
    }
}

/// A sentinel URL with the nodes' password and the sentinels' (`sentinel_password`)
/// replaced by `***` (its list of hosts is no URL the `url` crate reads).
fn redact_sentinel(raw: &str) -> String {
    let (scheme, rest) = raw.split_once("://").unwrap_or(("", raw));
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.split_once('/') {
        Some((authority, path)) => (authority, Some(path)),
        None => (before_query, None),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{hosts}"),
            None => format!("***@{hosts}"),
        },
        None => authority.to_string(),
    };
    let mut shown = format!("{scheme}://{authority}");
    if let Some(path) = path {
        shown.push('/');
        shown.push_str(path);
    }
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some(("sentinel_password", _)) => "sentinel_password=***".to_string(),
                _ => pair.to_string(),
            })
            .collect();
        shown.push('?');
        shown.push_str(&pairs.join("&"));
    }
    shown
}

/// Whether Redis answers `PING` on `conn` within `timeout`.
pub(crate) async fn ping(conn: &Connection, timeout: Duration) -> Result<()> {
    let mut conn = conn.clone();
    let ping = redis::cmd("PING");
    match tokio::time::timeout(timeout, ping.query_async::<String>(&mut conn)).await {
        Ok(answer) => answer.map(drop).map_err(QueueError::from),
        Err(_) => Err(QueueError::Redis(redis::RedisError::from(
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "Redis did not answer PING within {} ms",
                    timeout.as_millis()
                ),
            ),
        ))),
    }
}

/// A warning when a Redis server behind `conn` may evict keys (`maxmemory-policy` other
/// than `noeviction`, read from `INFO memory`, which managed services allow where `CONFIG`
/// is refused). `None` when every server answering says `noeviction`, or none answers.
pub(crate) async fn eviction_warning(conn: &Connection) -> Option<String> {
    let mut conn = conn.clone();
    let mut info = redis::cmd("INFO");
    info.arg("memory");
    let answer = tokio::time::timeout(CONNECT_TIMEOUT, info.query_async::<Value>(&mut conn))
        .await
        .ok()?
        .ok()?;
    let mut texts = Vec::new();
    info_texts(&answer, &mut texts);
    let policies: Vec<String> = texts
        .iter()
        .filter_map(|text| info_field(text, "maxmemory_policy"))
        .filter(|policy| policy != "noeviction")
        .collect();
    let policy = policies.first()?;
    Some(format!(
        "Redis may evict keys: its maxmemory-policy is {policy}, and an evicted job is a lost \
         job. Set `maxmemory-policy noeviction` (redis.conf, or CONFIG SET) on every server \
         of this queue"
    ))
}

/// The text of every `INFO` answer in `value` (a Cluster connection answers with one per
/// node).
fn info_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::BulkString(bytes) => out.push(String::from_utf8_lossy(bytes).into_owned()),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => out.push(text.clone()),
        Value::Array(items) | Value::Set(items) => {
            items.iter().for_each(|item| info_texts(item, out));
        }
        Value::Map(pairs) => pairs.iter().for_each(|(_, item)| info_texts(item, out)),
        _ => {}
    }
}

/// The value of `field` in an `INFO` text (`field:value` lines).
fn info_field(text: &str, field: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(redact("redis://:s3cret@host:1/2"), "redis://:***@host:1/2");
        assert_eq!(
            redact("rediss://app:p@ss@host:1"),
            "rediss://app:***@host:1"
        );
        assert_eq!(redact("redis://token@host"), "redis://***@host");
        assert_eq!(redact("not a url"), "not a url");
        assert_eq!(
            redact("redis+sentinel://:pw@h1:1,h2:2/jobs?db=1&sentinel_password=x"),
            "redis+sentinel://:***@h1:1,h2:2/jobs?db=1&sentinel_password=***"
        );
        assert_eq!(
            redact("rediss+sentinel://app:pw@h1/jobs"),
            "rediss+sentinel://app:***@h1/jobs"
        );
        assert_eq!(
            redact("redis+sentinel://h1:1/jobs"),
            "redis+sentinel://h1:1/jobs"
        );
    }

    #[test]
    fn the_eviction_policy_is_read_from_every_node_answer() {
        use redis::Value;
        let node = |policy: &str| {
            Value::BulkString(
                format!("# Memory\r\nused_memory:1\r\nmaxmemory_policy:{policy}\r\n").into_bytes(),
            )
        };
        let mut texts = Vec::new();
        super::info_texts(&node("noeviction"), &mut texts);
        assert_eq!(
            super::info_field(&texts[0], "maxmemory_policy").as_deref(),
            Some("noeviction")
        );
        // A cluster answers per node.
        let cluster = Value::Map(vec![
            (Value::SimpleString("a:1".into()), node("noeviction")),
            (Value::SimpleString("b:2".into()), node("volatile-lru")),
        ]);
        let mut texts = Vec::new();
        super::info_texts(&cluster, &mut texts);
        let policies: Vec<_> = texts
            .iter()
            .filter_map(|t| super::info_field(t, "maxmemory_policy"))
            .collect();
        assert_eq!(policies, ["noeviction", "volatile-lru"]);
        assert_eq!(super::info_field("used_memory:1", "maxmemory_policy"), None);
    }
}
