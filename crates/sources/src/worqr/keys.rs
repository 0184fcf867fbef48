//! worqr's keys and channels, as its library names them, for one queue under one prefix;
//! and the `--source worqr:[PREFIX:]QUEUE=FUNCTION` queue part that names them.

use md5::{Digest, Md5};

/// The key prefix of worqr's default `redisKeyPrefix`.
pub const DEFAULT_PREFIX: &str = "worqr";

/// Splits a spec's queue part: `QUEUE` (under worqr's default prefix) or `PREFIX:QUEUE`.
pub fn split_queue(text: &str) -> Result<(String, String), String> {
    let (prefix, queue) = match text.rsplit_once(':') {
        Some((prefix, queue)) => (prefix, queue),
        None => (DEFAULT_PREFIX, text),
    };
    if queue.is_empty() || prefix.is_empty() {
        return Err(format!(
            "expected worqr:QUEUE=FUNCTION or worqr:PREFIX:QUEUE=FUNCTION, not {text:?}"
        ));
    }
    if prefix.contains('_') {
        return Err(format!(
            "worqr's prefix {prefix:?} has an underscore: worqr tells the prefix from the \
             queue in channel names by the first underscore, so its prefixes have none"
        ));
    }
    Ok((prefix.to_string(), queue.to_string()))
}

/// Every key and channel this source uses, of one queue under one prefix.
#[derive(Debug, Clone)]
pub struct WorqrKeys {
    prefix: String,
    queue: String,
}

impl WorqrKeys {
    /// The keys of `queue` under `prefix`.
    pub fn new(prefix: impl Into<String>, queue: impl Into<String>) -> Self {
        WorqrKeys {
            prefix: prefix.into(),
            queue: queue.into(),
        }
    }

    /// The queue's name.
    pub fn queue_name(&self) -> &str {
        &self.queue
    }

    /// `P:queues:Q`: tasks waiting (pushed left, taken from the right).
    pub fn queue(&self) -> String {
        format!("{}:queues:{}", self.prefix, self.queue)
    }

    /// `P:processes:PID`: a process's task.
    pub fn process(&self, pid: &str) -> String {
        format!("{}:processes:{pid}", self.prefix)
    }

    /// `P:uniqueTasks:MD5`: the marker of a unique task (MD5 of its text, in hex).
    pub fn unique_task(&self, task: &[u8]) -> String {
        let digest: String = Md5::digest(task)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{}:uniqueTasks:{digest}", self.prefix)
    }

    /// `P:workers`: every worker.
    pub fn workers(&self) -> String {
        format!("{}:workers", self.prefix)
    }

    /// `P:expiringWorkers`: the workers with a liveness key.
    pub fn expiring_workers(&self) -> String {
        format!("{}:expiringWorkers", self.prefix)
    }

    /// `P:permanentWorkers`: the workers without one.
    pub fn permanent_workers(&self) -> String {
        format!("{}:permanentWorkers", self.prefix)
    }

    /// `P:workerTimers:W`: the liveness key of worker `W`.
    pub fn worker_timer(&self, worker: &str) -> String {
        format!("{}:workerTimers:{worker}", self.prefix)
    }

    /// `P:workingQueues:W`: the queues worker `W` works on.
    pub fn working_queues(&self, worker: &str) -> String {
        format!("{}:workingQueues:{worker}", self.prefix)
    }

    /// `P:workingProcesses:Q`: the queue's processes, of every worker.
    pub fn working_processes(&self) -> String {
        format!("{}:workingProcesses:{}", self.prefix, self.queue)
    }

    /// `P_Q_KIND`: the queue's channel of `work`, `cancel`, `done` or `delete` messages.
    pub fn channel(&self, kind: &str) -> String {
        format!("{}_{}_{kind}", self.prefix, self.queue)
    }

    /// `P:wasmgear:owners`: process id → the wasmgear worker holding it.
    pub fn owners(&self) -> String {
        format!("{}:wasmgear:owners", self.prefix)
    }

    /// `P:wasmgear:attempts`: SHA-1 of a task's text → attempts started.
    pub fn attempts(&self) -> String {
        format!("{}:wasmgear:attempts", self.prefix)
    }

    /// `P:wasmgear:workers`: the workers that are wasmgear's.
    pub fn wasmgear_workers(&self) -> String {
        format!("{}:wasmgear:workers", self.prefix)
    }

    /// `P:wasmgear:retries:Q`: process id → when its retry is due (ms, Redis clock).
    pub fn retries(&self) -> String {
        format!("{}:wasmgear:retries:{}", self.prefix, self.queue)
    }
}
