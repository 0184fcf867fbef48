//! A worqr client and peer for the tests, written from worqr's document
//! (`../shared/seeds/worqr.txt`: enqueue, cancelTasks, startWorker, keepWorkerAlive,
//! failWorker, cleanupWorkers), with the key and channel names of worqr's later releases
//! that the issue names (`P:queues:Q`, `P:workers`, `P:expiringWorkers`,
//! `P:workerTimers:W`, `P:workingQueues:W`, `P:workingProcesses:Q`, `P:uniqueTasks:MD5`,
//! channels `P_Q_work`, `P_Q_cancel`, `P_Q_done`), not from wasmgear's worker. The npm
//! package is no longer published.

use md5::{Digest, Md5};
use redis::AsyncCommands;

/// worqr's default key prefix.
pub const PREFIX: &str = "worqr";

/// A worqr instance: a producer, and a peer that supervises the workers.
pub struct WorqrClient {
    conn: redis::aio::MultiplexedConnection,
    /// This instance's worker id (a peer that never starts work still has one).
    pub id: String,
}

impl WorqrClient {
    /// Connects to the server at `url`.
    pub async fn connect(url: &str) -> Self {
        let conn = redis::Client::open(url)
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis");
        WorqrClient {
            conn,
            id: "test-peer".to_string(),
        }
    }

    fn key(what: &str) -> String {
        format!("{PREFIX}:{what}")
    }

    /// The queue's channel of `kind` messages.
    pub fn channel(queue: &str, kind: &str) -> String {
        format!("{PREFIX}_{queue}_{kind}")
    }

    /// `enqueue(Q, T)`: `LPUSH` and a `work` message, in one transaction.
    pub async fn enqueue(&mut self, queue: &str, task: &str) {
        let _: () = redis::pipe()
            .atomic()
            .lpush(Self::key(&format!("queues:{queue}")), task)
            .publish(Self::channel(queue, "work"), "1")
            .query_async(&mut self.conn)
            .await
            .unwrap();
    }

    /// `enqueue(Q, T, unique)`: refused while the task's marker exists (this test client is
    /// the only producer, so it reads the marker without worqr's `WATCH`).
    pub async fn enqueue_unique(&mut self, queue: &str, task: &str) -> Result<(), String> {
        let marker = Self::key(&format!("uniqueTasks:{}", md5_hex(task)));
        let existing: Option<String> = self.conn.get(&marker).await.unwrap();
        if existing.is_some() {
            return Err("Trying to enqueue duplicate task in unique queue".to_string());
        }
        let _: () = redis::pipe()
            .atomic()
            .set(&marker, " ")
            .lpush(Self::key(&format!("queues:{queue}")), task)
            .publish(Self::channel(queue, "work"), "1")
            .query_async(&mut self.conn)
            .await
            .unwrap();
        Ok(())
    }

    /// `cancelTasks(Q, T)`: every waiting copy goes, and workers are told on `cancel`.
    pub async fn cancel_tasks(&mut self, queue: &str, task: &str) {
        let _: () = redis::pipe()
            .atomic()
            .lrem(Self::key(&format!("queues:{queue}")), 0, task)
            .publish(Self::channel(queue, "cancel"), task)
            .query_async(&mut self.conn)
            .await
            .unwrap();
    }

    /// The tasks waiting in the queue, head first.
    pub async fn tasks(&mut self, queue: &str) -> Vec<String> {
        self.conn
            .lrange(Self::key(&format!("queues:{queue}")), 0, -1)
            .await
            .unwrap()
    }

    /// `getWorkers()`.
    pub async fn workers(&mut self) -> Vec<String> {
        self.conn.smembers(Self::key("workers")).await.unwrap()
    }

    /// Whether worker `id`'s liveness key exists.
    pub async fn alive(&mut self, id: &str) -> bool {
        self.conn
            .exists(Self::key(&format!("workerTimers:{id}")))
            .await
            .unwrap()
    }

    /// The queues worker `id` works on.
    pub async fn working_queues(&mut self, id: &str) -> Vec<String> {
        self.conn
            .smembers(Self::key(&format!("workingQueues:{id}")))
            .await
            .unwrap()
    }

    /// The queue's processes (of every worker).
    pub async fn working_processes(&mut self, queue: &str) -> Vec<String> {
        self.conn
            .smembers(Self::key(&format!("workingProcesses:{queue}")))
            .await
            .unwrap()
    }

    /// The task of process `pid`, if it exists.
    pub async fn process_task(&mut self, pid: &str) -> Option<String> {
        self.conn
            .lindex(Self::key(&format!("processes:{pid}")), 0)
            .await
            .unwrap()
    }

    /// `cleanupWorkers()`: every expiring worker but this one whose liveness key is gone
    /// is failed.
    pub async fn cleanup_workers(&mut self) {
        let expiring: Vec<String> = self
            .conn
            .smembers(Self::key("expiringWorkers"))
            .await
            .unwrap();
        for worker in expiring {
            if worker != self.id && !self.alive(&worker).await {
                self.fail_worker(&worker).await;
            }
        }
    }

    /// `failWorker(W)`: W leaves the worker lists, and every process of W's queues (every
    /// worker's: the working processes are one set per queue) goes back to its queue.
    pub async fn fail_worker(&mut self, worker: &str) {
        let queues = self.working_queues(worker).await;
        let mut processes = Vec::new();
        for queue in &queues {
            processes.extend(self.working_processes(queue).await);
        }
        let mut multi = redis::pipe();
        multi
            .atomic()
            .srem(Self::key("workers"), worker)
            .srem(Self::key("expiringWorkers"), worker)
            .srem(Self::key("permanentWorkers"), worker)
            .del(Self::key(&format!("workerTimers:{worker}")))
            .del(Self::key(&format!("workingQueues:{worker}")));
        for queue in &queues {
            multi.del(Self::key(&format!("workingProcesses:{queue}")));
        }
        for pid in &processes {
            let queue = &pid[..pid.rfind('_').unwrap_or(0)];
            multi
                .rpoplpush(
                    Self::key(&format!("processes:{pid}")),
                    Self::key(&format!("queues:{queue}")),
                )
                .del(Self::key(&format!("processes:{pid}")));
        }
        let _: redis::Value = multi.query_async(&mut self.conn).await.unwrap();
    }
}

/// The hex MD5 of a task's text, as worqr names unique-task markers.
pub fn md5_hex(task: &str) -> String {
    Md5::digest(task.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
