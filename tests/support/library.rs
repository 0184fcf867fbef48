//! The queue's Functions library called as another client would: `FCALL wg2_NAME` with the
//! keys the function declares (in order), the function name, then the arguments.

use redis::aio::MultiplexedConnection;
use wasmgear_client::FunctionName;

/// One function's queue, reached through the library directly.
#[derive(Clone)]
pub struct Library {
    pub conn: MultiplexedConnection,
    pub function: FunctionName,
}

impl Library {
    pub fn new(conn: MultiplexedConnection, function: &FunctionName) -> Self {
        Library {
            conn,
            function: function.clone(),
        }
    }

    /// `FCALL wg2_NAME` on this function's keys with `args` after the function name.
    pub fn command(&self, name: &str, args: &[&str]) -> redis::Cmd {
        let keys = wasmgear_client::queue_keys(name, &self.function)
            .unwrap_or_else(|| panic!("{name} is not a function of one queue"));
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(format!("wg2_{name}"))
            .arg(keys.len())
            .arg(&keys[..])
            .arg(self.function.as_str())
            .arg(args);
        cmd
    }

    /// Calls `name` with `args`; the reply, or the error reply.
    pub async fn call<T: redis::FromRedisValue>(
        &self,
        name: &str,
        args: &[&str],
    ) -> redis::RedisResult<T> {
        self.command(name, args)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// Calls `name` with `args`, which must succeed.
    pub async fn ok<T: redis::FromRedisValue>(&self, name: &str, args: &[&str]) -> T {
        self.call(name, args)
            .await
            .unwrap_or_else(|e| panic!("{name} {args:?}: {e}"))
    }

    /// Calls `lease` with `args`; the number and token of each job it leased.
    pub async fn lease_rows(&self, args: &[&str]) -> Vec<(String, String)> {
        let (leases, ..): (Vec<Vec<u8>>, i64, i64, redis::Value, String) =
            self.ok("lease", args).await;
        leases
            .chunks(2)
            .map(|pair| {
                let row = String::from_utf8(pair[0].clone()).expect("a UTF-8 lease row");
                let number = row.split('|').next().unwrap_or_default().to_string();
                let token = row.rsplit('|').next().unwrap_or_default().to_string();
                (number, token)
            })
            .collect()
    }

    /// The key `suffix` of this function (`wg:{F}:SUFFIX`).
    pub fn key(&self, suffix: &str) -> String {
        format!("wg:{{{}}}:{suffix}", self.function.as_str())
    }

    /// The members of sorted set `suffix`.
    pub async fn members(&self, suffix: &str) -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg(self.key(suffix))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn.clone())
            .await
            .unwrap()
    }

    /// `worker`'s registration to be handed jobs of this function, if any: the registering
    /// call's id and the slots it asked for.
    pub async fn registration(&self, worker: &str) -> Option<(String, u64)> {
        let args: Option<String> = redis::cmd("HGET")
            .arg(self.key("idle-args"))
            .arg(worker)
            .query_async(&mut self.conn.clone())
            .await
            .unwrap();
        let args = args?;
        let mut fields = args.split('|');
        let call = fields.next()?.to_string();
        let slots = fields.next()?.parse().ok()?;
        Some((call, slots))
    }

    /// The job's record as `get` answers it (JSON), `None` when there is no such job.
    pub async fn record(&self, number: u64) -> Option<serde_json::Value> {
        let reply: Option<(String, Option<Vec<u8>>)> = self.ok("get", &[&number.to_string()]).await;
        reply.map(|(json, _)| serde_json::from_str(&json).unwrap())
    }

    /// The state of job `number` (`missing` when there is none).
    pub async fn state(&self, number: u64) -> String {
        match self.record(number).await {
            Some(record) => record["state"].as_str().unwrap_or_default().to_string(),
            None => "missing".into(),
        }
    }

    /// Every key of this function with its contents in a canonical form (a hash's fields
    /// sorted, a sorted set by score then member): to compare before and after a call that
    /// must change nothing. (Not `DUMP`: a hash's order changes as Redis rehashes it on a
    /// read.) The expiries of remembered replies are left out: a call answered again is
    /// remembered longer, which changes no job.
    pub async fn dump(&self) -> Vec<(String, Vec<u8>)> {
        dump_keys(
            self.conn.clone(),
            &format!("wg:{{{}}}:*", self.function.as_str()),
        )
        .await
    }
}

/// Every key matching `pattern` with its contents in the canonical form of
/// [`Library::dump`] (a stream's entries as their fields and values, in order).
pub async fn dump_keys(mut conn: MultiplexedConnection, pattern: &str) -> Vec<(String, Vec<u8>)> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let mut dump = Vec::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let mut items: Vec<Vec<u8>> = match kind.as_str() {
            "hash" => redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            // When a remembered reply is forgotten is no state of the queue (a call
            // answered again is remembered longer): its members only, sorted.
            "zset" if key.ends_with(":calls-exp") => {
                let mut members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                members.sort();
                members
            }
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await
                .unwrap(),
            "set" => redis::cmd("SMEMBERS")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap(),
            "stream" => {
                let entries: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg("+")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                entries.into_iter().flat_map(|(_, fields)| fields).collect()
            }
            "list" => redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await
                .unwrap(),
            _ => vec![
                redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap(),
            ],
        };
        if kind == "hash" {
            let mut pairs: Vec<Vec<u8>> = items
                .chunks(2)
                .map(|pair| {
                    [
                        pair[0].as_slice(),
                        b"\0",
                        pair.get(1).map_or(&[][..], Vec::as_slice),
                    ]
                    .concat()
                })
                .collect();
            pairs.sort();
            items = pairs;
        } else if kind == "set" {
            items.sort();
        }
        dump.push((format!("{kind} {key}"), items.join(&b"\n"[..])));
    }
    dump
}
