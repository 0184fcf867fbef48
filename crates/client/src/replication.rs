//! Acknowledged means replicated, when asked.
//!
//! Redis replicates asynchronously: a primary that fails right after a write may take it
//! with it, and a replica promoted in its place never saw it. A write that must survive
//! that is followed, on the same connection, by `WAIT N TIMEOUT`, which answers once N
//! replicas have confirmed every write the connection made (or the timeout passed, with
//! how many did). [`MinReplicas`] is how many a client or a worker asks for; a function's
//! own `min_replicas` setting (which the write's reply carries) can ask for more.
//!
//! A write whose replicas fall short is sent again with its call id: on the same primary
//! it is answered as the first time and written once; on a primary promoted without it,
//! it is written there. When the replicas still fall short the caller gets
//! [`QueueError::NotReplicated`].

use std::time::Duration;

use redis::FromRedisValue;

use crate::connection::{self, Connection};
use crate::scripts::FunctionCall;
use crate::{QueueError, Result};
use wasmgear_proto::limits::{MAX_MIN_REPLICAS, MIN_REPLICAS_TIMEOUT_MS};

/// How many times a producer's write is sent (with its call id) before replicas that fall
/// short are reported.
const CONFIRM_ATTEMPTS: usize = 3;

/// How many replicas must confirm a write before it is reported done, and how long they
/// are waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinReplicas {
    count: u32,
    timeout: Duration,
}

impl Default for MinReplicas {
    /// None: a write is done once the primary has it.
    fn default() -> Self {
        MinReplicas {
            count: 0,
            timeout: Duration::from_millis(MIN_REPLICAS_TIMEOUT_MS),
        }
    }
}

impl MinReplicas {
    /// `count` replicas (0 to [`MAX_MIN_REPLICAS`]; 0 asks for none), waited for at most
    /// `timeout` (at least 1 ms) per write.
    pub fn new(count: u32, timeout: Duration) -> Result<Self> {
        if u64::from(count) > MAX_MIN_REPLICAS {
            return Err(QueueError::BadOption(format!(
                "min_replicas must be 0 to {MAX_MIN_REPLICAS}, not {count}"
            )));
        }
        if timeout.is_zero() {
            return Err(QueueError::BadOption(
                "the min_replicas timeout must be at least 1 ms (WAIT with 0 waits forever)".into(),
            ));
        }
        Ok(MinReplicas { count, timeout })
    }

    /// How many replicas are asked for.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// How long they are waited for.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn timeout_ms(&self) -> u64 {
        (self.timeout.as_millis() as u64).max(1)
    }
}

/// The error for a write `what` that `confirmed` of `wanted` replicas confirmed.
pub(crate) fn not_replicated(
    what: String,
    wanted: u32,
    confirmed: u32,
    min: MinReplicas,
) -> QueueError {
    QueueError::NotReplicated {
        what,
        wanted,
        confirmed,
        timeout_ms: min.timeout_ms(),
    }
}

/// Sends `call` (which carries a call id) and has it confirmed by `min` replicas, or by as
/// many as the function's own setting asks (`function_setting` reads it from the reply),
/// whichever is more. `what` names the write in the error when they fall short after
/// [`CONFIRM_ATTEMPTS`] sends.
pub(crate) async fn invoke_confirmed<T: FromRedisValue>(
    what: impl Fn() -> String,
    conn: &Connection,
    call: &FunctionCall,
    min: MinReplicas,
    function_setting: impl Fn(&T) -> u32,
) -> Result<T> {
    let mut wanted = min.count;
    let mut confirmed = 0;
    for attempt in 0..CONFIRM_ATTEMPTS {
        if wanted == 0 {
            let reply: T = connection::invoke_retrying("write", conn, call).await?;
            wanted = function_setting(&reply);
            if wanted == 0 {
                return Ok(reply);
            }
            // The function asks for replicas: the call again (answered from what it
            // remembered) with its WAIT.
            continue;
        }
        let (reply, replicas): (T, u32) = connection::retrying("write", || {
            let mut conn = conn.clone();
            async move {
                call.invoke_waiting(&mut conn, wanted, min.timeout_ms())
                    .await
            }
        })
        .await?;
        wanted = wanted.max(function_setting(&reply));
        if replicas >= wanted {
            return Ok(reply);
        }
        confirmed = replicas;
        tracing::warn!(
            what = %what(),
            wanted,
            confirmed,
            attempt,
            "replicas fell short of confirming a write; sending it again with its call id"
        );
    }
    Err(not_replicated(what(), wanted, confirmed, min))
}

/// `WAIT wanted timeout` on the connection of the node that holds `key` (the node a write
/// on that key went to), after the connection's writes: how many replicas confirmed them.
pub(crate) async fn confirm(
    conn: &Connection,
    key: &str,
    wanted: u32,
    min: MinReplicas,
) -> redis::RedisResult<u32> {
    // `EXISTS key` only routes the pipeline to the key's node in a cluster.
    let mut pipe = redis::pipe();
    pipe.cmd("EXISTS")
        .arg(key)
        .ignore()
        .cmd("WAIT")
        .arg(wanted)
        .arg(min.timeout_ms());
    let (replicas,): (u32,) = pipe.query_async(&mut conn.clone()).await?;
    Ok(replicas)
}

#[cfg(test)]
mod tests {
    use super::MinReplicas;
    use std::time::Duration;

    #[test]
    fn min_replicas_are_checked() {
        assert_eq!(MinReplicas::default().count(), 0);
        assert!(MinReplicas::new(2, Duration::from_millis(500)).is_ok());
        let error = MinReplicas::new(17, Duration::from_secs(1)).unwrap_err();
        assert!(error.to_string().contains("0 to 16"), "{error}");
        let error = MinReplicas::new(1, Duration::ZERO).unwrap_err();
        assert!(error.to_string().contains("at least 1 ms"), "{error}");
    }
}
