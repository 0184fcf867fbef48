//! The audit log: one entry per action taken through `wasmgear serve` (by which token) and
//! the CLI's operate commands (by which user on which host), in the stream
//! [`keys::audit`](wasmgear_proto::keys::audit), about its newest
//! [`AUDIT_KEEP`] kept. Read by `wasmgear audit`, the dashboard and `GET /v1/audit`.

use serde::{Deserialize, Serialize};
use wasmgear_proto::keys;
use wasmgear_proto::limits::{AUDIT_KEEP, MAX_AUDIT_FIELD_BYTES};

use crate::{Client, QueueError, Result};

/// The most entries one read returns.
pub const MAX_AUDIT_READ: usize = 1000;

/// One action, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// Its id in the stream (`MS-N`); empty before it is written.
    #[serde(default)]
    pub id: String,
    /// When it was written, ms since the epoch (Redis' clock: the stream id's time).
    #[serde(default)]
    pub at_ms: u64,
    /// Who: `token NAME` (through `serve`, `dashboard, token NAME` through its pages) or
    /// `cli USER@HOST`.
    pub actor: String,
    /// What: the command (`cancel`, `deploy`...) or the route (`POST /v1/jobs/{id}/cancel`).
    pub action: String,
    /// On what: the job, function, version... (the request's path, the command's
    /// arguments).
    pub target: String,
    /// How it ended: `ok`, `refused: why`, `failed: why`, or the HTTP status.
    pub outcome: String,
}

impl AuditEntry {
    /// An entry to write (its id and time are Redis').
    pub fn new(
        actor: impl Into<String>,
        action: impl Into<String>,
        target: impl Into<String>,
        outcome: impl Into<String>,
    ) -> Self {
        AuditEntry {
            id: String::new(),
            at_ms: 0,
            actor: actor.into(),
            action: action.into(),
            target: target.into(),
            outcome: outcome.into(),
        }
    }

    fn fields(&self) -> [(&'static str, String); 4] {
        [
            ("actor", cut(&self.actor)),
            ("action", cut(&self.action)),
            ("target", cut(&self.target)),
            ("outcome", cut(&self.outcome)),
        ]
    }

    fn read(id: String, flat: Vec<String>) -> Self {
        let mut entry = AuditEntry::new("", "", "", "");
        entry.at_ms = id
            .split_once('-')
            .and_then(|(ms, _)| ms.parse().ok())
            .unwrap_or(0);
        entry.id = id;
        let mut pairs = flat.into_iter();
        while let (Some(name), Some(value)) = (pairs.next(), pairs.next()) {
            match name.as_str() {
                "actor" => entry.actor = value,
                "action" => entry.action = value,
                "target" => entry.target = value,
                "outcome" => entry.outcome = value,
                _ => {}
            }
        }
        entry
    }
}

/// `text` cut to [`MAX_AUDIT_FIELD_BYTES`] at a character boundary.
fn cut(text: &str) -> String {
    let max = MAX_AUDIT_FIELD_BYTES as usize;
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max - 3;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

impl Client {
    /// Appends `entry` to the audit log (the oldest entries beyond about [`AUDIT_KEEP`]
    /// go).
    pub async fn audit(&self, entry: &AuditEntry) -> Result<()> {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(keys::audit())
            .arg("MAXLEN")
            .arg("~")
            .arg(AUDIT_KEEP)
            .arg("*");
        for (name, value) in entry.fields() {
            cmd.arg(name).arg(value);
        }
        let _: String = cmd.query_async(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// The newest `count` entries of the audit log (at most [`MAX_AUDIT_READ`]) written
    /// before entry `before` (its id; none: the newest), newest first.
    pub async fn audit_log(&self, count: usize, before: Option<&str>) -> Result<Vec<AuditEntry>> {
        if count == 0 || count > MAX_AUDIT_READ {
            return Err(QueueError::BadOption(format!(
                "read 1 to {MAX_AUDIT_READ} audit entries at a time, not {count}"
            )));
        }
        let end = match before {
            None => "+".to_string(),
            // Nothing comes before the first id a stream can hold (and Redis refuses `(0-0`).
            Some(id) if is_stream_id(id) && id.bytes().all(|b| b == b'0' || b == b'-') => {
                return Ok(Vec::new());
            }
            Some(id) if is_stream_id(id) => format!("({id}"),
            Some(id) => {
                return Err(QueueError::BadOption(format!(
                    "{id:?} is not an audit entry's id (MS-N, as `wasmgear audit` shows)"
                )));
            }
        };
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(keys::audit())
            .arg(end)
            .arg("-")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(entries
            .into_iter()
            .map(|(id, flat)| AuditEntry::read(id, flat))
            .collect())
    }
}

/// Whether `id` reads as a stream entry's id (`MS` or `MS-N`, each at most 19 digits).
fn is_stream_id(id: &str) -> bool {
    let part = |p: &str| !p.is_empty() && p.len() <= 19 && p.bytes().all(|b| b.is_ascii_digit());
    match id.split_once('-') {
        Some((ms, n)) => part(ms) && part(n),
        None => part(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_fields_are_cut_at_a_character() {
        let long = "é".repeat(1000);
        let cut = cut(&long);
        assert!(cut.len() <= MAX_AUDIT_FIELD_BYTES as usize, "{}", cut.len());
        assert!(cut.ends_with("..."));
        assert_eq!(super::cut("short"), "short");
    }

    #[test]
    fn entries_read_back_with_their_time() {
        let entry = AuditEntry::read(
            "1700000000123-4".into(),
            [
                "actor",
                "token ops",
                "action",
                "cancel",
                "outcome",
                "ok",
                "extra",
            ]
            .map(String::from)
            .to_vec(),
        );
        assert_eq!(entry.at_ms, 1_700_000_000_123);
        assert_eq!(
            (entry.actor.as_str(), entry.action.as_str()),
            ("token ops", "cancel")
        );
        assert_eq!((entry.target.as_str(), entry.outcome.as_str()), ("", "ok"));
        assert!(is_stream_id("1-0") && is_stream_id("1700000000123"));
        assert!(!is_stream_id("x-1") && !is_stream_id("1-") && !is_stream_id(""));
    }
}
