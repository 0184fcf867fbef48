//! [`TestCluster`]: a local Redis Cluster of three masters, each a `redis-server` of the
//! test's own, joined by `redis-cli --cluster create`; stopped when dropped, their logs
//! printed if the test failed.

use std::process::Command;
use std::time::Duration;

use wasmgear_redis_server::RedisServer;

use crate::test_redis::start_with_second_port;
use crate::wait::eventually_sync;

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
        let dir = tempfile::tempdir().expect("temp dir");
        let mut nodes = Vec::new();
        for i in 0..3 {
            // The cluster bus gets a free port of its own (port + 10000 may not exist).
            let (node, _bus_port) =
                start_with_second_port(&dir.path().join(format!("node{i}")), |bus_port| {
                    let args = ["--cluster-enabled", "yes", "--cluster-config-file"];
                    let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                    args.extend(["nodes.conf".into(), "--cluster-port".into()]);
                    args.push(bus_port.to_string());
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
        cluster
    }

    /// The URL of one node: the seed clients start from.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// The URL of each node (each a primary).
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
