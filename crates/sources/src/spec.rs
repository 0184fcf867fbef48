//! `--source` specs: which protocol a worker serves, and from which Redis.
//!
//! `wasmgear` (the default), `gearmonkey`, `redis-work-queue:PREFIX=FUNCTION` (the items
//! under key prefix `PREFIX` are jobs of `FUNCTION`) or `worqr:QUEUE=FUNCTION` (the tasks
//! of worqr queue `QUEUE`; `worqr:PREFIX:QUEUE=FUNCTION` under another `redisKeyPrefix`
//! than `worqr`) or `qless:QUEUE[,QUEUE...]` (qless queues, popped in that order; each job's
//! `klass` names its function), each optionally followed by `@redis://...` to read that
//! source from another Redis than the worker's `--redis`; or `gearman://HOST[:PORT][,...]`
//! (gearmand servers; a job's function names its plugin).
//!
//! A spec connects itself ([`SourceSpec::connect`]): a new protocol is its module (the
//! source, with a `connect`) and one variant here, with its arm in each `match`.

use std::fmt;
use std::str::FromStr;

use wasmgear_client::WorkerQueue;
use wasmgear_proto::FunctionName;
use wasmgear_source::AnySource;

use crate::{ConnectError, GearMonkey, Gearman, Qless, RetryBackoff, WorkQueue, Worqr};

/// One `--source`: a protocol, what of it to serve, and the Redis to read it from when not
/// the worker's own (`redis`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// wasmgear's own queue.
    Wasmgear {
        /// The Redis URL given after `@`, if any.
        redis: Option<String>,
    },
    /// GearMonkey's lists and hashes.
    GearMonkey {
        /// The Redis URL given after `@`, if any.
        redis: Option<String>,
    },
    /// MeVitae's redis-work-queue: the items under one key prefix, all jobs of one function.
    RedisWorkQueue {
        /// The key prefix.
        queue: String,
        /// The function of its jobs.
        function: FunctionName,
        /// The Redis URL given after `@`, if any.
        redis: Option<String>,
    },
    /// droplit's worqr: the tasks of one queue, all jobs of one function.
    Worqr {
        /// worqr's `redisKeyPrefix` (`worqr` unless the spec says `PREFIX:QUEUE`).
        prefix: String,
        /// The queue.
        queue: String,
        /// The function of its jobs.
        function: FunctionName,
        /// The Redis URL given after `@`, if any.
        redis: Option<String>,
    },
    /// seomoz's qless: the jobs of some queues, in the order they are served; each job's
    /// klass names its function.
    Qless {
        /// The queues.
        queues: Vec<String>,
        /// The Redis URL given after `@`, if any.
        redis: Option<String>,
    },
    /// Gearman: a worker of some gearmand servers; a job's function names its plugin.
    Gearman {
        /// The servers, `HOST[:PORT]`.
        servers: Vec<String>,
    },
}

/// The protocol names a spec may start with, in the order help texts list them.
pub const PROTOCOLS: [&str; 6] = [
    "wasmgear",
    "gearmonkey",
    "redis-work-queue",
    "worqr",
    "qless",
    "gearman",
];

/// What every source of one worker is connected with.
#[derive(Debug, Clone, Copy)]
pub struct ConnectOptions<'a> {
    /// The worker's id at every source.
    pub worker_id: &'a str,
    /// The worker's own Redis (`--redis`): a spec without `@` reads from it.
    pub redis: &'a str,
    /// When failed jobs are retried.
    pub backoff: RetryBackoff,
    /// Whether wasmgear's own queue keeps each function's jobs in strict order.
    pub strict_order: bool,
    /// How many replicas confirm each completion on wasmgear's own queue.
    pub min_replicas: wasmgear_client::MinReplicas,
}

impl SourceSpec {
    /// The protocol's name.
    pub fn protocol(&self) -> &'static str {
        match self {
            SourceSpec::Wasmgear { .. } => "wasmgear",
            SourceSpec::GearMonkey { .. } => "gearmonkey",
            SourceSpec::RedisWorkQueue { .. } => "redis-work-queue",
            SourceSpec::Worqr { .. } => "worqr",
            SourceSpec::Qless { .. } => "qless",
            SourceSpec::Gearman { .. } => "gearman",
        }
    }

    /// The Redis URL given after `@`, if any (Gearman has none).
    pub fn redis(&self) -> Option<&str> {
        match self {
            SourceSpec::Wasmgear { redis }
            | SourceSpec::GearMonkey { redis }
            | SourceSpec::RedisWorkQueue { redis, .. }
            | SourceSpec::Worqr { redis, .. }
            | SourceSpec::Qless { redis, .. } => redis.as_deref(),
            SourceSpec::Gearman { .. } => None,
        }
    }

    /// The Redis URL this source reads from: its own, or `default`.
    pub fn redis_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.redis().unwrap_or(default)
    }

    /// The function all of its jobs are of, for the protocols whose jobs do not name one.
    pub fn bound_function(&self) -> Option<&FunctionName> {
        match self {
            SourceSpec::RedisWorkQueue { function, .. } | SourceSpec::Worqr { function, .. } => {
                Some(function)
            }
            _ => None,
        }
    }

    /// Whether this is wasmgear's own queue on the worker's own Redis.
    pub fn is_own_queue(&self) -> bool {
        matches!(self, SourceSpec::Wasmgear { redis: None })
    }

    /// Connects the source this spec names.
    pub async fn connect(&self, options: ConnectOptions<'_>) -> Result<AnySource, ConnectError> {
        let url = self.redis_or(options.redis);
        let (id, backoff) = (options.worker_id, options.backoff);
        Ok(match self {
            SourceSpec::Wasmgear { .. } => Box::new(own_queue(url, options).await?),
            SourceSpec::GearMonkey { .. } => Box::new(GearMonkey::connect(url, id, backoff).await?),
            SourceSpec::RedisWorkQueue {
                queue, function, ..
            } => Box::new(WorkQueue::connect(url, queue, function.clone(), id, backoff).await?),
            SourceSpec::Worqr {
                prefix,
                queue,
                function,
                ..
            } => {
                Box::new(Worqr::connect(url, (prefix, queue), function.clone(), id, backoff).await?)
            }
            SourceSpec::Qless { queues, .. } => {
                Box::new(Qless::connect(url, queues, id, backoff).await?)
            }
            SourceSpec::Gearman { servers } => Box::new(Gearman::connect(servers, id).await?),
        })
    }
}

/// wasmgear's own queue at `url`, for a worker connected with `options`.
pub(crate) async fn own_queue(
    url: &str,
    options: ConnectOptions<'_>,
) -> Result<WorkerQueue, ConnectError> {
    Ok(WorkerQueue::connect(url, options.worker_id)
        .await?
        .with_backoff(options.backoff.base, options.backoff.max)
        .with_strict_order(options.strict_order)
        .with_min_replicas(options.min_replicas))
}

impl fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.protocol();
        match self {
            SourceSpec::Gearman { servers } => {
                return write!(f, "gearman://{}", servers.join(","));
            }
            SourceSpec::Wasmgear { .. } | SourceSpec::GearMonkey { .. } => write!(f, "{name}")?,
            SourceSpec::RedisWorkQueue {
                queue, function, ..
            } => write!(f, "{name}:{queue}={function}")?,
            SourceSpec::Worqr {
                prefix,
                queue,
                function,
                ..
            } => match prefix.as_str() {
                crate::worqr::DEFAULT_PREFIX => write!(f, "{name}:{queue}={function}")?,
                prefix => write!(f, "{name}:{prefix}:{queue}={function}")?,
            },
            SourceSpec::Qless { queues, .. } => write!(f, "{name}:{}", queues.join(","))?,
        }
        match self.redis() {
            Some(url) => write!(f, "@{}", wasmgear_client::connection::redact(url)),
            None => Ok(()),
        }
    }
}

/// Why a `--source` spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The protocol is not one a worker knows.
    #[error("unknown source protocol {0:?}: use one of {list}", list = PROTOCOLS.join(", "))]
    UnknownProtocol(String),
    /// The queue and function part is missing, malformed, or not taken by the protocol.
    #[error("source {spec:?}: {reason}")]
    BadQueue {
        /// The spec.
        spec: String,
        /// What is wrong.
        reason: String,
    },
    /// What follows `@` is not a Redis URL.
    #[error("source {spec:?}: {reason}")]
    BadUrl {
        /// The spec, password hidden.
        spec: String,
        /// What is wrong with the URL.
        reason: String,
    },
}

impl FromStr for SourceSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if let Some(servers) = text.strip_prefix("gearman://") {
            return gearman_spec(text, servers);
        }
        let (head, redis) = match text.split_once('@') {
            Some((head, url)) => (head, Some(url)),
            None => (text, None),
        };
        let (name, binding) = match head.split_once(':') {
            Some((name, binding)) => (name, Some(binding)),
            None => (head, None),
        };
        let bad_queue = |reason: String| SpecError::BadQueue {
            spec: head.to_string(),
            reason,
        };
        let whole_queue = || match binding {
            None => Ok(()),
            Some(_) => Err(bad_queue(format!(
                "{name} serves every function's queue; write just {name:?}"
            ))),
        };
        let spec = match name {
            "wasmgear" => {
                whole_queue()?;
                SourceSpec::Wasmgear {
                    redis: parse_redis(head, redis)?,
                }
            }
            "gearmonkey" => {
                whole_queue()?;
                SourceSpec::GearMonkey {
                    redis: parse_redis(head, redis)?,
                }
            }
            "redis-work-queue" => {
                let (queue, function) = queue_and_function(name, binding).map_err(bad_queue)?;
                SourceSpec::RedisWorkQueue {
                    queue,
                    function,
                    redis: parse_redis(head, redis)?,
                }
            }
            "worqr" => {
                let (queue, function) = queue_and_function(name, binding).map_err(bad_queue)?;
                let (prefix, queue) = crate::worqr::split_queue(&queue).map_err(bad_queue)?;
                SourceSpec::Worqr {
                    prefix,
                    queue,
                    function,
                    redis: parse_redis(head, redis)?,
                }
            }
            "qless" => {
                let queues: Vec<String> = binding
                    .unwrap_or_default()
                    .split(',')
                    .map(|q| q.trim().to_string())
                    .collect();
                if queues.iter().any(String::is_empty) {
                    return Err(bad_queue(format!(
                        "expected {name}:QUEUE or {name}:QUEUE,QUEUE,... (a queue name is empty)"
                    )));
                }
                if binding.is_some_and(|b| b.contains('=')) {
                    return Err(bad_queue(format!(
                        "{name} jobs name their function (their klass); write just {name}:QUEUE"
                    )));
                }
                SourceSpec::Qless {
                    queues,
                    redis: parse_redis(head, redis)?,
                }
            }
            "gearman" => {
                return Err(bad_queue(
                    "expected gearman://HOST[:PORT][,HOST[:PORT]...]".to_string(),
                ));
            }
            _ => return Err(SpecError::UnknownProtocol(name.to_string())),
        };
        Ok(spec)
    }
}

/// `QUEUE=FUNCTION` after `name:`, checked.
fn queue_and_function(name: &str, binding: Option<&str>) -> Result<(String, FunctionName), String> {
    let binding = binding.ok_or_else(|| format!("expected {name}:QUEUE=FUNCTION"))?;
    let (queue, function) = binding.split_once('=').ok_or_else(|| {
        format!("expected {name}:QUEUE=FUNCTION (the function of its jobs is missing)")
    })?;
    if queue.is_empty() {
        return Err(format!(
            "expected {name}:QUEUE=FUNCTION (the queue is empty)"
        ));
    }
    let function = FunctionName::new(function).map_err(|e| e.to_string())?;
    Ok((queue.to_string(), function))
}

/// `gearman://HOST[:PORT][,HOST[:PORT]...]`: the servers, checked.
fn gearman_spec(spec: &str, servers: &str) -> Result<SourceSpec, SpecError> {
    let bad = |reason: String| SpecError::BadUrl {
        spec: spec.to_string(),
        reason,
    };
    let mut list = Vec::new();
    for server in servers.split(',').map(str::trim) {
        let (host, port) = match server.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (server, None),
        };
        if host.is_empty() || host.contains(['/', '@', ' ']) {
            return Err(bad(format!(
                "{server:?} is no gearmand address: expected gearman://HOST[:PORT][,HOST[:PORT]...]"
            )));
        }
        if let Some(port) = port
            && port.parse::<u16>().map_or(true, |p| p == 0)
        {
            return Err(bad(format!("{port:?} is no port (1 to 65535)")));
        }
        list.push(server.to_string());
    }
    Ok(SourceSpec::Gearman { servers: list })
}

/// The Redis URL after a spec's `@`, checked.
fn parse_redis(head: &str, redis: Option<&str>) -> Result<Option<String>, SpecError> {
    Ok(match redis {
        None => None,
        Some(url) => {
            let shown = format!("{head}@{}", wasmgear_client::connection::redact(url));
            if let Some(sentinel) = wasmgear_client::sentinel::SentinelUrl::parse(url) {
                sentinel.map_err(|reason| SpecError::BadUrl {
                    spec: shown.clone(),
                    reason,
                })?;
                return Ok(Some(url.to_string()));
            }
            let parsed = url::Url::parse(url).map_err(|e| SpecError::BadUrl {
                spec: shown.clone(),
                reason: format!("{e}: expected e.g. {head}@redis://host:6379"),
            })?;
            if !matches!(parsed.scheme(), "redis" | "rediss" | "redis+unix" | "unix") {
                return Err(SpecError::BadUrl {
                    spec: shown,
                    reason: format!(
                        "{:?} is no Redis URL scheme (use redis://, rediss:// or redis+sentinel://)",
                        parsed.scheme()
                    ),
                });
            }
            Some(url.to_string())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_a_protocol_and_maybe_a_redis() {
        let spec: SourceSpec = "redis-work-queue:cv:jobs=resize@redis://h:1"
            .parse()
            .unwrap();
        let SourceSpec::RedisWorkQueue {
            queue, function, ..
        } = &spec
        else {
            panic!("{spec:?}")
        };
        assert_eq!((queue.as_str(), function.as_str()), ("cv:jobs", "resize"));
        assert_eq!(
            spec.to_string(),
            "redis-work-queue:cv:jobs=resize@redis://h:1"
        );
        let spec: SourceSpec = "worqr:app:thumbs=resize".parse().unwrap();
        let SourceSpec::Worqr { prefix, queue, .. } = &spec else {
            panic!("{spec:?}")
        };
        assert_eq!((prefix.as_str(), queue.as_str()), ("app", "thumbs"));
        assert_eq!(spec.to_string(), "worqr:app:thumbs=resize");
        let spec: SourceSpec = "worqr:thumbs=resize".parse().unwrap();
        assert_eq!(spec.to_string(), "worqr:thumbs=resize");
        assert_eq!(
            crate::worqr::split_queue("thumbs").unwrap(),
            ("worqr".to_string(), "thumbs".to_string())
        );
        let spec: SourceSpec = "qless:thumbs, mail@redis://h:2".parse().unwrap();
        let SourceSpec::Qless { queues, .. } = &spec else {
            panic!("{spec:?}")
        };
        assert_eq!(queues, &["thumbs", "mail"]);
        assert_eq!(spec.to_string(), "qless:thumbs,mail@redis://h:2");
        let spec: SourceSpec = "gearman://gm1,gm2:4731".parse().unwrap();
        let SourceSpec::Gearman { servers } = &spec else {
            panic!("{spec:?}")
        };
        assert_eq!(servers, &["gm1", "gm2:4731"]);
        assert_eq!(spec.to_string(), "gearman://gm1,gm2:4731");
        let spec: SourceSpec = "gearmonkey".parse().unwrap();
        assert_eq!(spec.protocol(), "gearmonkey");
        assert_eq!(spec.redis_or("redis://default"), "redis://default");
        let spec: SourceSpec = "gearmonkey@redis://:pw@other:6380".parse().unwrap();
        assert_eq!(spec.redis_or("redis://default"), "redis://:pw@other:6380");
        assert!(!spec.to_string().contains("pw"), "{spec}");
        assert!("wasmgear".parse::<SourceSpec>().unwrap().is_own_queue());
    }

    #[test]
    fn bad_specs_say_what_to_write() {
        let error = "gearmonky".parse::<SourceSpec>().unwrap_err().to_string();
        assert!(
            error.contains("wasmgear, gearmonkey, redis-work-queue, worqr, qless, gearman"),
            "{error}"
        );
        for (spec, says) in [
            ("redis-work-queue", "QUEUE=FUNCTION"),
            ("redis-work-queue:jobs", "function of its jobs is missing"),
            ("redis-work-queue:=resize", "queue is empty"),
            ("redis-work-queue:jobs=not ok", "not ok"),
            ("gearmonkey:jobs=resize", "write just"),
            ("worqr:=resize", "queue is empty"),
            ("worqr:my_app:jobs=resize", "underscore"),
            ("worqr::jobs=resize", "worqr:PREFIX:QUEUE=FUNCTION"),
            ("qless", "a queue name is empty"),
            ("qless:a,,b", "a queue name is empty"),
            ("qless:jobs=resize", "klass"),
            ("gearman://", "no gearmand address"),
            ("gearman://gm:99999", "no port"),
            ("gearman://gm,,gm2", "no gearmand address"),
            ("gearman", "gearman://HOST"),
            ("gearman:gm", "gearman://HOST"),
        ] {
            let error = spec.parse::<SourceSpec>().unwrap_err().to_string();
            assert!(error.contains(says), "{spec}: {error}");
        }
        let error = "gearmonkey@not a url".parse::<SourceSpec>().unwrap_err();
        assert!(error.to_string().contains("gearmonkey@"), "{error}");
        let error = "gearmonkey@http://pw:secret@host"
            .parse::<SourceSpec>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("redis://"), "{error}");
        assert!(!error.contains("secret"), "{error}");
        // A sentinel URL is checked as one, its password hidden.
        let error = "qless:jobs@redis+sentinel://:secret@h1:1,h2:2"
            .parse::<SourceSpec>()
            .unwrap_err()
            .to_string();
        assert!(error.contains("/SERVICE"), "{error}");
        assert!(!error.contains("secret"), "{error}");
    }

    #[test]
    fn a_spec_may_name_a_sentinel_url() {
        let spec: SourceSpec = "qless:jobs@redis+sentinel://h1:26379,h2/queues?db=2"
            .parse()
            .unwrap();
        assert_eq!(
            spec.redis(),
            Some("redis+sentinel://h1:26379,h2/queues?db=2")
        );
    }
}
