//! Rotating the encryption key (`wasmgear keys rotate`): every kept value sealed with a key
//! other than the key file's first (inputs, outputs, checkpoints, logs, the error messages in
//! job records, schedules' inputs) is opened and sealed again with the first, a batch of
//! fields at a time, each written only if it is still what was read (`reseal`): a value that
//! changed meanwhile is left for the next run. A run keeps no state: run again, it finds only
//! what is left, so an interrupted rotation goes on where it stopped.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use wasmgear_proto::crypto::{self, CryptoError, Field, KeyRing, MAGIC, TEXT_PREFIX};
use wasmgear_proto::keys::{FunctionKeys, QueueKey, ScheduleKeys};

use crate::{Client, QueueError, Result, scripts};

/// How many problems a rotation names (it counts them all).
const MAX_NAMED: usize = 10;

/// What a rotation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rotation {
    /// The key everything was sealed again with.
    pub key: String,
    /// Values sealed again, by what holds them (`echo` for a function's jobs, `schedules`).
    pub resealed: BTreeMap<String, u64>,
    /// Values that changed between the read and the write: left for the next run.
    pub changed: u64,
    /// Values that do not open with this key file (a key it lacks, changed data).
    pub unopened: u64,
    /// The first of those, each with its job (or schedule) and why.
    pub problems: Vec<String>,
}

impl Rotation {
    /// How many values were sealed again.
    pub fn total(&self) -> u64 {
        self.resealed.values().sum()
    }

    /// Whether nothing sealed with an older key is left (as far as this run saw).
    pub fn finished(&self) -> bool {
        self.changed == 0 && self.unopened == 0
    }
}

/// How one hash's values hold sealed data.
#[derive(Clone, Copy)]
enum Holds {
    /// The whole value is an envelope of this field (inputs, outputs, checkpoints).
    Binary(Field),
    /// Log lines, each attempt's a text envelope.
    LogLines,
    /// Job records: error messages in them are text envelopes.
    Records,
}

impl Client {
    /// Seals again with the key file's first key every kept value sealed with another one,
    /// reading `batch` fields of a hash at a time. Needs the keys ([`Client::with_keys`]).
    pub async fn rotate_keys(&self, batch: usize) -> Result<Rotation> {
        let keys = self.keys.as_deref().ok_or_else(|| {
            QueueError::BadOption(
                "keys rotate needs the key file (--encryption-key-file or \
                 WASMGEAR_ENCRYPTION_KEY_FILE), its new key first"
                    .into(),
            )
        })?;
        let batch = batch.clamp(1, 10_000);
        let mut rotation = Rotation {
            key: keys.current().to_string(),
            ..Rotation::default()
        };
        for function in self.functions().await? {
            let queue = FunctionKeys::new(&function);
            for (key, holds) in [
                (QueueKey::Input, Holds::Binary(Field::Input)),
                (QueueKey::Output, Holds::Binary(Field::Output)),
                (QueueKey::Checkpoints, Holds::Binary(Field::Checkpoint)),
                (QueueKey::Logs, Holds::LogLines),
                (QueueKey::Jobs, Holds::Records),
            ] {
                let binding = |number: &str| format!("{function}:{number}");
                self.reseal_hash(keys, &queue.get(key), batch, holds, &binding, &mut rotation)
                    .await
                    .map(|n| *rotation.resealed.entry(function.to_string()).or_default() += n)?;
            }
        }
        let schedules = self
            .reseal_hash(
                keys,
                &ScheduleKeys::inputs(),
                batch,
                Holds::Binary(Field::Input),
                &|name: &str| crypto::schedule_binding(name),
                &mut rotation,
            )
            .await?;
        if schedules > 0 {
            rotation.resealed.insert("schedules".into(), schedules);
        }
        Ok(rotation)
    }

    /// Seals again the values of hash `key` (each bound to `binding(field)`): returns how
    /// many were written.
    async fn reseal_hash(
        &self,
        keys: &KeyRing,
        key: &str,
        batch: usize,
        holds: Holds,
        binding: &dyn Fn(&str) -> String,
        rotation: &mut Rotation,
    ) -> Result<u64> {
        let mut cursor = 0u64;
        let mut written = 0u64;
        loop {
            let (next, pairs): (u64, Vec<(String, Vec<u8>)>) = redis::cmd("HSCAN")
                .arg(key)
                .arg(cursor)
                .arg("COUNT")
                .arg(batch)
                .query_async(&mut self.conn.clone())
                .await?;
            let mut call = scripts::RESEAL.with_keys(&[key]);
            let mut asked = 0u64;
            for (field, value) in pairs {
                let job = binding(&field);
                match resealed(keys, &job, holds, &value) {
                    Ok(Some(new)) => {
                        call.arg(&field).arg(value).arg(new);
                        asked += 1;
                    }
                    Ok(None) => {}
                    Err(error) => {
                        rotation.unopened += 1;
                        if rotation.problems.len() < MAX_NAMED {
                            rotation.problems.push(format!("{job}: {error}"));
                        }
                    }
                }
            }
            if asked > 0 {
                let n: u64 = call.invoke_async(&mut self.conn.clone()).await?;
                written += n;
                rotation.changed += asked - n;
            }
            if next == 0 {
                return Ok(written);
            }
            cursor = next;
        }
    }
}

/// `value` sealed again with the first key where it holds data sealed with another one;
/// `None` when it holds none.
fn resealed(
    keys: &KeyRing,
    job: &str,
    holds: Holds,
    value: &[u8],
) -> std::result::Result<Option<Vec<u8>>, CryptoError> {
    let stale = |data: &[u8]| crypto::sealed_with(data).is_some_and(|k| k != keys.current());
    match holds {
        Holds::Binary(field) => {
            if !value.starts_with(MAGIC) || !stale(value) {
                return Ok(None);
            }
            Ok(Some(keys.seal(
                job,
                field,
                &keys.open(job, field, value)?,
            )?))
        }
        Holds::LogLines => {
            let Ok(text) = std::str::from_utf8(value) else {
                return Ok(None);
            };
            let mut changed = false;
            let mut out = String::with_capacity(text.len());
            for line in text.split_inclusive('\n') {
                let body = line.trim_end_matches('\n');
                if body.starts_with(TEXT_PREFIX) && stale(body.as_bytes()) {
                    let opened = keys.open_text(job, Field::Log, body)?;
                    out.push_str(&keys.seal_text(job, Field::Log, &opened)?);
                    out.push_str(&line[body.len()..]);
                    changed = true;
                } else {
                    out.push_str(line);
                }
            }
            Ok(changed.then(|| out.into_bytes()))
        }
        Holds::Records => {
            let Ok(text) = std::str::from_utf8(value) else {
                return Ok(None);
            };
            resealed_record(keys, job, text).map(|r| r.map(String::into_bytes))
        }
    }
}

/// A job record's text with each sealed error message in it sealed again: the envelopes
/// are found in the record's JSON as text (where a `/` may be written `\/`), the rest of the
/// record is left byte for byte as it is.
fn resealed_record(
    keys: &KeyRing,
    job: &str,
    text: &str,
) -> std::result::Result<Option<String>, CryptoError> {
    if !text.contains(TEXT_PREFIX) {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find(TEXT_PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + TEXT_PREFIX.len()..];
        let len = base64_run(after);
        let encoded = after[..len].replace("\\/", "/");
        let sealed = format!("{TEXT_PREFIX}{encoded}");
        let stale = BASE64.decode(&encoded).is_ok()
            && crypto::sealed_with(sealed.as_bytes()).is_some_and(|k| k != keys.current());
        if stale {
            let opened = keys.open_text(job, Field::Error, &sealed)?;
            out.push_str(&keys.seal_text(job, Field::Error, &opened)?);
            changed = true;
        } else {
            out.push_str(&rest[at..at + TEXT_PREFIX.len() + len]);
        }
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(changed.then_some(out))
}

/// How many bytes at the start of `text` are base64 as JSON writes it (`/` maybe `\/`).
fn base64_run(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=' => i += 1,
            b'\\' if bytes.get(i + 1) == Some(&b'/') => i += 2,
            _ => break,
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(text: &str) -> KeyRing {
        KeyRing::parse("keys", text).unwrap()
    }

    const OLD: &str = "k1 AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n";
    const NEW: &str = "k2 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n";

    #[test]
    fn binary_values_sealed_with_an_older_key_are_sealed_with_the_first() {
        let old = ring(OLD);
        let both = ring(&format!("{NEW}{OLD}"));
        let sealed = old.seal("f:1", Field::Output, b"secret").unwrap();
        let again = resealed(&both, "f:1", Holds::Binary(Field::Output), &sealed)
            .unwrap()
            .unwrap();
        assert_eq!(crypto::sealed_with(&again).as_deref(), Some("k2"));
        assert_eq!(
            &*both.open("f:1", Field::Output, &again).unwrap(),
            b"secret"
        );
        // Already on the first key, or plain: nothing to do.
        assert_eq!(
            resealed(&both, "f:1", Holds::Binary(Field::Output), &again),
            Ok(None)
        );
        assert_eq!(
            resealed(&both, "f:1", Holds::Binary(Field::Output), b"plain"),
            Ok(None)
        );
        // Moved from another job: does not open.
        assert!(resealed(&both, "f:2", Holds::Binary(Field::Output), &sealed).is_err());
    }

    #[test]
    fn log_lines_and_record_messages_are_sealed_again_in_place() {
        let old = ring(OLD);
        let both = ring(&format!("{NEW}{OLD}"));
        let line = old.seal_text("f:1", Field::Log, "step one\n").unwrap();
        let log = format!("--- attempt 1 ---\n{line}\n");
        let again = resealed(&both, "f:1", Holds::LogLines, log.as_bytes())
            .unwrap()
            .unwrap();
        let again = String::from_utf8(again).unwrap();
        assert!(again.starts_with("--- attempt 1 ---\n") && again.ends_with('\n'));
        let sealed_line = again.lines().nth(1).unwrap();
        assert_eq!(
            crypto::sealed_with(sealed_line.as_bytes()).as_deref(),
            Some("k2")
        );
        assert_eq!(
            both.open_text("f:1", Field::Log, sealed_line).unwrap(),
            "step one\n"
        );

        // In a record's JSON, with `/` written `\/` as cjson writes it.
        let message = old.seal_text("f:1", Field::Error, "it broke").unwrap();
        let record = format!(
            "failed|0|1|||||||||||||||{{\"error\":{{\"class\":\"guest-error\",\"message\":\"{}\"}}}}",
            message.replace('/', "\\/")
        );
        let again = resealed_record(&both, "f:1", &record).unwrap().unwrap();
        let start = again.find(TEXT_PREFIX).unwrap();
        let len = TEXT_PREFIX.len() + base64_run(&again[start + TEXT_PREFIX.len()..]);
        let sealed = again[start..start + len].replace("\\/", "/");
        assert_eq!(
            crypto::sealed_with(sealed.as_bytes()).as_deref(),
            Some("k2")
        );
        assert_eq!(
            both.open_text("f:1", Field::Error, &sealed).unwrap(),
            "it broke"
        );
        assert!(again.starts_with("failed|0|1|") && again.ends_with("\"}}"));
        assert_eq!(resealed_record(&both, "f:1", &again), Ok(None));
        assert_eq!(resealed_record(&both, "f:1", "queued|0|||"), Ok(None));
    }
}
