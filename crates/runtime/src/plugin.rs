//! A plugin: a component compiled and linked against the job world, ready to instantiate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use wasmgear_proto::FunctionName;

use super::bindings::{BatchPre, JobPre};
use super::cache::{CompileSource, sha256_hex};
use super::engine::{Limits, Runtime};
use super::manifest::{self, BatchSettings, Capabilities, JobDefaults, Manifest, ManifestError};
use super::run::StoreData;

/// What the first bytes of a plugin file say it is, when it is not a component.
#[derive(Debug, PartialEq)]
enum HeaderError {
    CoreModule,
    NotWasm(String),
}

impl HeaderError {
    fn at(self, path: PathBuf) -> PluginError {
        match self {
            HeaderError::CoreModule => PluginError::CoreModule { path },
            HeaderError::NotWasm(reason) => PluginError::NotWasm { path, reason },
        }
    }
}

/// Checks that `bytes` start as a component does (wasmparser reads the header), before the
/// compiler is asked.
fn check_header(bytes: &[u8]) -> Result<(), HeaderError> {
    use wasmtime_wasmparser::Parser;
    if Parser::is_component(bytes) {
        return Ok(());
    }
    if Parser::is_core_wasm(bytes) {
        return Err(HeaderError::CoreModule);
    }
    let reason = match Parser::new(0).parse(bytes, true) {
        Err(error) => error.message().to_string(),
        Ok(_) => "its header is neither a component's nor a core module's".to_string(),
    };
    Err(HeaderError::NotWasm(reason))
}

/// Why a plugin could not be loaded. Each message names the file and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read.
    #[error("cannot read plugin {path:?}: {source}")]
    Read {
        /// The plugin file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not WebAssembly at all (empty, truncated, something else) or of a binary
    /// version this worker does not know.
    #[error("plugin {path:?} is not a WebAssembly component: {reason}")]
    NotWasm {
        /// The plugin file.
        path: PathBuf,
        /// What is wrong with its header, as wasmparser says it.
        reason: String,
    },
    /// The file is a core module, not a component.
    #[error(
        "plugin {path:?} is a core WebAssembly module, not a component: build it for wasm32-wasip2 \
         or wrap it with `wasm-tools component new`"
    )]
    CoreModule {
        /// The plugin file.
        path: PathBuf,
    },
    /// Compilation failed (the bytes are corrupt or use unsupported features).
    #[error("plugin {path:?} does not compile: {reason}")]
    Compile {
        /// The plugin file.
        path: PathBuf,
        /// The compiler's message.
        reason: String,
    },
    /// The file name is not a valid function name (and no manifest names the functions).
    #[error("plugin {path:?} is skipped: {reason}")]
    BadName {
        /// The plugin file.
        path: PathBuf,
        /// Why the name is refused.
        reason: String,
    },
    /// The manifest beside the component is refused.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The component does not fit the `wasmgear:job` world (a missing export, or an import
    /// the host does not provide).
    #[error("plugin {path:?} does not implement the wasmgear:job@0.1.0 world: {reason}")]
    WorldMismatch {
        /// The plugin file.
        path: PathBuf,
        /// What does not match.
        reason: String,
    },
}

/// The functions a plugin at `path` serves: those its manifest names, else the one named
/// like the file.
fn plugin_functions(path: &Path, manifest: &Manifest) -> Result<Vec<FunctionName>, PluginError> {
    if !manifest.functions.is_empty() {
        return Ok(manifest.functions.clone());
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    Ok(vec![FunctionName::new(stem).map_err(|e| {
        PluginError::BadName {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    })?])
}

/// What a plugin's component exports: a handler of one job per call (`handler`, the job
/// worlds), or of batches (`batch-handler`, the `batch` world).
pub(crate) enum Entry {
    Job(JobPre<StoreData>),
    Batch(BatchPre<StoreData>),
}

/// A loaded plugin: a compiled component, its manifest, and the limits its jobs run with.
/// Instantiated afresh for each job.
pub struct Plugin {
    functions: Vec<FunctionName>,
    source: PathBuf,
    size: usize,
    version: String,
    compiled_from: CompileSource,
    pub(crate) limits: Limits,
    pub(crate) max_timeout: Option<Duration>,
    pub(crate) fuel: Option<u64>,
    pub(crate) capabilities: Capabilities,
    pub(crate) child_grants: Arc<Vec<FunctionName>>,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    pub(crate) http_allow: Arc<Vec<String>>,
    defaults: JobDefaults,
    concurrency: Option<usize>,
    manifest: Manifest,
    in_flight: AtomicUsize,
    /// Whether the component imports `wasmgear:job/checkpoint`.
    saves_checkpoints: bool,
    pub(crate) entry: Entry,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("functions", &self.functions)
            .field("source", &self.source)
            .field("size", &self.size)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The WIT interface of checkpoints, as a component's imports name it (with its version).
const CHECKPOINT_INTERFACE: &str = "wasmgear:job/checkpoint@";

impl Plugin {
    /// Whether the plugin's jobs may save checkpoints (its component imports
    /// `wasmgear:job/checkpoint`): the worker keeps them only for those.
    pub fn saves_checkpoints(&self) -> bool {
        self.saves_checkpoints
    }

    /// Whether the component is a batch plugin's (it exports `batch-handler`).
    pub fn is_batch(&self) -> bool {
        matches!(self.entry, Entry::Batch(_))
    }

    /// How the worker gathers this batch plugin's jobs into one call (its manifest's
    /// `batch`); `None` for a plugin of one job per call, and for a batch plugin whose
    /// manifest does not say (it gets one job per call).
    pub fn batch(&self) -> Option<&BatchSettings> {
        self.manifest.batch.as_ref().filter(|_| self.is_batch())
    }

    /// The limits every job of this plugin runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The longest timeout a job of this plugin may ask for, if the manifest caps it.
    pub fn max_timeout(&self) -> Option<Duration> {
        self.max_timeout
    }

    /// The fuel each job gets, if fuel metering is on.
    pub fn fuel(&self) -> Option<u64> {
        self.fuel
    }

    /// The functions this plugin serves.
    pub fn functions(&self) -> &[FunctionName] {
        &self.functions
    }

    /// The file it was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The plugin's version: the first 16 hex digits of the SHA-256 of the component.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Whether the component was compiled now or loaded from the compile cache.
    pub fn compiled_from(&self) -> CompileSource {
        self.compiled_from
    }

    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The manifest it was loaded with (the default one when there was no file).
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Defaults for jobs enqueued without their own attempts or timeout.
    pub fn defaults(&self) -> &JobDefaults {
        &self.defaults
    }

    /// How many more jobs of this plugin may start now (`usize::MAX`: no plugin limit).
    pub fn free_slots(&self) -> usize {
        match self.concurrency {
            Some(limit) => limit.saturating_sub(self.in_flight.load(Ordering::Relaxed)),
            None => usize::MAX,
        }
    }

    /// Counts a job of this plugin as running until the returned guard is dropped.
    pub fn start_job(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }
}

/// A running job of a plugin, counted against its concurrency.
pub struct InFlight(Arc<Plugin>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Runtime {
    /// Reads the component at `path` and the manifest beside it (`NAME.toml`), compiles and
    /// links the component. It serves the functions the manifest names, or else the
    /// function named like the file.
    pub fn load_plugin(&self, path: &Path) -> Result<Plugin, PluginError> {
        let manifest = manifest::load_for(path)?;
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.compile_plugin(path, &bytes, manifest)
    }

    /// Compiles and links `bytes` (read from `path`, which names it in errors) with
    /// `manifest`.
    pub fn compile_plugin(
        &self,
        path: &Path,
        bytes: &[u8],
        manifest: Manifest,
    ) -> Result<Plugin, PluginError> {
        let path_buf = || path.to_path_buf();
        // Cheap checks first: a bad name or limit is refused before compiling.
        plugin_functions(path, &manifest)?;
        self.plugin_limits(path, &manifest)?;
        check_header(bytes).map_err(|error| error.at(path_buf()))?;
        let digest = sha256_hex(bytes);
        let compiled = match &self.cache {
            Some(cache) => cache.load_or_compile(&self.engine, &digest, bytes),
            None => wasmtime::component::Component::new(&self.engine, bytes)
                .map(|c| (c, CompileSource::Compiled)),
        };
        let (component, compiled_from) = compiled.map_err(|e| {
            let mut reason = format!("{e:#}");
            // The pooling allocator refuses a memory that starts above the per-job limit.
            if reason.contains("pooling allocator") && reason.contains("memory") {
                reason.push_str(&format!(
                    " (the memory limit of a job here is {} bytes: raise --memory-limit, or \
                     build the plugin with a smaller initial memory)",
                    self.limits.memory_bytes
                ));
            }
            PluginError::Compile {
                path: path_buf(),
                reason,
            }
        })?;
        self.link_plugin(
            path,
            component,
            compiled_from,
            &digest,
            bytes.len(),
            manifest,
        )
    }

    /// The plugin whose version (content hash prefix) is `version`, from the compile cache
    /// alone, with `manifest`; named `path` in errors (its stem names the function when the
    /// manifest names none). `None` when the cache has no such build for this engine.
    pub fn cached_plugin(
        &self,
        path: &Path,
        version: &str,
        manifest: Manifest,
    ) -> Option<Result<Plugin, PluginError>> {
        let (digest, component) = self.cache.as_ref()?.find(&self.engine, version)?;
        Some(self.link_plugin(path, component, CompileSource::Cache, &digest, 0, manifest))
    }

    /// Links compiled `component` (content hash `digest`, `size` bytes) against the job
    /// world, with `manifest`'s functions and limits.
    fn link_plugin(
        &self,
        path: &Path,
        component: wasmtime::component::Component,
        compiled_from: CompileSource,
        digest: &str,
        size: usize,
        manifest: Manifest,
    ) -> Result<Plugin, PluginError> {
        let path_buf = || path.to_path_buf();
        let functions = plugin_functions(path, &manifest)?;
        let limits = self.plugin_limits(path, &manifest)?;
        let instance_pre =
            self.linker
                .instantiate_pre(&component)
                .map_err(|e| PluginError::WorldMismatch {
                    path: path_buf(),
                    reason: format!("{e:#}"),
                })?;
        let entry = match JobPre::new(instance_pre.clone()) {
            Ok(pre) => Entry::Job(pre),
            Err(job_error) => match BatchPre::new(instance_pre) {
                Ok(pre) => Entry::Batch(pre),
                Err(_) => {
                    return Err(PluginError::WorldMismatch {
                        path: path_buf(),
                        reason: format!(
                            "{job_error:#} (a batch plugin exports wasmgear:job/batch-handler instead)"
                        ),
                    });
                }
            },
        };
        if manifest.batch.is_some() && matches!(entry, Entry::Job(_)) {
            return Err(PluginError::Manifest(ManifestError::Field {
                path: manifest::manifest_path(path),
                field: "batch".to_string(),
                reason: "is set, but the component exports wasmgear:job/handler (one job per \
                         call): build it against the world `batch`, which exports batch-handler, \
                         or drop `batch`"
                    .to_string(),
            }));
        }
        let saves_checkpoints = component
            .component_type()
            .imports(&self.engine)
            .any(|(name, _)| name.starts_with(CHECKPOINT_INTERFACE));
        Ok(Plugin {
            functions,
            source: path_buf(),
            size,
            version: digest[..16].to_string(),
            compiled_from,
            limits,
            max_timeout: manifest.limits.max_timeout,
            fuel: manifest.limits.fuel,
            config: Arc::new(manifest.capabilities.config.clone()),
            http_allow: Arc::new(manifest.capabilities.http_allow.clone()),
            child_grants: Arc::new(manifest.capabilities.enqueue.clone()),
            capabilities: manifest.capabilities.clone(),
            defaults: manifest.defaults.clone(),
            concurrency: manifest.concurrency,
            manifest,
            in_flight: AtomicUsize::new(0),
            saves_checkpoints,
            entry,
        })
    }

    /// The worker's limits with the manifest's overrides, which may only tighten the
    /// memory limit (the pooling allocator reserves the worker's) and need fuel enabled.
    fn plugin_limits(&self, path: &Path, manifest: &Manifest) -> Result<Limits, PluginError> {
        let field = |field: &str, reason: String| {
            PluginError::Manifest(ManifestError::Field {
                path: manifest::manifest_path(path),
                field: field.to_string(),
                reason,
            })
        };
        let mut limits = self.limits.clone();
        if let Some(memory) = manifest.limits.memory_bytes {
            if memory > self.limits.memory_bytes {
                return Err(field(
                    "limits.memory",
                    format!(
                        "asks for {memory} bytes, more than this worker's limit of {} bytes \
                         (raise it with `wasmgear worker --memory-limit`)",
                        self.limits.memory_bytes
                    ),
                ));
            }
            limits.memory_bytes = memory;
        }
        if let Some(output) = manifest.limits.output_bytes {
            limits.output_bytes = output;
        }
        if let Some(lines) = manifest.limits.log_lines {
            limits.log_lines = lines;
        }
        if let Some(bytes) = manifest.limits.checkpoint_bytes {
            limits.checkpoint_bytes = bytes;
        }
        if manifest.limits.fuel.is_some() && !self.fuel {
            return Err(field(
                "limits.fuel",
                "needs fuel metering, which this worker runs without (start it with --fuel)".into(),
            ));
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::{HeaderError, check_header};

    #[test]
    fn headers_tell_components_from_modules_and_from_other_files() {
        let component = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
        assert_eq!(check_header(&component), Ok(()));
        let module = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
        assert_eq!(check_header(&module), Err(HeaderError::CoreModule));
        let reason = |bytes: &[u8]| match check_header(bytes) {
            Err(HeaderError::NotWasm(reason)) => reason,
            other => panic!("{bytes:?}: {other:?}"),
        };
        assert!(reason(b"").contains("end-of-file"), "{}", reason(b""));
        assert!(
            reason(b"#!/bin/sh\n").contains("magic"),
            "{}",
            reason(b"#!")
        );
        let future = [0x00, 0x61, 0x73, 0x6d, 0x0e, 0x00, 0x01, 0x00];
        assert!(reason(&future).contains("version"), "{}", reason(&future));
    }
}
