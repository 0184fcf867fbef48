//! [`TestReplicaSet`]: a primary `redis-server`, its replicas and the Redis Sentinels
//! watching them, each on a free port of the test's own; stopped when dropped, their logs
//! printed if the test failed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wasmgear_redis_server::{RedisServer, free_port};

use crate::process::ProcessGroup;
use crate::wait::eventually_sync;

/// The name the sentinels know the set by.
pub const SERVICE: &str = "wasmgear";

/// How long the set may take to be whole (replicas in sync, sentinels knowing each other).
const WHOLE_WITHIN: Duration = Duration::from_secs(30);

/// After how long without an answer a sentinel counts a node as down.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// A replicated set behind sentinels, started by the test.
pub struct TestReplicaSet {
    /// The data nodes; the first started as the primary.
    nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
    dir: tempfile::TempDir,
    /// The nodes' password, if they want one.
    password: Option<String>,
}

/// One `redis-server --sentinel` (or `redis-sentinel`), killed with its process group.
struct Sentinel {
    port: u16,
    dir: PathBuf,
    process: ProcessGroup,
    /// Its own password, if it wants one.
    password: Option<String>,
}

impl TestReplicaSet {
    /// Starts a primary, `replicas` replicas of it and `sentinels` sentinels (quorum: a
    /// majority of them), then waits until every replica is in sync and every sentinel
    /// knows every replica and every other sentinel (so that a failover can be agreed on).
    pub fn start(replicas: usize, sentinels: usize) -> Self {
        Self::start_with_passwords(replicas, sentinels, None)
    }

    /// Like [`start`](Self::start), with `passwords` (the nodes', the sentinels') required.
    pub fn start_with_passwords(
        replicas: usize,
        sentinels: usize,
        passwords: Option<(&str, &str)>,
    ) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut auth: Vec<&str> = Vec::new();
        if let Some((node, _)) = passwords {
            auth.extend(["--requirepass", node, "--masterauth", node]);
        }
        let mut nodes = Vec::new();
        let primary =
            RedisServer::start(&dir.path().join("node0"), 0, &auth).expect("start the primary");
        let primary_port = primary.port().to_string();
        nodes.push(primary);
        for i in 1..=replicas {
            let mut args = vec!["--replicaof", "127.0.0.1", &primary_port];
            args.extend(&auth);
            let replica = RedisServer::start(&dir.path().join(format!("node{i}")), 0, &args)
                .expect("start a replica");
            nodes.push(replica);
        }
        let quorum = sentinels / 2 + 1;
        let sentinels = (0..sentinels)
            .map(|i| {
                Sentinel::start(
                    &dir.path().join(format!("sentinel{i}")),
                    nodes[0].port(),
                    quorum,
                    passwords,
                )
            })
            .collect();
        let set = TestReplicaSet {
            nodes,
            sentinels,
            dir,
            password: passwords.map(|(node, _)| node.to_string()),
        };
        set.wait_whole(0);
        set
    }

    /// Waits until the node `primary` has every other node as an in-sync replica and every
    /// sentinel names it, knows its replicas and the other sentinels.
    pub fn wait_whole(&self, primary: usize) {
        let port = self.nodes[primary].port();
        let replicas = self.nodes.len() - 1;
        eventually_sync(WHOLE_WITHIN, "every replica in sync", || {
            let info = self.node_cli(port, &["info", "replication"]);
            info.contains("role:master")
                && info
                    .lines()
                    .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                    .count()
                    == replicas
        });
        for sentinel in &self.sentinels {
            eventually_sync(
                WHOLE_WITHIN,
                "every sentinel knows the set and the other sentinels",
                || {
                    sentinel.primary_port() == Some(port)
                        && count_entries(&sentinel.cli(&["sentinel", "replicas", SERVICE]))
                            == replicas
                        && count_entries(&sentinel.cli(&["sentinel", "sentinels", SERVICE]))
                            == self.sentinels.len() - 1
                },
            );
        }
    }

    /// The URL that names the sentinels: `redis+sentinel://HOST:PORT,.../SERVICE`.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", sentinels.join(","))
    }

    /// The data node `i` (0 was started as the primary).
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// `redis-cli` against the data node on `port`, with the nodes' password.
    pub fn node_cli(&self, port: u16, args: &[&str]) -> String {
        match &self.password {
            Some(password) => {
                let mut all = vec!["--no-auth-warning", "-a", password.as_str()];
                all.extend(args);
                cli(port, &all)
            }
            None => cli(port, args),
        }
    }

    /// The port of sentinel `i`.
    pub fn sentinel_port(&self, i: usize) -> u16 {
        self.sentinels[i].port
    }

    /// How many data nodes there are.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The data node the first sentinel that answers names as the primary.
    pub fn primary(&self) -> Option<usize> {
        let port = self.sentinels.iter().find_map(Sentinel::primary_port)?;
        self.nodes.iter().position(|n| n.port() == port)
    }

    /// Waits until every sentinel names a primary other than node `old` that says it is
    /// one; returns it.
    pub fn wait_failover_from(&self, old: usize, within: Duration) -> usize {
        let old_port = self.nodes[old].port();
        let mut new = None;
        eventually_sync(within, "the sentinels to promote a replica", || {
            let named: Vec<Option<u16>> =
                self.sentinels.iter().map(Sentinel::primary_port).collect();
            let Some(Some(port)) = named.first().copied() else {
                return false;
            };
            let agreed = port != old_port && named.iter().all(|p| *p == Some(port));
            if agreed && self.node_cli(port, &["role"]).starts_with("master") {
                new = self.nodes.iter().position(|n| n.port() == port);
            }
            new.is_some()
        });
        new.expect("a new primary")
    }

    /// Waits until node `i` (restarted after it was the primary) is a replica in sync with
    /// `primary`, as the sentinels make it.
    pub fn wait_replica_of(&self, i: usize, primary: usize, within: Duration) {
        let port = self.nodes[i].port();
        let primary_port = self.nodes[primary].port().to_string();
        eventually_sync(within, "the old primary to be a replica in sync", || {
            let info = self.node_cli(port, &["info", "replication"]);
            info.contains("role:slave")
                && info.contains(&format!("master_port:{primary_port}"))
                && info.contains("master_link_status:up")
        });
    }

    /// The logs of every node and sentinel (their last lines), for a failing test.
    fn logs(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            out.push_str(&format!(
                "--- node {i} (port {}) ---\n{}\n",
                node.port(),
                node.log_tail(3000)
            ));
        }
        for sentinel in &self.sentinels {
            let log = std::fs::read(sentinel.dir.join("sentinel.log")).unwrap_or_default();
            let start = log.len().saturating_sub(3000);
            out.push_str(&format!(
                "--- sentinel (port {}) ---\n{}\n",
                sentinel.port,
                String::from_utf8_lossy(&log[start..])
            ));
        }
        out
    }

    /// The directory holding every node's and sentinel's files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TestReplicaSet {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for sentinel in &mut self.sentinels {
            sentinel.process.kill();
        }
    }
}

impl Sentinel {
    /// Starts a sentinel in `dir` watching the primary at `primary_port`, and waits until
    /// it answers.
    fn start(
        dir: &Path,
        primary_port: u16,
        quorum: usize,
        passwords: Option<(&str, &str)>,
    ) -> Self {
        std::fs::create_dir_all(dir).expect("sentinel dir");
        let port = free_port();
        let down = DOWN_AFTER.as_millis();
        // Sentinel rewrites its file: it must be its own, and writable.
        let config = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
             sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {quorum}\n\
             sentinel down-after-milliseconds {SERVICE} {down}\n\
             sentinel failover-timeout {SERVICE} 5000\n\
             sentinel parallel-syncs {SERVICE} 2\n",
            dir = dir.display()
        );
        let config = match passwords {
            Some((node, sentinel)) => format!(
                "{config}sentinel auth-pass {SERVICE} {node}\nrequirepass {sentinel}\n\
                 sentinel sentinel-pass {sentinel}\n"
            ),
            None => config,
        };
        let password = passwords.map(|(_, sentinel)| sentinel.to_string());
        let file = dir.join("sentinel.conf");
        std::fs::write(&file, config).expect("write sentinel.conf");
        // Debian's redis-sentinel where installed; the same program as redis-server.
        let mut command = if which("redis-sentinel") {
            let mut c = Command::new("redis-sentinel");
            c.arg(&file);
            c
        } else {
            let mut c = Command::new("redis-server");
            c.arg(&file).arg("--sentinel");
            c
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let process = ProcessGroup::spawn(&mut command).expect("start a sentinel");
        let sentinel = Sentinel {
            port,
            dir: dir.to_path_buf(),
            process,
            password,
        };
        eventually_sync(WHOLE_WITHIN, "a sentinel to answer", || {
            sentinel.cli(&["ping"]).trim() == "PONG"
        });
        sentinel
    }

    /// `redis-cli` against this sentinel, with its password.
    fn cli(&self, args: &[&str]) -> String {
        match &self.password {
            Some(password) => {
                let mut all = vec!["--no-auth-warning", "-a", password.as_str()];
                all.extend(args);
                cli(self.port, &all)
            }
            None => cli(self.port, args),
        }
    }

    /// The port of the primary this sentinel names, if it answers.
    fn primary_port(&self) -> Option<u16> {
        let answer = self.cli(&["sentinel", "get-master-addr-by-name", SERVICE]);
        answer.lines().nth(1)?.trim().parse().ok()
    }
}

/// `redis-cli -p PORT ARGS...`'s output ('' when it cannot run).
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// How many entries `SENTINEL REPLICAS` or `SENTINEL SENTINELS` listed (each has a
/// `name` field).
fn count_entries(listing: &str) -> usize {
    listing.lines().filter(|l| l.trim() == "name").count()
}

/// Whether `program` is on the PATH.
fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
