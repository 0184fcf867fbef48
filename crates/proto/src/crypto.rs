//! Encrypted job data: the key file, and the envelope a sealed input, output, error, log or
//! checkpoint is stored as (AES-256-GCM, bound to the job and the field, so that a
//! ciphertext moved to another job or field does not open).
//!
//! The key file holds one key a line, `ID BASE64(32 bytes)` (`#` starts a comment): the
//! first key seals new data, every key opens. Rotating is adding a new first line; old data
//! stays readable until it is sealed again with the new key.
//!
//! An envelope is `MAGIC | id length (1 byte) | id | nonce (12 bytes) | ciphertext | tag
//! (16 bytes)`, with the associated data `wasmgear-v1|JOB|FIELD`; in text fields (an error
//! message, a log) it is written [`TEXT_PREFIX`] then its base64. Every client (Rust,
//! Python, Node) writes and reads the same bytes; `crypto_vectors` in the tests fixes them.

use std::borrow::Cow;
use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};

/// What every envelope starts with: a zero byte (no text starts so) and a version.
pub const MAGIC: &[u8] = b"\0wgenc1";

/// What an envelope in a text field starts with, before its base64.
pub const TEXT_PREFIX: &str = "wgenc1:";

/// The length of the tag AES-256-GCM appends.
const TAG_LEN: usize = 16;

/// The longest key id, in bytes (`[A-Za-z0-9_.-]`).
pub const MAX_KEY_ID_LEN: usize = 32;

/// Which part of a job an envelope holds: part of what it is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The job's input.
    Input,
    /// Its output.
    Output,
    /// Its error message.
    Error,
    /// A line or an attempt's piece of its log.
    Log,
    /// Its checkpoint.
    Checkpoint,
}

impl Field {
    /// Its name in the associated data.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Input => "input",
            Field::Output => "output",
            Field::Error => "error",
            Field::Log => "log",
            Field::Checkpoint => "checkpoint",
        }
    }
}

/// Why data could not be sealed or opened, or a key file read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The key file does not read.
    #[error("the encryption key file {path}: {reason}")]
    KeyFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The data was sealed with a key this key file does not hold.
    #[error("encrypted with key {0:?}, which is not in this key file (add it to read the data)")]
    NoKey(String),
    /// The data was sealed, and there is no key file here at all.
    #[error("encrypted (key {0:?}); no key here (give the key file: WASMGEAR_ENCRYPTION_KEY_FILE)")]
    NoKeys(String),
    /// The envelope does not open: changed, or moved from another job or field.
    #[error(
        "encrypted data of {job} ({field}) does not open with key {key:?}: it was changed, or belongs to another job"
    )]
    Tampered {
        /// The job it was opened as.
        job: String,
        /// The field.
        field: &'static str,
        /// The key it names.
        key: String,
    },
    /// It starts as an envelope but is not one.
    #[error("encrypted data of {job} ({field}) is cut short or garbled")]
    Malformed {
        /// The job.
        job: String,
        /// The field.
        field: &'static str,
    },
    /// No entropy for a nonce.
    #[error("no entropy source for a nonce: {0}")]
    Entropy(String),
}

/// The keys of a key file: the first seals, every one opens.
pub struct KeyRing {
    keys: Vec<(String, LessSafeKey)>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        write!(f, "KeyRing({ids:?})")
    }
}

impl KeyRing {
    /// Reads a key file's text (`path` names it in errors).
    pub fn parse(path: &str, text: &str) -> Result<Self, CryptoError> {
        let bad = |line: usize, reason: String| CryptoError::KeyFile {
            path: path.to_string(),
            reason: format!("line {line}: {reason}"),
        };
        let mut keys: Vec<(String, LessSafeKey)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(id), Some(key), None) = (words.next(), words.next(), words.next()) else {
                return Err(bad(n + 1, "expected `ID BASE64KEY`".into()));
            };
            check_id(id).map_err(|reason| bad(n + 1, reason))?;
            if keys.iter().any(|(other, _)| other == id) {
                return Err(bad(n + 1, format!("key id {id:?} is used twice")));
            }
            let bytes = BASE64
                .decode(key)
                .map_err(|e| bad(n + 1, format!("the key is not base64: {e}")))?;
            if bytes.len() != 32 {
                return Err(bad(
                    n + 1,
                    format!("the key is {} bytes, not 32", bytes.len()),
                ));
            }
            let unbound = UnboundKey::new(&AES_256_GCM, &bytes)
                .map_err(|_| bad(n + 1, "not an AES-256 key".into()))?;
            keys.push((id.to_string(), LessSafeKey::new(unbound)));
        }
        if keys.is_empty() {
            return Err(CryptoError::KeyFile {
                path: path.to_string(),
                reason: "it holds no key (add one with `wasmgear keys new FILE ID`)".into(),
            });
        }
        Ok(KeyRing { keys })
    }

    /// A new key's line for a key file: `ID BASE64`.
    pub fn new_key_line(id: &str) -> Result<String, CryptoError> {
        check_id(id).map_err(|reason| CryptoError::KeyFile {
            path: String::new(),
            reason,
        })?;
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| CryptoError::Entropy(e.to_string()))?;
        Ok(format!("{id} {}", BASE64.encode(key)))
    }

    /// The id of the key that seals new data.
    pub fn current(&self) -> &str {
        &self.keys[0].0
    }

    /// `plaintext` sealed for `field` of job `job` with the current key.
    pub fn seal(&self, job: &str, field: Field, plaintext: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| CryptoError::Entropy(e.to_string()))?;
        Ok(self.seal_with_nonce(job, field, plaintext, nonce))
    }

    fn seal_with_nonce(
        &self,
        job: &str,
        field: Field,
        plaintext: &[u8],
        nonce: [u8; NONCE_LEN],
    ) -> Vec<u8> {
        let (id, key) = &self.keys[0];
        let mut sealed =
            Vec::with_capacity(MAGIC.len() + 1 + id.len() + NONCE_LEN + plaintext.len() + TAG_LEN);
        sealed.extend_from_slice(MAGIC);
        sealed.push(id.len() as u8);
        sealed.extend_from_slice(id.as_bytes());
        sealed.extend_from_slice(&nonce);
        let header = sealed.len();
        sealed.extend_from_slice(plaintext);
        let mut body = sealed.split_off(header);
        // Sealing in memory cannot fail for a buffer below GCM's limit (64 GiB).
        if key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(job, field)),
                &mut body,
            )
            .is_err()
        {
            body.clear();
        }
        sealed.extend_from_slice(&body);
        sealed
    }

    /// `data` opened as `field` of job `job` if it is an envelope, else `data` as it is.
    pub fn open<'a>(
        &self,
        job: &str,
        field: Field,
        data: &'a [u8],
    ) -> Result<Cow<'a, [u8]>, CryptoError> {
        let Some(parts) = Envelope::read(data, job, field)? else {
            return Ok(Cow::Borrowed(data));
        };
        let key = (self.keys.iter())
            .find(|(id, _)| id == parts.key_id)
            .map(|(_, key)| key)
            .ok_or_else(|| CryptoError::NoKey(parts.key_id.to_string()))?;
        let mut body = parts.body.to_vec();
        let opened = key
            .open_in_place(
                Nonce::assume_unique_for_key(parts.nonce),
                Aad::from(associated(job, field)),
                &mut body,
            )
            .map_err(|_| CryptoError::Tampered {
                job: job.to_string(),
                field: field.as_str(),
                key: parts.key_id.to_string(),
            })?;
        let len = opened.len();
        body.truncate(len);
        Ok(Cow::Owned(body))
    }

    /// `text` sealed for a text field: [`TEXT_PREFIX`] and the envelope's base64.
    pub fn seal_text(&self, job: &str, field: Field, text: &str) -> Result<String, CryptoError> {
        Ok(format!(
            "{TEXT_PREFIX}{}",
            BASE64.encode(self.seal(job, field, text.as_bytes())?)
        ))
    }

    /// A text field opened if it is sealed, else as it is.
    pub fn open_text<'a>(
        &self,
        job: &str,
        field: Field,
        text: &'a str,
    ) -> Result<Cow<'a, str>, CryptoError> {
        let Some(encoded) = text.strip_prefix(TEXT_PREFIX) else {
            return Ok(Cow::Borrowed(text));
        };
        let malformed = || CryptoError::Malformed {
            job: job.to_string(),
            field: field.as_str(),
        };
        let sealed = BASE64.decode(encoded.trim()).map_err(|_| malformed())?;
        let opened = self.open(job, field, &sealed)?;
        Ok(Cow::Owned(String::from_utf8_lossy(&opened).into_owned()))
    }
}

/// The key id `data` was sealed with, if it is an envelope (binary or text).
pub fn sealed_with(data: &[u8]) -> Option<String> {
    let binary;
    let data = match data.strip_prefix(TEXT_PREFIX.as_bytes()) {
        Some(encoded) => {
            binary = BASE64.decode(encoded).ok()?;
            &binary[..]
        }
        None => data,
    };
    Envelope::read(data, "", Field::Input)
        .ok()
        .flatten()
        .map(|e| e.key_id.to_string())
}

/// The most bytes an envelope holds before its ciphertext (magic, key id, nonce): reading
/// that much of stored data tells whether it is sealed, and how large it is opened.
pub const MAX_HEADER: usize = MAGIC.len() + 1 + MAX_KEY_ID_LEN + NONCE_LEN;

/// How many bytes of binary data starting with `head` are the envelope's own (magic, key id,
/// nonce, tag), `None` when it is not sealed: the data opened is that much smaller.
pub fn overhead(head: &[u8]) -> Option<usize> {
    let rest = head.strip_prefix(MAGIC)?;
    let id_len = usize::from(*rest.first()?);
    Some(MAGIC.len() + 1 + id_len + NONCE_LEN + TAG_LEN)
}

/// What a schedule's input is sealed as bound to, in place of a job id: `schedule/NAME`
/// (no job id holds a `/`), so that it opens only as that schedule's input.
pub fn schedule_binding(name: &str) -> String {
    format!("schedule/{name}")
}

/// Whether `data` is an envelope.
pub fn is_sealed(data: &[u8]) -> bool {
    data.starts_with(MAGIC) || data.starts_with(TEXT_PREFIX.as_bytes())
}

/// The parts of an envelope.
struct Envelope<'a> {
    key_id: &'a str,
    nonce: [u8; NONCE_LEN],
    body: &'a [u8],
}

impl<'a> Envelope<'a> {
    /// The parts of `data`, `None` when it is not an envelope.
    fn read(data: &'a [u8], job: &str, field: Field) -> Result<Option<Self>, CryptoError> {
        let Some(rest) = data.strip_prefix(MAGIC) else {
            return Ok(None);
        };
        let malformed = || CryptoError::Malformed {
            job: job.to_string(),
            field: field.as_str(),
        };
        let (&id_len, rest) = rest.split_first().ok_or_else(malformed)?;
        let id_len = usize::from(id_len);
        if rest.len() < id_len + NONCE_LEN + TAG_LEN {
            return Err(malformed());
        }
        let (id, rest) = rest.split_at(id_len);
        let key_id = std::str::from_utf8(id).map_err(|_| malformed())?;
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let mut fixed = [0u8; NONCE_LEN];
        fixed.copy_from_slice(nonce);
        Ok(Some(Envelope {
            key_id,
            nonce: fixed,
            body,
        }))
    }
}

/// What an envelope is bound to.
fn associated(job: &str, field: Field) -> Vec<u8> {
    format!("wasmgear-v1|{job}|{}", field.as_str()).into_bytes()
}

fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty()
        || id.len() > MAX_KEY_ID_LEN
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(format!(
            "key id {id:?} must be 1 to {MAX_KEY_ID_LEN} of [A-Za-z0-9_.-]"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# rotated 2026-11-28\n\
        k2 AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=\n\
        k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=  # the first key\n";

    #[test]
    fn sealed_data_opens_only_as_its_job_and_field() {
        let ring = KeyRing::parse("keys", FILE).unwrap();
        assert_eq!(ring.current(), "k2");
        let sealed = ring.seal("resize:7", Field::Input, b"secret").unwrap();
        assert_eq!(
            overhead(&sealed[..MAX_HEADER.min(sealed.len())]),
            Some(sealed.len() - b"secret".len())
        );
        assert_eq!(overhead(b"secret"), None);
        assert!(is_sealed(&sealed));
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(sealed_with(&sealed).as_deref(), Some("k2"));
        assert_eq!(
            ring.open("resize:7", Field::Input, &sealed)
                .unwrap()
                .as_ref(),
            b"secret"
        );
        for (job, field) in [("resize:8", Field::Input), ("resize:7", Field::Output)] {
            assert!(matches!(
                ring.open(job, field, &sealed),
                Err(CryptoError::Tampered { .. })
            ));
        }
        let mut changed = sealed.clone();
        *changed.last_mut().unwrap() ^= 1;
        assert!(ring.open("resize:7", Field::Input, &changed).is_err());
        // Plain data passes as it is.
        assert_eq!(
            ring.open("resize:7", Field::Input, b"plain")
                .unwrap()
                .as_ref(),
            b"plain"
        );
        // Cut short: an error, never a panic.
        for cut in 0..sealed.len().min(40) {
            let _ = ring.open("resize:7", Field::Input, &sealed[..cut]);
        }
    }

    #[test]
    fn old_keys_open_what_they_sealed() {
        let old =
            KeyRing::parse("old", "k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n").unwrap();
        let sealed = old.seal("f:1", Field::Output, b"out").unwrap();
        let rotated = KeyRing::parse("keys", FILE).unwrap();
        assert_eq!(
            rotated
                .open("f:1", Field::Output, &sealed)
                .unwrap()
                .as_ref(),
            b"out"
        );
        let other = KeyRing::parse("x", &KeyRing::new_key_line("k9").unwrap()).unwrap();
        assert_eq!(
            other.open("f:1", Field::Output, &sealed),
            Err(CryptoError::NoKey("k1".into()))
        );
    }

    #[test]
    fn text_fields_hold_the_envelope_in_base64() {
        let ring = KeyRing::parse("keys", FILE).unwrap();
        let sealed = ring.seal_text("f:1", Field::Error, "it broke").unwrap();
        assert!(sealed.starts_with(TEXT_PREFIX));
        assert_eq!(sealed_with(sealed.as_bytes()).as_deref(), Some("k2"));
        assert_eq!(
            ring.open_text("f:1", Field::Error, &sealed).unwrap(),
            "it broke"
        );
        assert_eq!(
            ring.open_text("f:1", Field::Error, "plain").unwrap(),
            "plain"
        );
        assert!(ring.open_text("f:1", Field::Error, "wgenc1:!!").is_err());
    }

    /// The bytes every client must write for a fixed key and nonce (the Python and Node
    /// clients check the same vector).
    #[test]
    fn crypto_vectors() {
        let ring = KeyRing::parse("keys", FILE).unwrap();
        let sealed = ring.seal_with_nonce("echo:1", Field::Input, b"hello", [7u8; NONCE_LEN]);
        let hex: String = sealed.iter().map(|b| format!("{b:02x}")).collect();
        // Python's `cryptography` AESGCM and Node's `crypto` aes-256-gcm give the same.
        assert_eq!(
            hex,
            "007767656e6331026b32070707070707070707070707\
             82a6453f042645a893ed10f0c5e389a1107bf4c2db"
        );
        assert_eq!(sealed.len(), MAGIC.len() + 1 + 2 + NONCE_LEN + 5 + TAG_LEN);
        assert_eq!(
            ring.open("echo:1", Field::Input, &sealed).unwrap().as_ref(),
            b"hello"
        );
    }

    #[test]
    fn bad_key_files_are_refused_with_the_line() {
        for (text, says) in [
            ("", "no key"),
            ("k1\n", "line 1"),
            ("k1 notbase64!\n", "base64"),
            ("k1 AAAA\n", "not 32"),
            (
                "bad/id ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n",
                "[A-Za-z0-9_.-]",
            ),
            (
                "k1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\nk1 ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n",
                "twice",
            ),
        ] {
            let error = KeyRing::parse("keys", text).unwrap_err().to_string();
            assert!(error.contains(says), "{text:?}: {error}");
        }
        assert!(!format!("{:?}", KeyRing::parse("keys", FILE).unwrap()).contains("AQID"));
    }
}
