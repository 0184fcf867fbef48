//! Encrypted jobs on a worker: a job whose input is sealed ([`wasmgear_proto::crypto`]) has
//! it opened before the worker sees it, and its output, error message, log and checkpoint
//! sealed before they reach Redis, each bound to the job. A sealed input this worker cannot
//! open (no key file, a key it lacks, changed data) fails the attempt `undecryptable`,
//! retryable: another worker may hold the key.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Instant;

use wasmgear_proto::crypto::{self, CryptoError, Field, KeyRing};
use wasmgear_proto::sync::Locked;
use wasmgear_proto::{AttemptNotes, ErrorClass, JobFailure, JobId, Lease};

use super::WorkerQueue;
use crate::{QueueError, Result};

/// How many sealed jobs are remembered before the oldest half is let go: one is let go when
/// its last report is accepted, it is given back, or its lease is found lost, so only
/// leases lost unnoticed stay (far fewer than this).
const MAX_REMEMBERED: usize = 1_000_000;

/// The sealed jobs this worker runs: what it must seal when it reports them.
#[derive(Debug, Default)]
pub(super) struct SealedJobs(HashMap<JobId, Instant>);

impl SealedJobs {
    fn insert(&mut self, id: JobId) {
        if self.0.len() >= MAX_REMEMBERED {
            let mut oldest: Vec<(Instant, JobId)> =
                self.0.iter().map(|(id, at)| (*at, id.clone())).collect();
            oldest.sort();
            for (_, id) in oldest.into_iter().take(MAX_REMEMBERED / 2) {
                self.0.remove(&id);
            }
        }
        self.0.insert(id, Instant::now());
    }
}

impl WorkerQueue {
    /// Opens the sealed inputs of `leases`; a lease whose input does not open is failed
    /// `undecryptable` here and left out.
    pub(super) async fn open_leases(&self, leases: Vec<Lease>) -> Result<Vec<Lease>> {
        if !leases.iter().any(|l| crypto::is_sealed(&l.input)) {
            return Ok(leases);
        }
        let mut opened = Vec::with_capacity(leases.len());
        for mut lease in leases {
            if !crypto::is_sealed(&lease.input) {
                opened.push(lease);
                continue;
            }
            let id = lease.info.id.to_string();
            let result = match &self.keys {
                Some(keys) => keys
                    .open(&id, Field::Input, &lease.input)
                    .map(Cow::into_owned),
                None => Err(CryptoError::NoKeys(
                    crypto::sealed_with(&lease.input).unwrap_or_default(),
                )),
            };
            match result {
                Ok(input) => {
                    lease.input = input;
                    self.sealed.locked().insert(lease.info.id.clone());
                    opened.push(lease);
                }
                Err(error) => {
                    tracing::warn!(job_id = %id, %error, "cannot open the job's encrypted input");
                    let failure = JobFailure::new(
                        ErrorClass::Undecryptable,
                        format!("this worker cannot open the job's input: {error}"),
                    );
                    self.fail(&lease, &failure, &AttemptNotes::default())
                        .await?;
                }
            }
        }
        Ok(opened)
    }

    /// Whether the job of `lease` is sealed: what is reported of it is sealed too.
    pub(super) fn is_sealed_job(&self, lease: &Lease) -> bool {
        // Without keys no input was opened here: nothing to look up per job.
        self.keys.is_some() && self.sealed.locked().0.contains_key(&lease.info.id)
    }

    /// Lets go of the job of `lease`: its last report was accepted, it was given back, or
    /// its lease is lost. (A report that failed is sent again, sealed again.)
    pub(super) fn forget_sealed(&self, lease: &Lease) {
        if self.keys.is_some() {
            self.sealed.locked().0.remove(&lease.info.id);
        }
    }

    /// The keys, for a sealed job (there are keys: its input was opened with them).
    fn keys_for(&self) -> Result<&KeyRing> {
        self.keys
            .as_deref()
            .ok_or_else(|| QueueError::Encryption("a sealed job on a worker without keys".into()))
    }

    /// `data` sealed as `field` of the job of `lease`.
    pub(super) fn seal_for(&self, lease: &Lease, field: Field, data: &[u8]) -> Result<Vec<u8>> {
        self.keys_for()?
            .seal(&lease.info.id.to_string(), field, data)
            .map_err(|e| QueueError::Encryption(e.to_string()))
    }

    /// `text` sealed as `field` of the job of `lease` (empty text stays empty).
    pub(super) fn seal_text_for(&self, lease: &Lease, field: Field, text: &str) -> Result<String> {
        if text.is_empty() {
            return Ok(String::new());
        }
        self.keys_for()?
            .seal_text(&lease.info.id.to_string(), field, text)
            .map_err(|e| QueueError::Encryption(e.to_string()))
    }

    /// A checkpoint read for the job of `lease`, opened if the job is sealed.
    pub(super) fn open_checkpoint(&self, lease: &Lease, data: Vec<u8>) -> Result<Vec<u8>> {
        if !crypto::is_sealed(&data) {
            return Ok(data);
        }
        let Some(keys) = &self.keys else {
            return Err(QueueError::Encryption(
                CryptoError::NoKeys(crypto::sealed_with(&data).unwrap_or_default()).to_string(),
            ));
        };
        keys.open(&lease.info.id.to_string(), Field::Checkpoint, &data)
            .map(Cow::into_owned)
            .map_err(|e| QueueError::Encryption(e.to_string()))
    }

    /// The notes of an attempt of a sealed job, its log sealed (one line).
    pub(super) fn sealed_notes(&self, lease: &Lease, notes: &AttemptNotes) -> Result<AttemptNotes> {
        let mut log = self.seal_text_for(lease, Field::Log, &notes.log)?;
        if !log.is_empty() {
            log.push('\n');
        }
        Ok(AttemptNotes {
            log,
            ..notes.clone()
        })
    }
}
