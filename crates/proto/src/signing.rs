//! Signed plugins: ed25519 key pairs (`wasmgear keygen`), the signature of a plugin
//! (`wasmgear sign`, `wasmgear deploy --sign`) and its check by a worker started with
//! `--trust` (a plugin with a missing or invalid signature is refused).
//!
//! What is signed is the plugin's name (the file's stem: the function it serves when its
//! manifest names none), the SHA-256 of its component and the SHA-256 of its manifest's
//! text (or that it has none), so that neither the code nor the capabilities its manifest
//! grants can change after signing. Keys and signatures are one line of text each:
//!
//! ```text
//! wasmgear-ed25519-secret-key BASE64(32-byte seed)
//! wasmgear-ed25519-public-key BASE64(32 bytes)
//! wasmgear-signature-v1 BASE64(public key) BASE64(64-byte signature)
//! ```

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use sha2::{Digest, Sha256};

const SECRET_TAG: &str = "wasmgear-ed25519-secret-key";
const PUBLIC_TAG: &str = "wasmgear-ed25519-public-key";
const SIGNATURE_TAG: &str = "wasmgear-signature-v1";

/// The file a directory plugin's signature is read from: `NAME.wasm.sig` beside `NAME.wasm`.
pub fn signature_path(wasm: &std::path::Path) -> std::path::PathBuf {
    let mut name = wasm.as_os_str().to_owned();
    name.push(".sig");
    name.into()
}

/// Why a key or a signature could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

/// Why a plugin is refused by a worker that trusts only signed plugins.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustError {
    /// It has no signature.
    #[error(
        "refused: it is not signed, and this worker runs only plugins signed by {trusted} (sign it with `wasmgear sign PLUGIN.wasm --key KEY`, or deploy it with `--sign KEY`)"
    )]
    Unsigned {
        /// The keys the worker trusts, as text.
        trusted: String,
    },
    /// Its signature was made with a key the worker does not trust.
    #[error(
        "refused: it is signed by key {key}, which this worker does not trust (it trusts {trusted}; add --trust {key} to trust it)"
    )]
    UntrustedKey {
        /// The key that signed it.
        key: PublicKey,
        /// The keys the worker trusts, as text.
        trusted: String,
    },
    /// Its signature does not match what is signed.
    #[error(
        "refused: its signature (by key {key}) does not match it: the component, its manifest or its name changed after it was signed (sign it again)"
    )]
    Mismatch {
        /// The key the signature names.
        key: PublicKey,
    },
    /// Its signature is not one.
    #[error("refused: its signature cannot be read: {0}")]
    Unreadable(KeyError),
}

/// A public key: the one half of a key pair a worker trusts.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// Reads a public key: a `.pub` file's line, or its base64 alone.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        let body = match text.split_once(char::is_whitespace) {
            Some((tag, body)) if tag == PUBLIC_TAG => body.trim(),
            Some((tag, _)) => {
                return Err(KeyError(format!(
                    "expected a public key (`{PUBLIC_TAG} BASE64`), found `{tag} ...`{}",
                    if tag == SECRET_TAG {
                        ": that is a secret key; give its .pub file"
                    } else {
                        ""
                    }
                )));
            }
            None => text,
        };
        Ok(PublicKey(decode_exact(body, "public key")?))
    }

    /// The key's line in a `.pub` file.
    pub fn to_line(&self) -> String {
        format!("{PUBLIC_TAG} {self}")
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&BASE64.encode(self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// A secret key: what signs plugins. Its `Debug` does not show it.
pub struct SigningKey {
    seed: [u8; 32],
    pair: Ed25519KeyPair,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey(public {})", self.public())
    }
}

impl SigningKey {
    /// A new key pair from the operating system's entropy source.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| KeyError(format!("no entropy to make a key from: {e}")))?;
        Self::from_seed(seed)
    }

    fn from_seed(seed: [u8; 32]) -> Result<Self, KeyError> {
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
            .map_err(|e| KeyError(format!("not an ed25519 key: {e}")))?;
        Ok(SigningKey { seed, pair })
    }

    /// Reads a secret key from its file's line.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        match text.split_once(char::is_whitespace) {
            Some((tag, body)) if tag == SECRET_TAG => {
                Self::from_seed(decode_exact(body.trim(), "secret key")?)
            }
            Some((tag, _)) => Err(KeyError(format!(
                "expected a secret key (`{SECRET_TAG} BASE64`), found `{tag} ...`{}",
                if tag == PUBLIC_TAG {
                    ": that is a public key; sign with the .key file made beside it"
                } else {
                    ""
                }
            ))),
            None => Err(KeyError(format!(
                "expected a secret key (`{SECRET_TAG} BASE64`), as `wasmgear keygen` writes"
            ))),
        }
    }

    /// The key's line in a `.key` file.
    pub fn to_line(&self) -> String {
        format!("{SECRET_TAG} {}", BASE64.encode(self.seed))
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(self.pair.public_key().as_ref());
        PublicKey(bytes)
    }

    /// The signature of the plugin `name` (its component and manifest text), as the line a
    /// `.sig` file or a deployed version holds.
    pub fn sign(&self, name: &str, component: &[u8], manifest: Option<&str>) -> String {
        let signature = self.pair.sign(&signed_message(name, component, manifest));
        format!(
            "{SIGNATURE_TAG} {} {}",
            self.public(),
            BASE64.encode(signature.as_ref())
        )
    }
}

/// The keys a worker trusts; with none, every plugin is run (signed or not).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    keys: Vec<PublicKey>,
}

impl Trust {
    /// Trusts the plugins signed by any of `keys` and no others; no keys trusts every plugin.
    pub fn keys(keys: Vec<PublicKey>) -> Self {
        Trust { keys }
    }

    /// Whether this policy checks signatures at all.
    pub fn is_enforced(&self) -> bool {
        !self.keys.is_empty()
    }

    /// Checks the plugin `name` (its component, manifest text and `signature` line, if
    /// any) against the trusted keys.
    pub fn check(
        &self,
        name: &str,
        component: &[u8],
        manifest: Option<&str>,
        signature: Option<&str>,
    ) -> Result<(), TrustError> {
        if self.keys.is_empty() {
            return Ok(());
        }
        let trusted = || self.to_string();
        let Some(signature) = signature.map(str::trim).filter(|s| !s.is_empty()) else {
            return Err(TrustError::Unsigned { trusted: trusted() });
        };
        let (key, bytes) = parse_signature(signature).map_err(TrustError::Unreadable)?;
        if !self.keys.contains(&key) {
            return Err(TrustError::UntrustedKey {
                key,
                trusted: trusted(),
            });
        }
        UnparsedPublicKey::new(&ED25519, key.0)
            .verify(&signed_message(name, component, manifest), &bytes)
            .map_err(|_| TrustError::Mismatch { key })
    }
}

impl fmt::Display for Trust {
    /// The trusted keys, separated by commas.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(ToString::to_string).collect();
        f.write_str(&keys.join(", "))
    }
}

/// The key a signature line names, and the signature's bytes.
pub fn parse_signature(text: &str) -> Result<(PublicKey, [u8; 64]), KeyError> {
    let mut parts = text.split_whitespace();
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(SIGNATURE_TAG), Some(key), Some(signature), None) => Ok((
            PublicKey(decode_exact(key, "signing key")?),
            decode_exact(signature, "signature")?,
        )),
        _ => Err(KeyError(format!(
            "expected `{SIGNATURE_TAG} KEY SIGNATURE`, as `wasmgear sign` writes"
        ))),
    }
}

/// What a signature covers.
fn signed_message(name: &str, component: &[u8], manifest: Option<&str>) -> Vec<u8> {
    let manifest = manifest.map_or_else(|| "none".to_string(), |m| hex(&Sha256::digest(m)));
    format!(
        "wasmgear plugin signature v1\nname: {name}\ncomponent-sha256: {}\nmanifest-sha256: {manifest}\n",
        hex(&Sha256::digest(component))
    )
    .into_bytes()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_exact<const N: usize>(text: &str, what: &str) -> Result<[u8; N], KeyError> {
    let bytes = BASE64
        .decode(text.trim())
        .map_err(|e| KeyError(format!("the {what} is not base64: {e}")))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| KeyError(format!("the {what} is {} bytes long, not {N}", b.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> SigningKey {
        SigningKey::generate().unwrap()
    }

    #[test]
    fn a_signed_plugin_passes_and_any_change_fails() {
        let key = pair();
        let trust = Trust::keys(vec![key.public()]);
        let sig = key.sign("resize", b"component", Some("concurrency = 2\n"));
        assert_eq!(
            trust.check(
                "resize",
                b"component",
                Some("concurrency = 2\n"),
                Some(&sig)
            ),
            Ok(())
        );
        for (name, component, manifest) in [
            ("resize", &b"componenT"[..], Some("concurrency = 2\n")),
            ("resize", b"component", Some("concurrency = 3\n")),
            ("resize", b"component", None),
            ("thumbnail", b"component", Some("concurrency = 2\n")),
        ] {
            assert_eq!(
                trust.check(name, component, manifest, Some(&sig)),
                Err(TrustError::Mismatch { key: key.public() }),
                "{name} {manifest:?}"
            );
        }
    }

    #[test]
    fn unsigned_untrusted_and_garbled_signatures_are_refused_with_reasons() {
        let (mine, theirs) = (pair(), pair());
        let trust = Trust::keys(vec![mine.public()]);
        let unsigned = trust.check("f", b"c", None, None).unwrap_err();
        assert!(unsigned.to_string().contains("not signed"), "{unsigned}");
        let theirs_sig = theirs.sign("f", b"c", None);
        let untrusted = trust.check("f", b"c", None, Some(&theirs_sig)).unwrap_err();
        assert!(
            untrusted
                .to_string()
                .contains(&format!("--trust {}", theirs.public())),
            "{untrusted}"
        );
        for garbled in ["nonsense", "wasmgear-signature-v1 AAAA BBBB", "  "] {
            let error = trust.check("f", b"c", None, Some(garbled)).unwrap_err();
            assert!(
                matches!(
                    error,
                    TrustError::Unreadable(_) | TrustError::Unsigned { .. }
                ),
                "{garbled}: {error}"
            );
        }
        // No keys: everything runs.
        assert_eq!(Trust::default().check("f", b"c", None, None), Ok(()));
    }

    #[test]
    fn keys_read_back_from_their_lines_and_are_told_apart() {
        let key = pair();
        let again = SigningKey::parse(&key.to_line()).unwrap();
        assert_eq!(again.public(), key.public());
        assert_eq!(PublicKey::parse(&key.public().to_line()), Ok(key.public()));
        assert_eq!(
            PublicKey::parse(&key.public().to_string()),
            Ok(key.public())
        );
        let wrong = PublicKey::parse(&key.to_line()).unwrap_err();
        assert!(wrong.to_string().contains("secret key"), "{wrong}");
        let wrong = SigningKey::parse(&key.public().to_line()).unwrap_err();
        assert!(wrong.to_string().contains("public key"), "{wrong}");
        assert!(PublicKey::parse("AAAA").is_err());
        assert!(!format!("{key:?}").contains(&key.to_line()));
    }
}
