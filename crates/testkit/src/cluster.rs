//! [`TestCluster`]: a local Redis Cluster of three masters (and, when asked, a replica of
//! each), each a `redis-server` of the test's own, joined by `redis-cli --cluster create`;
//! stopped when dropped, their logs printed if the test failed.

use std::process::Command;
use std::time::Duration;

use wasmgear_redis_server::RedisServer;

use crate::test_redis::start_with_second_port;
use crate::wait::eventually_sync;

/// Redis' own default `cluster-node-timeout`, ms.
const NODE_TIMEOUT_DEFAULT_MS: u64 = 15_000;

/// How long the nodes may take to agree that the cluster is whole.
const CLUSTER_OK_WITHIN: Duration = Duration::from_secs(30);

/// A local Redis Cluster of three masters, started by the test; its logs are printed if it fails.
pub struct TestCluster {
    nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl TestCluster {
    /// Starts three `redis-server --cluster-enabled yes` and joins them with
    /// `redis-cli --cluster create`, then waits until every node reports `cluster_state:ok`.
    pub fn start() -> Self {
        Self::start_with_replicas(0, NODE_TIMEOUT_DEFAULT_MS)
    }

    /// Three masters with `replicas` replicas each; a node counts as failed after
    /// `node_timeout_ms` without an answer (then its replica is promoted).
    pub fn start_with_replicas(replicas: usize, node_timeout_ms: u64) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes = Vec::new();
        for i in 0..3 * (1 + replicas) {
            // The cluster bus gets a free port of its own (port + 10000 may not exist).
            let (node, _bus_port) =
                start_with_second_port(&dir.path().join(format!("node{i}")), |bus_port| {
                    let args = ["--cluster-enabled", "yes", "--cluster-config-file"];
                    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                    args.extend(["nodes.conf".into(), "--cluster-port".into()]);
                    args.push(bus_port.to_string());
                    args.extend(["--cluster-node-timeout".into(), node_timeout_ms.to_string()]);
                    args
                });
            nodes.push(node);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string()])
            .arg("--cluster-yes")
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            created.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = TestCluster { nodes, _dir: dir };
        for node in &cluster.nodes {
            eventually_sync(CLUSTER_OK_WITHIN, "cluster_state:ok", || {
                redis_cli(node.port(), &["cluster", "info"]).contains("cluster_state:ok")
            });
        }
        // Replicas in sync with their masters (writes asking for a replica are confirmed).
        let masters = cluster.masters(cluster.nodes[0].port());
        for node in cluster
            .nodes
            .iter()
            .filter(|n| !masters.contains(&n.port()))
        {
            eventually_sync(CLUSTER_OK_WITHIN, "every replica in sync", || {
                redis_cli(node.port(), &["info", "replication"]).contains("master_link_status:up")
            });
        }
        cluster
    }

    /// The URL of one node: the seed clients start from.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// The node listening on `port`, if it is one of this cluster's.
    pub fn node_on(&self, port: u16) -> Option<&RedisServer> {
        self.nodes.iter().find(|n| n.port() == port)
    }

    /// The ports of the nodes that are masters now, by `CLUSTER NODES` as `asked` sees it.
    pub fn masters(&self, asked: u16) -> Vec<u16> {
        redis_cli(asked, &["cluster", "nodes"])
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(1)?
                    .split(['@', ':'])
                    .nth(1)?
                    .parse()
                    .ok()
            })
            .collect()
    }

    /// Waits until every node but `except` reports `cluster_state:ok`.
    pub fn wait_ok(&self, except: u16, within: Duration) {
        for node in self.nodes.iter().filter(|n| n.port() != except) {
            eventually_sync(within, "cluster_state:ok", || {
                redis_cli(node.port(), &["cluster", "info"]).contains("cluster_state:ok")
            });
        }
    }

    /// The URL of each node (each a primary unless the cluster has replicas).
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// How many keys each node holds.
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| redis_cli(n.port(), &["dbsize"]).trim().parse().unwrap_or(0))
            .collect()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for node in &self.nodes {
                eprintln!(
                    "--- cluster node {} log ---\n{}",
                    node.port(),
                    node.log_tail(4000)
                );
            }
        }
    }
}

/// What `redis-cli -p PORT ARGS` prints.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
