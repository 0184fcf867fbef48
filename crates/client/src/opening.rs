//! Encrypted jobs on a client with keys ([`Client::with_keys`]): the inputs it writes are
//! sealed, each bound to the number reserved for its job; what it reads of a sealed job
//! (its output, error messages, log, input, checkpoint) is opened, each as the part of that
//! job it was sealed as. A client without keys reads the envelopes as they are;
//! [`wasmgear_proto::crypto::sealed_with`] says which key sealed one.

use std::borrow::Cow;

use wasmgear_proto::crypto::{self, Field, KeyRing, TEXT_PREFIX};
use wasmgear_proto::limits::MAX_OUTPUT_PIECE;
use wasmgear_proto::model::JobStatus;
use wasmgear_proto::{FunctionName, JobId};

use crate::client::{Enqueued, Placement};
use crate::{Client, EnqueueOptions, QueueError, Result};

fn refused(error: crypto::CryptoError) -> QueueError {
    QueueError::Encryption(error.to_string())
}

/// A job's output as kept, for a reader that reads it a piece at a time
/// ([`Client::open_output`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptOutput {
    /// None is kept: the job has not succeeded, or it was forgotten.
    Missing,
    /// It is kept as it is: read it in pieces ([`Client::output_piece`]).
    Plain,
    /// It was sealed: here it is, opened whole.
    Opened(Vec<u8>),
}

impl Client {
    /// Sends the jobs with their inputs sealed (each with the number reserved for it, so
    /// that its envelope is bound to its id) if `seal`, else as they are.
    pub(crate) async fn send_sealed_or_plain(
        &self,
        function: &FunctionName,
        jobs: &[(&[u8], EnqueueOptions)],
        placements: &[Placement],
        trace: Option<&wasmgear_proto::TraceContext>,
        seal: bool,
    ) -> Result<(Vec<Enqueued>, Vec<(JobId, JobId)>)> {
        let Some(keys) = self.keys.as_ref().filter(|_| seal) else {
            return self.send_jobs(function, jobs, placements, trace).await;
        };
        let mut placed: Vec<Placement> = (0..jobs.len())
            .map(|i| placements.get(i).cloned().unwrap_or_default())
            .collect();
        let unnumbered = placed.iter().filter(|p| p.number.is_none()).count();
        let mut next = match unnumbered {
            0 => 0,
            n => crate::flow::ops_reserve(&self.conn, function, n).await?,
        };
        for placement in placed.iter_mut().filter(|p| p.number.is_none()) {
            placement.number = Some(next);
            next += 1;
        }
        let mut sealed = Vec::with_capacity(jobs.len());
        for ((input, options), placement) in jobs.iter().zip(&placed) {
            let id = format!("{function}:{}", placement.number.unwrap_or_default());
            let envelope = keys
                .seal(&id, Field::Input, input)
                .map_err(|e| QueueError::Encryption(e.to_string()))?;
            sealed.push((envelope, options.clone()));
        }
        let sealed: Vec<(&[u8], EnqueueOptions)> = sealed
            .iter()
            .map(|(input, options)| (input.as_slice(), options.clone()))
            .collect();
        self.send_jobs(function, &sealed, &placed, trace).await
    }

    /// Whether job `id`'s kept output is sealed and, if it is, the output opened (read whole,
    /// in pieces of [`MAX_OUTPUT_PIECE`]). A sealed output this client cannot open (no keys,
    /// a key it lacks, changed) is an error that says so.
    pub async fn open_output(&self, id: &JobId) -> Result<KeptOutput> {
        let Some(head) = self.output_piece(id, 0, crypto::MAX_HEADER as u64).await? else {
            return Ok(KeptOutput::Missing);
        };
        if !head.starts_with(crypto::MAGIC) {
            return Ok(KeptOutput::Plain);
        }
        let mut whole = head;
        loop {
            match self
                .output_piece(id, whole.len() as u64, MAX_OUTPUT_PIECE)
                .await?
            {
                Some(piece) if !piece.is_empty() => whole.extend_from_slice(&piece),
                _ => break,
            }
        }
        let keys = self.keys.as_deref().ok_or_else(|| no_keys_here(&whole))?;
        Ok(KeptOutput::Opened(
            keys.open(&id.to_string(), Field::Output, &whole)
                .map_err(refused)?
                .into_owned(),
        ))
    }

    /// A dependency's or a flow job's outcome as a reader should see it: a sealed error
    /// message opened (or, without keys, said to be sealed), and with keys the size of a
    /// sealed output as it opens.
    pub(crate) async fn opened_outcome(
        &self,
        id: &JobId,
        output_bytes: &mut u64,
        error: &mut Option<String>,
    ) -> Result<()> {
        if let Some(message) = error.as_mut().filter(|m| m.starts_with(TEXT_PREFIX)) {
            *message = match self.keys.as_deref() {
                Some(keys) => open_text(keys, &id.to_string(), message)?,
                None => said_sealed(message),
            };
        }
        if self.keys.is_some() && *output_bytes > 0 {
            let head = self.output_piece(id, 0, crypto::MAX_HEADER as u64).await?;
            if let Some(overhead) = head.as_deref().and_then(crypto::overhead) {
                *output_bytes = output_bytes.saturating_sub(overhead as u64);
            }
        }
        Ok(())
    }

    /// `status` with its sealed parts opened. Without keys, its sealed messages say they are
    /// sealed; a sealed output is left as it is (its reader says so:
    /// [`crypto::sealed_with`]).
    pub(crate) fn opened(&self, mut status: JobStatus) -> Result<JobStatus> {
        let Some(keys) = self.keys.as_deref() else {
            if let Some(error) = &mut status.record.error {
                error.message = said_sealed(&error.message);
            }
            for attempt in &mut status.record.history {
                if let Some(message) = &mut attempt.message {
                    *message = said_sealed(message);
                }
            }
            return Ok(status);
        };
        let id = status.id.to_string();
        if let Some(output) = status.output.take() {
            status.output = Some(
                keys.open(&id, Field::Output, &output)
                    .map_err(refused)?
                    .into_owned(),
            );
        }
        if let Some(error) = &mut status.record.error {
            error.message = open_text(keys, &id, &error.message)?;
        }
        for attempt in &mut status.record.history {
            if let Some(message) = &mut attempt.message {
                *message = open_text(keys, &id, message)?;
            }
        }
        Ok(status)
    }

    /// Bytes of job `id` sealed as `field`, opened (as they are without keys, or when not
    /// sealed).
    pub(crate) fn opened_bytes(&self, id: &JobId, field: Field, data: Vec<u8>) -> Result<Vec<u8>> {
        match self.keys.as_deref() {
            Some(keys) if crypto::is_sealed(&data) => Ok(keys
                .open(&id.to_string(), field, &data)
                .map_err(refused)?
                .into_owned()),
            _ => Ok(data),
        }
    }

    /// Job `id`'s log with each sealed attempt opened (without keys, said to be sealed); an
    /// attempt cut short by the log's size limit says so.
    pub(crate) fn opened_log(&self, id: &JobId, log: String) -> Result<String> {
        if !log.contains(TEXT_PREFIX) {
            return Ok(log);
        }
        let Some(keys) = self.keys.as_deref() else {
            let lines = log
                .split_inclusive('\n')
                .map(|line| match line.starts_with(TEXT_PREFIX) {
                    true => format!("{}\n", said_sealed(line.trim_end_matches('\n'))),
                    false => line.to_string(),
                });
            return Ok(lines.collect());
        };
        let id = id.to_string();
        let mut opened = String::with_capacity(log.len());
        for line in log.split_inclusive('\n') {
            let text = line.trim_end_matches('\n');
            if text.starts_with(TEXT_PREFIX) {
                opened.push_str(&keys.open_text(&id, Field::Log, text).map_err(refused)?);
                if !opened.ends_with('\n') {
                    opened.push('\n');
                }
            } else if opened.is_empty() && !text.starts_with("--- attempt ") {
                // The front of the oldest attempt kept, cut by the log's size limit.
                opened.push_str("[the start of this attempt's encrypted log was cut]\n");
            } else {
                opened.push_str(line);
            }
        }
        Ok(opened)
    }
}

/// The error of reading sealed `data` on a client without keys.
fn no_keys_here(data: &[u8]) -> QueueError {
    QueueError::Encryption(refused_without_keys(data))
}

fn refused_without_keys(data: &[u8]) -> String {
    let key = crypto::sealed_with(data).unwrap_or_else(|| "?".into());
    crypto::CryptoError::NoKeys(key).to_string()
}

/// A text field as a reader without keys sees it: a sealed one says so, `<encrypted (key
/// K); no key here ...>`; any other as it is.
fn said_sealed(text: &str) -> String {
    match text.starts_with(TEXT_PREFIX) {
        true => format!("<{}>", refused_without_keys(text.as_bytes())),
        false => text.to_string(),
    }
}

fn open_text(keys: &KeyRing, id: &str, text: &str) -> Result<String> {
    Ok(
        match keys.open_text(id, Field::Error, text).map_err(refused)? {
            Cow::Borrowed(plain) => plain.to_string(),
            Cow::Owned(opened) => opened,
        },
    )
}
