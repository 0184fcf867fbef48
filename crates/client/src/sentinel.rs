//! Redis Sentinel: a `redis+sentinel://` URL names the sentinels watching a replicated set
//! and the set's name (its service); the primary is asked of them, and asked again when it
//! moves.
//!
//! A [`Sentinel`] holds a reconnecting connection to the primary it was told of. It asks
//! the sentinels again when a command fails in a way that says the primary may have moved
//! (the connection dropped or timed out, `READONLY` from a primary demoted to a replica,
//! `MASTERDOWN`), when a sentinel announces `+switch-master` for the service, and when a
//! sentinel, asked every [`CHECK_EVERY`], names another primary. A primary is only taken
//! once it says so itself (`ROLE`): right after a failover a sentinel may still name the
//! old one. Each move bumps a generation that [`Sentinel::moves`] reports, so that the
//! pub/sub connection ([`crate::subscriber`]) subscribes again on the new primary.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::connection::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use wasmgear_proto::sync::Locked;

/// The port of a sentinel whose address names none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// How long one sentinel may take to answer before the next is asked.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the sentinel being listened to is asked which node is the primary (a safety
/// net for a `+switch-master` missed while the connection was down).
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// The shortest time between two lookups after failed commands (a failing primary makes
/// every command fail; one lookup answers them all).
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// How often the connection to a primary tries to reconnect before a command fails (and
/// the sentinels are asked where the primary is).
const RECONNECT_ATTEMPTS: usize = 2;

/// The first pause before listening to the next sentinel; it doubles up to 2 s.
const LISTEN_RETRY_MIN: Duration = Duration::from_millis(100);

/// What a `redis+sentinel://` (or `rediss+sentinel://`) URL says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelUrl {
    /// The sentinels, as host and port, in the order given.
    pub sentinels: Vec<(String, u16)>,
    /// The name the sentinels know the set by (`sentinel monitor NAME ...`).
    pub service: String,
    /// The database on the primary.
    pub db: i64,
    /// Whether the sentinels and the nodes are reached over TLS.
    pub tls: bool,
    /// The user part for the nodes, as written (`USER:PASSWORD`, percent-encoded).
    userinfo: Option<String>,
    /// The sentinels' own user and password (`sentinel_user`, `sentinel_password`).
    sentinel_user: Option<String>,
    sentinel_password: Option<String>,
}

impl SentinelUrl {
    /// The URL's parts; `None` when `url` is not a sentinel URL, an error that says what is
    /// wrong when it is one that does not parse.
    pub fn parse(url: &str) -> Option<Result<Self, String>> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
            (true, rest)
        } else {
            return None;
        };
        Some(Self::parse_rest(tls, rest))
    }

    fn parse_rest(tls: bool, rest: &str) -> Result<Self, String> {
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = before_query.split_once('/').unwrap_or((before_query, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo.to_string()), hosts),
            None => (None, authority),
        };
        let mut sentinels = Vec::new();
        for address in hosts.split(',') {
            sentinels.push(parse_address(address)?);
        }
        let service = path.trim_end_matches('/');
        if service.is_empty() || service.contains('/') {
            return Err(
                "the path must be the name the sentinels know the set by (/SERVICE, as in \
                 `sentinel monitor SERVICE HOST PORT QUORUM`)"
                    .into(),
            );
        }
        let mut parsed = SentinelUrl {
            sentinels,
            service: service.to_string(),
            db: 0,
            tls,
            userinfo,
            sentinel_user: None,
            sentinel_password: None,
        };
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match name.as_ref() {
                "db" => {
                    parsed.db = value
                        .parse()
                        .ok()
                        .filter(|db: &i64| *db >= 0)
                        .ok_or_else(|| format!("db must be a whole number >= 0, not {value:?}"))?
                }
                "sentinel_user" => parsed.sentinel_user = Some(value.into_owned()),
                "sentinel_password" => parsed.sentinel_password = Some(value.into_owned()),
                other => {
                    return Err(format!(
                        "unknown parameter {other:?} (known: db, sentinel_user, sentinel_password)"
                    ));
                }
            }
        }
        Ok(parsed)
    }

    /// A client for the data node at `host:port` (the primary), with the URL's user, TLS
    /// and database.
    fn node_client(&self, host: &str, port: u16) -> RedisResult<redis::Client> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let userinfo = self
            .userinfo
            .as_ref()
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        redis::Client::open(format!(
            "{scheme}://{userinfo}{}:{port}/{}",
            bracketed(host),
            self.db
        ))
    }

    /// A client for the sentinel at `host:port`, with the sentinels' own credentials.
    fn sentinel_client(&self, host: &str, port: u16) -> RedisResult<redis::Client> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let invalid = || {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a sentinel's address does not make a URL",
                format!("{host}:{port}"),
            ))
        };
        let mut url = url::Url::parse(&format!("{scheme}://{}:{port}", bracketed(host)))
            .map_err(|_| invalid())?;
        if let Some(user) = &self.sentinel_user {
            url.set_username(user).map_err(|()| invalid())?;
        }
        if let Some(password) = &self.sentinel_password {
            url.set_password(Some(password)).map_err(|()| invalid())?;
        }
        redis::Client::open(url.as_str())
    }
}

/// `HOST[:PORT]` or `[IPV6][:PORT]`.
fn parse_address(address: &str) -> Result<(String, u16), String> {
    let bad = || format!("{address:?} is not a sentinel address (HOST:PORT)");
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        (host, after.strip_prefix(':'))
    } else {
        match address.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (address, None),
        }
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port = match port {
        None => DEFAULT_SENTINEL_PORT,
        Some(port) => port.parse().ok().filter(|p| *p > 0).ok_or_else(bad)?,
    };
    Ok((host.to_string(), port))
}

/// A host as a URL writes it (an IPv6 address in brackets).
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// The primary in use.
struct Primary {
    generation: u64,
    address: (String, u16),
    client: redis::Client,
    manager: ConnectionManager,
}

/// A replicated set found through its sentinels (see the module's documentation).
pub struct Sentinel {
    url: SentinelUrl,
    primary: Mutex<Primary>,
    moved: watch::Sender<u64>,
    /// When the sentinels were last asked after a failed command.
    asked: tokio::sync::Mutex<Option<Instant>>,
}

impl Sentinel {
    /// Finds the primary through the sentinels of `url` and connects to it; then follows it
    /// (a task listens to the sentinels while the returned value lives). Fails, saying what
    /// each sentinel answered, when none names a primary that says it is one.
    pub(crate) async fn connect(url: SentinelUrl) -> Result<Arc<Sentinel>, String> {
        let (address, client, manager) = find_primary(&url).await?;
        tracing::debug!(primary = %format!("{}:{}", address.0, address.1), service = %url.service, "found the Redis primary through the sentinels");
        let sentinel = Arc::new(Sentinel {
            url: url.clone(),
            primary: Mutex::new(Primary {
                generation: 0,
                address,
                client,
                manager,
            }),
            moved: watch::channel(0).0,
            asked: tokio::sync::Mutex::new(None),
        });
        tokio::spawn(listen_to_sentinels(Arc::downgrade(&sentinel), url));
        Ok(sentinel)
    }

    fn current(&self) -> (u64, ConnectionManager) {
        let primary = self.primary.locked();
        (primary.generation, primary.manager.clone())
    }

    /// A client for the primary in use (for a pub/sub connection).
    pub(crate) fn primary_client(&self) -> redis::Client {
        self.primary.locked().client.clone()
    }

    /// The primary in use, as `HOST:PORT`.
    pub fn primary_address(&self) -> String {
        let primary = self.primary.locked();
        format!("{}:{}", bracketed(&primary.address.0), primary.address.1)
    }

    /// Changes (to a new generation) each time the primary in use moves.
    pub fn moves(&self) -> watch::Receiver<u64> {
        self.moved.subscribe()
    }

    /// Asks the sentinels for the primary again, after a command sent to generation `seen`
    /// failed (`forced`: a sentinel announced a move, or named another primary), and moves
    /// there if it is another node that says it is the primary. Does nothing when the
    /// primary moved since `seen`, nor (unless `forced`) within [`FOLLOW_EVERY`] of the
    /// last lookup.
    async fn follow(&self, seen: u64, forced: bool) {
        let mut asked = self.asked.lock().await;
        if self.current().0 != seen {
            return;
        }
        if !forced && asked.is_some_and(|at| at.elapsed() < FOLLOW_EVERY) {
            return;
        }
        *asked = Some(Instant::now());
        let found = match tokio::time::timeout(CONNECT_TIMEOUT, find_primary(&self.url)).await {
            Ok(Ok(found)) => found,
            Ok(Err(why)) => {
                tracing::debug!(%why, "no primary found through the sentinels yet");
                return;
            }
            Err(_) => return,
        };
        let (address, client, manager) = found;
        let mut loaded = crate::connection::Connection::Single(manager.clone());
        if let Err(error) = crate::scripts::ensure_library(&mut loaded).await {
            tracing::warn!(%error, "the new Redis primary refused wasmgear's library");
            return;
        }
        let generation = {
            let mut primary = self.primary.locked();
            if primary.address == address {
                return;
            }
            tracing::warn!(
                from = %format!("{}:{}", primary.address.0, primary.address.1),
                to = %format!("{}:{}", address.0, address.1),
                service = %self.url.service,
                "the Redis primary moved; following it"
            );
            primary.generation += 1;
            primary.address = address;
            primary.client = client;
            primary.manager = manager;
            primary.generation
        };
        self.moved.send_replace(generation);
    }

    /// Follows the primary if `result` (of a command sent to generation `seen`) says it may
    /// have moved.
    async fn after<T>(&self, seen: u64, result: &RedisResult<T>, values: &[&Value]) {
        let moved = match result {
            Err(error) => points_elsewhere(error),
            Ok(_) => values.iter().any(|value| says_not_primary(value)),
        };
        if moved {
            self.follow(seen, false).await;
        }
    }
}

/// Whether a failed command says the primary may have moved.
fn points_elsewhere(error: &redis::RedisError) -> bool {
    use redis::ServerErrorKind::{MasterDown, ReadOnly};
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(
            error.kind(),
            redis::ErrorKind::Server(ReadOnly | MasterDown)
        )
}

/// Whether a reply is `READONLY` or `MASTERDOWN` (a node that is no primary now).
fn says_not_primary(value: &Value) -> bool {
    use redis::ServerErrorKind::{MasterDown, ReadOnly};
    matches!(value, Value::ServerError(error) if matches!(error.kind(), Some(ReadOnly | MasterDown)))
}

/// Asks each sentinel in turn for the primary of the service; the first named that says it
/// is the primary is connected to.
async fn find_primary(
    url: &SentinelUrl,
) -> Result<((String, u16), redis::Client, ConnectionManager), String> {
    let mut problems = Vec::new();
    for (host, port) in &url.sentinels {
        let at = format!("sentinel {}:{port}", bracketed(host));
        match tokio::time::timeout(ASK_TIMEOUT, ask(url, host, *port)).await {
            Err(_) => problems.push(format!("{at}: no answer within {ASK_TIMEOUT:?}")),
            Ok(Err(error)) => problems.push(format!("{at}: {}", describe(&error))),
            Ok(Ok(None)) => problems.push(format!(
                "{at} does not know the service {:?} (is it the name in `sentinel monitor`?)",
                url.service
            )),
            Ok(Ok(Some(address))) => {
                let named = format!("{}:{}", bracketed(&address.0), address.1);
                match tokio::time::timeout(ASK_TIMEOUT, open_primary(url, &address)).await {
                    Ok(Ok((client, manager))) => return Ok((address, client, manager)),
                    Ok(Err(why)) => problems.push(format!("{at} names {named}, but {why}")),
                    Err(_) => problems.push(format!(
                        "{at} names {named}, which did not answer within {ASK_TIMEOUT:?}"
                    )),
                }
            }
        }
    }
    Err(problems.join("; "))
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME`: the primary one sentinel names, if it knows the
/// service.
async fn ask(url: &SentinelUrl, host: &str, port: u16) -> RedisResult<Option<(String, u16)>> {
    let client = url.sentinel_client(host, port)?;
    let mut conn = client
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(ASK_TIMEOUT))
                .set_response_timeout(Some(ASK_TIMEOUT)),
        )
        .await?;
    let named: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(&url.service)
        .query_async(&mut conn)
        .await?;
    let Some((host, port)) = named else {
        return Ok(None);
    };
    let port = port.parse().map_err(|_| {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "a sentinel named a primary whose port is not a number",
            port,
        ))
    })?;
    Ok(Some((host, port)))
}

/// Connects to the node at `address` and checks that it says it is the primary (`ROLE`),
/// on a connection tried once (a dead node named by a sentinel that has not noticed yet is
/// refused at once, not retried), then opens the reconnecting connection commands use.
async fn open_primary(
    url: &SentinelUrl,
    address: &(String, u16),
) -> Result<(redis::Client, ConnectionManager), String> {
    let client = url
        .node_client(&address.0, address.1)
        .map_err(|e| e.to_string())?;
    let mut probe = client
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(ASK_TIMEOUT))
                .set_response_timeout(Some(ASK_TIMEOUT)),
        )
        .await
        .map_err(|e| describe(&e))?;
    let role: Value = redis::cmd("ROLE")
        .query_async(&mut probe)
        .await
        .map_err(|e| describe(&e))?;
    let first = match &role {
        Value::Array(items) => items.first(),
        _ => None,
    };
    let primary = match first {
        Some(Value::BulkString(role)) => role.as_slice() == b"master",
        Some(Value::SimpleString(role)) => role == "master",
        _ => false,
    };
    if !primary {
        return Err("it says it is not the primary (a failover may be under way)".into());
    }
    // Few reconnection attempts: a node gone for longer is the sentinels' to replace, and
    // a command waiting on the attempts would wait past the move.
    let manager = client
        .get_connection_manager_with_config(
            redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                .set_number_of_retries(RECONNECT_ATTEMPTS)
                .set_min_delay(Duration::from_millis(50)),
        )
        .await
        .map_err(|e| describe(&e))?;
    Ok((client, manager))
}

/// What went wrong talking to a sentinel or a node, in words that say what to do.
fn describe(error: &redis::RedisError) -> String {
    let text = error.to_string();
    if error.is_connection_refusal() {
        return format!("connection refused ({text})");
    }
    if text.contains("NOAUTH") {
        return "it wants a password: give the nodes' in the URL (USER:PASSWORD@), the \
                sentinels' as ?sentinel_password=... (and ?sentinel_user=...)"
            .into();
    }
    if text.contains("WRONGPASS") || matches!(error.kind(), redis::ErrorKind::AuthenticationFailed)
    {
        return "the user or password was refused (the nodes' is the URL's USER:PASSWORD@, the \
                sentinels' its ?sentinel_password=...)"
            .into();
    }
    text
}

/// Listens to one sentinel after another for `+switch-master`, and asks the one listened to
/// which node is the primary every [`CHECK_EVERY`]; follows a move. Ends once the
/// [`Sentinel`] is dropped.
async fn listen_to_sentinels(sentinel: Weak<Sentinel>, url: SentinelUrl) {
    let mut pause = LISTEN_RETRY_MIN;
    for (host, port) in url.sentinels.iter().cycle() {
        if sentinel.strong_count() == 0 {
            return;
        }
        match listen(&sentinel, &url, host, *port).await {
            Ok(()) => return,
            Err(why) => {
                tracing::debug!(%why, sentinel = %format!("{host}:{port}"), "listening to the next sentinel");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Listens to one sentinel until it fails (an error) or the [`Sentinel`] is dropped.
async fn listen(
    sentinel: &Weak<Sentinel>,
    url: &SentinelUrl,
    host: &str,
    port: u16,
) -> Result<(), String> {
    let client = url.sentinel_client(host, port).map_err(|e| e.to_string())?;
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe("+switch-master").await?;
        RedisResult::Ok(pubsub)
    };
    let mut pubsub = tokio::time::timeout(ASK_TIMEOUT, connect)
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| describe(&e))?;
    let mut messages = pubsub.on_message();
    let mut check = tokio::time::interval(CHECK_EVERY);
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else {
                    return Err("the connection closed".into());
                };
                let payload: String = message.get_payload().unwrap_or_default();
                // `SERVICE OLD-IP OLD-PORT NEW-IP NEW-PORT`
                if payload.split(' ').next() == Some(url.service.as_str()) {
                    let Some(sentinel) = sentinel.upgrade() else { return Ok(()) };
                    let seen = sentinel.current().0;
                    sentinel.follow(seen, true).await;
                }
            }
            _ = check.tick() => {
                let Some(sentinel) = sentinel.upgrade() else { return Ok(()) };
                let named = tokio::time::timeout(ASK_TIMEOUT, ask(url, host, port))
                    .await
                    .map_err(|_| "no answer".to_string())?
                    .map_err(|e| describe(&e))?;
                let current = sentinel.primary.locked().address.clone();
                if named.is_some_and(|named| named != current) {
                    let seen = sentinel.current().0;
                    sentinel.follow(seen, true).await;
                }
            }
        }
    }
}

/// A command connection to the primary a [`Sentinel`] follows: each command goes to the
/// primary in use, and a failure that says it moved makes the sentinel look again (the
/// command itself fails; calls that are safe to send again are retried by their callers).
#[derive(Clone)]
pub struct SentinelConnection(pub(crate) Arc<Sentinel>);

impl SentinelConnection {
    /// Runs `request` on the primary in use; gives it up (as a dropped connection) when the
    /// primary moves meanwhile: a command still on its way to the old one is lost with it,
    /// and the caller sends it again to the new one.
    async fn on_primary<T, F>(&self, request: impl FnOnce(ConnectionManager) -> F) -> RedisResult<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let mut moves = self.0.moves();
        let (seen, manager) = self.0.current();
        if *moves.borrow_and_update() != seen {
            // Moved between the two reads: the next call goes to the new one.
            return Err(moved_away());
        }
        tokio::select! {
            result = request(manager) => result,
            _ = moves.changed() => Err(moved_away()),
        }
    }
}

/// The error a command gets when the primary moved while it was on its way.
fn moved_away() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "the Redis primary moved while the command was on its way",
    ))
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let seen = self.0.current().0;
            let result = self
                .on_primary(|mut manager| async move { manager.req_packed_command(cmd).await })
                .await;
            let values: Vec<&Value> = result.iter().collect();
            self.0.after(seen, &result, &values).await;
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let seen = self.0.current().0;
            let result = self
                .on_primary(|mut manager| async move {
                    manager.req_packed_commands(pipeline, offset, count).await
                })
                .await;
            let values: Vec<&Value> = result.iter().flatten().collect();
            self.0.after(seen, &result, &values).await;
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.0.url.db
    }
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_SENTINEL_PORT, SentinelUrl};

    fn parse(url: &str) -> Result<SentinelUrl, String> {
        SentinelUrl::parse(url).expect("a sentinel URL")
    }

    #[test]
    fn sentinel_urls_parse() {
        assert!(SentinelUrl::parse("redis://127.0.0.1:6379").is_none());
        let url =
            parse("redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2,[::1]:5000/jobs?db=2").unwrap();
        assert_eq!(
            url.sentinels,
            [
                ("10.0.0.1".to_string(), 26379),
                ("10.0.0.2".to_string(), DEFAULT_SENTINEL_PORT),
                ("::1".to_string(), 5000),
            ]
        );
        assert_eq!(url.service, "jobs");
        assert_eq!(url.db, 2);
        assert!(!url.tls);
        assert_eq!(url.userinfo.as_deref(), Some(":s3cret"));
        let tls =
            parse("rediss+sentinel://h:1/s?sentinel_user=watch&sentinel_password=p%40ss%20word")
                .unwrap();
        assert!(tls.tls);
        assert_eq!(tls.sentinel_user.as_deref(), Some("watch"));
        assert_eq!(tls.sentinel_password.as_deref(), Some("p@ss word"));
        let client = tls.sentinel_client("h", 1).unwrap();
        let info = client.get_connection_info();
        assert_eq!(info.redis_settings().password(), Some("p@ss word"));
        assert_eq!(info.redis_settings().username(), Some("watch"));
    }

    #[test]
    fn bad_sentinel_urls_say_what_is_wrong() {
        for (url, says) in [
            ("redis+sentinel://h:1", "/SERVICE"),
            ("redis+sentinel://h:1/", "/SERVICE"),
            ("redis+sentinel://h:x/s", "not a sentinel address"),
            ("redis+sentinel://h:1,,h:2/s", "not a sentinel address"),
            ("redis+sentinel://h:1/s?db=-1", "db must be"),
            (
                "redis+sentinel://h:1/s?master=x",
                "unknown parameter \"master\"",
            ),
            ("redis+sentinel://[::1/s", "not a sentinel address"),
        ] {
            let error = parse(url).unwrap_err();
            assert!(error.contains(says), "{url}: {error}");
        }
    }
}
