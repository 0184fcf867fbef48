//! `--source` specs: which protocol a worker serves, and from which Redis.
//!
//! `wasmgear` (the default), `gearmonkey`, `redis-work-queue:PREFIX=FUNCTION` (the items
//! under key prefix `PREFIX` are jobs of `FUNCTION`) or `worqr:QUEUE=FUNCTION` (the tasks
//! of worqr queue `QUEUE`; `worqr:PREFIX:QUEUE=FUNCTION` under another `redisKeyPrefix`
//! than `worqr`) or `qless:QUEUE[,QUEUE...]` (qless queues, popped in that order; each job's
//! `klass` names its function), each optionally followed by `@redis://...` to read that
//! source from another Redis than the worker's `--redis`; or `gearman://HOST[:PORT][,...]`
//! (gearmand servers; a job's function names its plugin).

use std::fmt;
use std::str::FromStr;

use wasmgear_proto::FunctionName;

/// The queue protocols a worker can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// wasmgear's own queue.
    Wasmgear,
    /// GearMonkey's lists and hashes.
    GearMonkey,
    /// MeVitae's redis-work-queue: the items under one key prefix.
    RedisWorkQueue,
    /// droplit's worqr: the tasks of one queue.
    Worqr,
    /// seomoz's qless: the jobs of some queues.
    Qless,
    /// Gearman: a worker of some gearmand servers.
    Gearman,
}

impl Protocol {
    /// Every protocol, in the order help texts list them.
    pub const ALL: [Protocol; 6] = [
        Protocol::Wasmgear,
        Protocol::GearMonkey,
        Protocol::RedisWorkQueue,
        Protocol::Worqr,
        Protocol::Qless,
        Protocol::Gearman,
    ];

    /// Its name in a spec.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Wasmgear => "wasmgear",
            Protocol::GearMonkey => "gearmonkey",
            Protocol::RedisWorkQueue => "redis-work-queue",
            Protocol::Worqr => "worqr",
            Protocol::Qless => "qless",
            Protocol::Gearman => "gearman",
        }
    }

    /// Whether its specs name one queue and the function of its jobs (`:QUEUE=FUNCTION`).
    pub fn binds_a_queue(self) -> bool {
        matches!(self, Protocol::RedisWorkQueue | Protocol::Worqr)
    }

    /// Whether its specs name queues whose jobs name their functions (`:QUEUE[,QUEUE...]`).
    pub fn names_queues(self) -> bool {
        matches!(self, Protocol::Qless)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One `--source`: a protocol, and the Redis to read it from when not the worker's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    /// The protocol.
    pub protocol: Protocol,
    /// The queue (a key prefix) and the function of its jobs, for the protocols whose
    /// queues carry no function name.
    pub queue: Option<(String, FunctionName)>,
    /// The queues, in the order they are served, for the protocols whose jobs name their
    /// function (empty for the others).
    pub queues: Vec<String>,
    /// The gearmand servers (`HOST[:PORT]`), for Gearman.
    pub servers: Vec<String>,
    /// The Redis URL given after `@`, if any.
    pub redis: Option<String>,
}

impl SourceSpec {
    /// The Redis URL this source reads from: its own, or `default`.
    pub fn redis_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.redis.as_deref().unwrap_or(default)
    }
}

impl fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.protocol == Protocol::Gearman {
            return write!(f, "gearman://{}", self.servers.join(","));
        }
        let protocol = match &self.queue {
            Some((queue, function)) => format!("{}:{queue}={function}", self.protocol),
            None if !self.queues.is_empty() => {
                format!("{}:{}", self.protocol, self.queues.join(","))
            }
            None => self.protocol.to_string(),
        };
        match &self.redis {
            Some(url) => write!(f, "{protocol}@{}", wasmgear_client::connection::redact(url)),
            None => write!(f, "{protocol}"),
        }
    }
}

/// Why a `--source` spec was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The protocol is not one a worker knows.
    #[error("unknown source protocol {0:?}: use one of {list}", list = known())]
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

fn known() -> String {
    Protocol::ALL.map(Protocol::name).join(", ")
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
        let protocol = Protocol::ALL
            .into_iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| SpecError::UnknownProtocol(name.to_string()))?;
        let bad_queue = |reason: String| SpecError::BadQueue {
            spec: head.to_string(),
            reason,
        };
        if protocol == Protocol::Gearman {
            return Err(bad_queue(
                "expected gearman://HOST[:PORT][,HOST[:PORT]...]".to_string(),
            ));
        }
        if protocol.names_queues() {
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
            let redis = parse_redis(head, redis)?;
            return Ok(SourceSpec {
                protocol,
                queue: None,
                queues,
                servers: Vec::new(),
                redis,
            });
        }
        let queue = match (protocol.binds_a_queue(), binding) {
            (false, None) => None,
            (false, Some(_)) => {
                return Err(bad_queue(format!(
                    "{name} serves every function's queue; write just {name:?}"
                )));
            }
            (true, None) => {
                return Err(bad_queue(format!("expected {name}:QUEUE=FUNCTION")));
            }
            (true, Some(binding)) => {
                let (queue, function) = binding.split_once('=').ok_or_else(|| {
                    bad_queue(format!(
                        "expected {name}:QUEUE=FUNCTION (the function of its jobs is missing)"
                    ))
                })?;
                if queue.is_empty() {
                    return Err(bad_queue(format!(
                        "expected {name}:QUEUE=FUNCTION (the queue is empty)"
                    )));
                }
                if protocol == Protocol::Worqr {
                    crate::worqr::split_queue(queue).map_err(bad_queue)?;
                }
                let function = FunctionName::new(function).map_err(|e| bad_queue(e.to_string()))?;
                Some((queue.to_string(), function))
            }
        };
        let redis = parse_redis(head, redis)?;
        Ok(SourceSpec {
            protocol,
            queue,
            queues: Vec::new(),
            servers: Vec::new(),
            redis,
        })
    }
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
    Ok(SourceSpec {
        protocol: Protocol::Gearman,
        queue: None,
        queues: Vec::new(),
        servers: list,
        redis: None,
    })
}

/// The Redis URL after a spec's `@`, checked.
fn parse_redis(head: &str, redis: Option<&str>) -> Result<Option<String>, SpecError> {
    Ok(match redis {
        None => None,
        Some(url) => {
            let shown = format!("{head}@{}", wasmgear_client::connection::redact(url));
            let parsed = url::Url::parse(url).map_err(|e| SpecError::BadUrl {
                spec: shown.clone(),
                reason: format!("{e}: expected e.g. {head}@redis://host:6379"),
            })?;
            if !matches!(parsed.scheme(), "redis" | "rediss" | "redis+unix" | "unix") {
                return Err(SpecError::BadUrl {
                    spec: shown,
                    reason: format!(
                        "{:?} is no Redis URL scheme (use redis:// or rediss://)",
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
        assert_eq!(spec.protocol, Protocol::RedisWorkQueue);
        let (queue, function) = spec.queue.clone().unwrap();
        assert_eq!((queue.as_str(), function.as_str()), ("cv:jobs", "resize"));
        assert_eq!(
            spec.to_string(),
            "redis-work-queue:cv:jobs=resize@redis://h:1"
        );
        let spec: SourceSpec = "worqr:app:thumbs=resize".parse().unwrap();
        assert_eq!(spec.protocol, Protocol::Worqr);
        let (queue, _) = spec.queue.clone().unwrap();
        assert_eq!(
            crate::worqr::split_queue(&queue).unwrap(),
            ("app".to_string(), "thumbs".to_string())
        );
        assert_eq!(
            crate::worqr::split_queue("thumbs").unwrap(),
            ("worqr".to_string(), "thumbs".to_string())
        );
        let spec: SourceSpec = "qless:thumbs, mail@redis://h:2".parse().unwrap();
        assert_eq!(spec.protocol, Protocol::Qless);
        assert_eq!(spec.queues, ["thumbs", "mail"]);
        assert_eq!(spec.queue, None);
        assert_eq!(spec.to_string(), "qless:thumbs,mail@redis://h:2");
        let spec: SourceSpec = "gearman://gm1,gm2:4731".parse().unwrap();
        assert_eq!(spec.protocol, Protocol::Gearman);
        assert_eq!(spec.servers, ["gm1", "gm2:4731"]);
        assert_eq!(spec.to_string(), "gearman://gm1,gm2:4731");
        let spec: SourceSpec = "gearmonkey".parse().unwrap();
        assert_eq!(spec.protocol, Protocol::GearMonkey);
        assert_eq!(spec.redis_or("redis://default"), "redis://default");
        let spec: SourceSpec = "gearmonkey@redis://:pw@other:6380".parse().unwrap();
        assert_eq!(spec.redis_or("redis://default"), "redis://:pw@other:6380");
        assert!(!spec.to_string().contains("pw"), "{spec}");
        assert_eq!(
            "wasmgear".parse::<SourceSpec>().unwrap().protocol,
            Protocol::Wasmgear
        );
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
    }
}
