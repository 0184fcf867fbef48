//! A GearMonkey client for the tests, written from the protocol document
//! (`../shared/seeds/gearmonkey-protocol.txt`), not from wasmgear's worker: the commands
//! below are the spec's, in the spec's order. GearMonkey publishes no client library.

use std::collections::HashMap;

use redis::AsyncCommands;

/// A client of the spec's `Client.run` and `Client.get`.
pub struct GearMonkeyClient {
    conn: redis::aio::MultiplexedConnection,
    url: String,
}

impl GearMonkeyClient {
    /// Connects to the server at `url`.
    pub async fn connect(url: &str) -> Self {
        let conn = redis::Client::open(url)
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis");
        GearMonkeyClient {
            conn,
            url: url.to_string(),
        }
    }

    /// `Client.run(FN, INPUT, PRIO)` without options: the job id.
    pub async fn run(&mut self, function: &str, input: &[u8], priority: &str) -> u64 {
        let id: u64 = self.conn.incr(format!("uid:{function}"), 1).await.unwrap();
        self.create(function, id, input).await;
        let _: () = self
            .conn
            .lpush(format!("queue:{function}:{priority}"), id)
            .await
            .unwrap();
        id
    }

    /// `Client.run(FN, INPUT, 'scheduled', {}, SCHEDULED)`: runs at `at` (Unix seconds).
    pub async fn schedule(&mut self, function: &str, input: &[u8], at: u64) -> u64 {
        let id: u64 = self.conn.incr(format!("uid:{function}"), 1).await.unwrap();
        self.create(function, id, input).await;
        let _: () = self
            .conn
            .zadd(format!("queue:{function}:scheduled"), id, at)
            .await
            .unwrap();
        id
    }

    /// `Client.run` with `OPT_ROLLCALL` and `OPT_BLOCKING`: refuses when no worker is
    /// registered, then blocks on the lock list up to `timeout` seconds; returns the id and
    /// the job hash (`Client.get`).
    pub async fn run_blocking(
        &mut self,
        function: &str,
        input: &[u8],
        timeout: u64,
    ) -> Result<(u64, HashMap<String, Vec<u8>>), String> {
        let workers: Option<String> = self.conn.get(format!("count:{function}")).await.unwrap();
        match workers.as_deref().map(str::parse::<i64>) {
            Some(Ok(n)) if n >= 1 => {}
            other => return Err(format!("roll call: no worker for {function} ({other:?})")),
        }
        let id = self.run(function, input, "normal").await;
        // A blocking pop on its own connection, as the spec's client does, with no response
        // timeout of its own: the pop may rightly wait up to `timeout`.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut blocking = redis::Client::open(self.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        let popped: Option<(String, String)> = redis::cmd("BRPOP")
            .arg(format!("lock:{function}:{id}"))
            .arg(timeout)
            .query_async(&mut blocking)
            .await
            .map_err(|e| e.to_string())?;
        if popped.is_none() {
            return Err(format!("job {id} did not finish within {timeout} s"));
        }
        Ok((id, self.get(function, id).await))
    }

    /// `Client.get(FN, ID)`: the whole job hash.
    pub async fn get(&mut self, function: &str, id: u64) -> HashMap<String, Vec<u8>> {
        self.conn
            .hgetall(format!("job:{function}:{id}"))
            .await
            .unwrap()
    }

    /// The job hash's `status`, as text.
    pub async fn status(&mut self, function: &str, id: u64) -> String {
        let status: Option<String> = self
            .conn
            .hget(format!("job:{function}:{id}"), "status")
            .await
            .unwrap();
        status.unwrap_or_default()
    }

    /// The roll call: `GET count:FN`.
    pub async fn roll_call(&mut self, function: &str) -> i64 {
        let count: Option<i64> = self.conn.get(format!("count:{function}")).await.unwrap();
        count.unwrap_or(0)
    }

    /// Inserting a job: the hash, then the `create` event.
    async fn create(&mut self, function: &str, id: u64, input: &[u8]) {
        let _: () = redis::cmd("HMSET")
            .arg(format!("job:{function}:{id}"))
            .arg("status")
            .arg("idle")
            .arg("input")
            .arg(input)
            .query_async(&mut self.conn)
            .await
            .unwrap();
        let _: () = self
            .conn
            .publish(format!("channel:{function}"), format!("create:{id}"))
            .await
            .unwrap();
    }
}
