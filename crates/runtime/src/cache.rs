//! The compile cache: compiled components on disk, so that a worker restart with unchanged
//! plugins skips compilation.
//!
//! An entry is keyed by the component's SHA-256 and by a hash of the engine's configuration
//! and wasmtime version (`Engine::precompile_compatibility_hash`), so another configuration
//! never picks it up. Each file starts with the SHA-256 of its own contents; an entry whose
//! hash does not match (torn write, corruption) or that wasmtime refuses is rebuilt, never
//! used.
//!
//! The cache is bounded: after each write, entries beyond its size limit are deleted, least
//! recently used first (a hit refreshes an entry's modification time), so old plugin
//! versions do not pile up on disk.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where a compiled component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    /// Compiled now (no cache, or no usable entry; the entry was written).
    Compiled,
    /// Loaded from a verified cache entry.
    Cache,
}

/// A directory of compiled components.
#[derive(Debug, Clone)]
pub struct CompileCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// The most bytes of compiled components kept when nothing else is said (a Python or
/// JavaScript plugin compiles to about 30 MiB, a small Rust one to well under 1 MiB).
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1 << 30;

/// The extension of cache entries.
const ENTRY_EXTENSION: &str = "cwasm";

/// Feeds `Hash` output into SHA-256.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        0
    }
}

/// What names an engine configuration in entry names: the first 8 bytes, in hex, of the
/// SHA-256 of wasmtime's compatibility hash.
fn engine_hash(engine: &Engine) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex(&hasher.0.finalize()[..8])
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

impl CompileCache {
    /// A cache in `dir` (created when first written).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CompileCache {
            dir: dir.into(),
            max_bytes: DEFAULT_CACHE_MAX_BYTES,
        }
    }

    /// Keeps at most `max_bytes` of entries (the newest entry is kept even if larger).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    fn entry(&self, engine: &Engine, digest: &str) -> PathBuf {
        self.dir.join(format!(
            "{digest}-{}.{ENTRY_EXTENSION}",
            engine_hash(engine)
        ))
    }

    /// The cached component whose content hash starts with `prefix` (a plugin version),
    /// compiled for this engine's configuration, and its whole hash; `None` when there is
    /// none (or its entry does not verify).
    pub(crate) fn find(&self, engine: &Engine, prefix: &str) -> Option<(String, Component)> {
        let suffix = format!("-{}.{ENTRY_EXTENSION}", engine_hash(engine));
        let entries = std::fs::read_dir(&self.dir).ok()?;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(digest) = name.to_str().and_then(|n| n.strip_suffix(&suffix)) else {
                continue;
            };
            if digest.starts_with(prefix)
                && let Some(component) = self.read(engine, &entry.path())
            {
                return Some((digest.to_string(), component));
            }
        }
        None
    }

    /// The component with content hash `digest`: from a verified cache entry, or compiled
    /// from `bytes` (and then cached; a cache that cannot be written is only logged).
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CompileSource)> {
        let path = self.entry(engine, digest);
        if let Some(component) = self.read(engine, &path) {
            // Recently used: the last to be evicted.
            let touched = std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|file| file.set_modified(std::time::SystemTime::now()));
            if let Err(error) = touched {
                tracing::debug!(path = ?path, %error, "cannot mark the cache entry as used");
            }
            return Ok((component, CompileSource::Cache));
        }
        let component = Component::new(engine, bytes)?;
        if let Err(error) = self.write(&path, &component) {
            tracing::warn!(path = ?path, %error, "cannot write the compile cache entry");
        }
        if let Err(error) = self.evict(&path) {
            tracing::warn!(dir = ?self.dir, %error, "cannot trim the compile cache");
        }
        Ok((component, CompileSource::Compiled))
    }

    // One of our two unsafe calls (the other: SIGPIPE in host/src/main.rs): loading
    // precompiled code (see the SAFETY note).
    #[allow(unsafe_code)]
    fn read(&self, engine: &Engine, path: &Path) -> Option<Component> {
        let data = std::fs::read(path).ok()?;
        let (checksum, body) = data.split_at_checked(32)?;
        if Sha256::digest(body).as_slice() != checksum {
            tracing::warn!(path = ?path, "compile cache entry is corrupt; recompiling");
            return None;
        }
        // SAFETY: the bytes are what `Component::serialize` wrote for this very engine
        // configuration (the file name says which) and are unchanged since (the checksum
        // says so); wasmtime also checks its own header and version.
        match unsafe { Component::deserialize(engine, body) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = ?path, %error, "compile cache entry refused; recompiling");
                None
            }
        }
    }

    fn write(&self, path: &Path, component: &Component) -> std::io::Result<()> {
        let body = component.serialize().map_err(std::io::Error::other)?;
        std::fs::create_dir_all(&self.dir)?;
        let mut data = Sha256::digest(&body).to_vec();
        data.extend_from_slice(&body);
        // Write beside, then rename: a reader never sees half an entry.
        let temp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&temp, &data)?;
        std::fs::rename(&temp, path)
    }

    /// Deletes entries, least recently used first, until the cache holds at most its limit
    /// (`keep`, the entry just written, stays), and temporary files left by a crash.
    fn evict(&self, keep: &Path) -> std::io::Result<()> {
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
            if extension.starts_with("tmp") {
                // Another worker may be writing it now: only old ones are leftovers.
                if used
                    .elapsed()
                    .is_ok_and(|age| age > std::time::Duration::from_secs(3600))
                {
                    let _ = std::fs::remove_file(&path);
                }
            } else if extension == ENTRY_EXTENSION && meta.is_file() {
                entries.push((used, meta.len(), path));
            }
        }
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if path == keep {
                continue;
            }
            match std::fs::remove_file(&path) {
                // Another worker sharing the cache evicted it first.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                result => result?,
            }
            tracing::info!(path = ?path, "compile cache full: removed the least recently used entry");
            total -= len;
        }
        Ok(())
    }
}
