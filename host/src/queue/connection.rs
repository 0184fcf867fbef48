//! One connection type for a single Redis server and for Redis Cluster.
//!
//! The URL decides nothing: [`connect`] asks the server (`INFO cluster`) and, when it is
//! part of a cluster, uses it as the seed of a cluster connection that routes each script to
//! the node owning its keys' slot. Pub/sub always uses a plain connection to the seed node:
//! in a cluster, `PUBLISH` reaches the subscribers of every node.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::{QueueError, Result};

/// A connection that reconnects by itself, to one server or to a cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    /// A single server (or a replica set's primary).
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c) => c.req_packed_command(cmd),
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
            Connection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

/// Connects to the Redis at `url`: returns a client for the seed node (for pub/sub) and a
/// connection for commands, cluster-aware when the server is part of a cluster.
pub(crate) async fn connect(url: &str) -> Result<(redis::Client, Connection)> {
    let client = redis::Client::open(url).map_err(|source| QueueError::BadUrl {
        url: url.to_string(),
        source,
    })?;
    let mut probe = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut probe)
        .await?;
    let connection = if info.lines().any(|line| line.trim() == "cluster_enabled:1") {
        let cluster = redis::cluster::ClusterClient::new(vec![url])?
            .get_async_connection()
            .await?;
        Connection::Cluster(cluster)
    } else {
        Connection::Single(client.get_connection_manager().await?)
    };
    Ok((client, connection))
}
