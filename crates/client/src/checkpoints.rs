//! Checkpoints: the bytes a running job saves to resume from (`wasmgear:job/checkpoint`).
//! Its worker keeps the latest with the job ([`WorkerQueue::save_checkpoint`]); the attempts
//! that follow read it ([`Client::checkpoint`]): a retry, a reclaim after the worker died or
//! lost the lease, a `retry` of the failed job. A job's checkpoint goes when it succeeds,
//! with its record when that is forgotten, or by a retry with
//! [`RetryOptions::fresh`](crate::RetryOptions).

use wasmgear_proto::limits::MAX_CHECKPOINT_BYTES;
use wasmgear_proto::{JobId, Lease};

use super::client::Client;
use super::connection::Connection;
use super::worker_queue::WorkerQueue;
use super::{QueueError, Result, scripts};

impl Client {
    /// The checkpoint job `id` keeps, or `None` (it never saved one, it was dropped, or the
    /// job is gone).
    pub async fn checkpoint(&self, id: &JobId) -> Result<Option<Vec<u8>>> {
        read(&self.conn, id)
            .await?
            .map(|data| self.opened_bytes(id, wasmgear_proto::crypto::Field::Checkpoint, data))
            .transpose()
    }
}

/// The checkpoint job `id` keeps, if any.
async fn read(conn: &Connection, id: &JobId) -> Result<Option<Vec<u8>>> {
    Ok(scripts::on_function(&scripts::CHECKPOINT_GET, &id.function)
        .arg(id.seq)
        .invoke_async(&mut conn.clone())
        .await?)
}

impl WorkerQueue {
    /// The checkpoint the job `lease` holds keeps, left by an earlier attempt, if any.
    pub async fn checkpoint(&self, lease: &Lease) -> Result<Option<Vec<u8>>> {
        read(&self.conn, &lease.info.id).await
    }

    /// Keeps `data` as the checkpoint of the job `lease` holds, in place of the one before.
    /// `false` means the lease is lost (nothing changes). More than
    /// [`MAX_CHECKPOINT_BYTES`] is refused before any call.
    pub async fn save_checkpoint(&self, lease: &Lease, data: &[u8]) -> Result<bool> {
        if data.len() as u64 > MAX_CHECKPOINT_BYTES {
            return Err(QueueError::BadOption(format!(
                "a checkpoint of {} bytes is over the limit of {MAX_CHECKPOINT_BYTES}: save less \
                 (the position reached, not the data)",
                data.len()
            )));
        }
        let kept: i64 = scripts::on_function(&scripts::CHECKPOINT, &lease.info.id.function)
            .arg(lease.info.id.seq)
            .arg(&lease.token)
            .arg(data)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(kept == 1)
    }
}
