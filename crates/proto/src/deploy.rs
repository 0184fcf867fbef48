//! What the deployed-plugin store keeps about each version (`wasmgear deploy`).

use serde::{Deserialize, Serialize};

/// The size of one stored chunk of a component: a 20 MiB Python plugin is 20 chunks, each
/// one ordinary Redis value.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// How many versions of each function are kept when nothing else is said (besides any
/// version a kept job's history names).
pub const DEFAULT_KEEP: u32 = 10;

/// The version of a component: the first 16 hex digits of its SHA-256, as workers report it
/// in each attempt's history.
pub fn version_of(sha256_hex: &str) -> &str {
    sha256_hex.get(..16).unwrap_or(sha256_hex)
}

/// One deployed version of one function, as the store's `versions` hash holds it (field
/// `FUNCTION VERSION`). A plugin serving several functions has one record per function,
/// sharing the chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployedVersion {
    /// The function this record is a version of.
    #[serde(default)]
    pub function: String,
    /// The version: the first 16 hex digits of `sha256`.
    pub version: String,
    /// The SHA-256 of the whole component, in hex: what a worker checks the chunks against.
    pub sha256: String,
    /// The component's size in bytes.
    pub size: u64,
    /// How many chunks it is stored in.
    pub chunks: u32,
    /// The name of the file deployed, without `.wasm` (the function it serves when the
    /// manifest names none).
    pub name: String,
    /// Every function the plugin was deployed for (this record's and the others of the same
    /// deploy).
    pub functions: Vec<String>,
    /// The manifest's text, if one was deployed with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// When it was (last) deployed, ms since the epoch (Redis' clock).
    #[serde(default)]
    pub deployed_ms: u64,
    /// Its signature line (`wasmgear deploy --sign KEY`, see [`crate::signing`]), over its
    /// name, component and manifest; a worker started with `--trust` refuses a version
    /// without one by a key it trusts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// The field of a version of a function in the store's `versions` hash.
pub fn field(function: &str, version: &str) -> String {
    format!("{function} {version}")
}

impl DeployedVersion {
    /// The chunk numbers, in order.
    pub fn chunk_numbers(&self) -> std::ops::Range<u32> {
        0..self.chunks
    }

    /// Whether it serves `function`.
    pub fn serves(&self, function: &str) -> bool {
        self.functions.iter().any(|f| f == function)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_the_first_sixteen_hex_digits() {
        let sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert_eq!(version_of(sha), "0123456789abcdef");
        assert_eq!(version_of("abc"), "abc");
    }

    #[test]
    fn the_stored_record_reads_back_without_optional_fields() {
        let text = r#"{"version":"v","sha256":"s","size":3,"chunks":1,"name":"echo","functions":["echo"]}"#;
        let v: DeployedVersion = serde_json::from_str(text).unwrap();
        assert!(v.serves("echo") && !v.serves("other"));
        assert_eq!(v.manifest, None);
        assert_eq!(v.chunk_numbers().count(), 1);
    }
}
