//! A plugin: a component compiled and linked against the job world, ready to instantiate.

use std::path::{Path, PathBuf};

use crate::job::FunctionName;

use super::bindings::JobPre;
use super::engine::Runtime;
use super::run::JobState;

/// The first eight bytes of a WebAssembly component (magic, version 0x0d, layer 1).
const COMPONENT_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
/// The first eight bytes of a core WebAssembly module (magic, version 1).
const CORE_MODULE_HEADER: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

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
    /// The file is not WebAssembly at all (empty, truncated, or something else).
    #[error(
        "plugin {path:?} is not a WebAssembly component (it does not start with the wasm magic bytes)"
    )]
    NotWasm {
        /// The plugin file.
        path: PathBuf,
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

/// A loaded plugin: serves one function, instantiated afresh for each job.
pub struct Plugin {
    function: FunctionName,
    source: PathBuf,
    size: usize,
    pub(crate) pre: JobPre<JobState>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("function", &self.function)
            .field("source", &self.source)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// The function this plugin serves.
    pub fn function(&self) -> &FunctionName {
        &self.function
    }

    /// The file it was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }
}

impl Runtime {
    /// Reads, compiles and links the component at `path` to serve `function`.
    pub fn load_plugin(&self, function: FunctionName, path: &Path) -> Result<Plugin, PluginError> {
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.compile_plugin(function, path, &bytes)
    }

    /// Compiles and links `bytes` (read from `path`, which names it in errors).
    pub fn compile_plugin(
        &self,
        function: FunctionName,
        path: &Path,
        bytes: &[u8],
    ) -> Result<Plugin, PluginError> {
        let path_buf = || path.to_path_buf();
        match bytes.get(..8) {
            Some(header) if header == COMPONENT_HEADER => {}
            Some(header) if header == CORE_MODULE_HEADER => {
                return Err(PluginError::CoreModule { path: path_buf() });
            }
            Some(header) if header[..4] == COMPONENT_HEADER[..4] => {
                return Err(PluginError::Compile {
                    path: path_buf(),
                    reason: format!(
                        "unsupported WebAssembly version/layer {:02x?}",
                        &header[4..]
                    ),
                });
            }
            _ => return Err(PluginError::NotWasm { path: path_buf() }),
        }
        let component = wasmtime::component::Component::new(&self.engine, bytes).map_err(|e| {
            PluginError::Compile {
                path: path_buf(),
                reason: format!("{e:#}"),
            }
        })?;
        let instance_pre =
            self.linker
                .instantiate_pre(&component)
                .map_err(|e| PluginError::WorldMismatch {
                    path: path_buf(),
                    reason: format!("{e:#}"),
                })?;
        let pre = JobPre::new(instance_pre).map_err(|e| PluginError::WorldMismatch {
            path: path_buf(),
            reason: format!("{e:#}"),
        })?;
        Ok(Plugin {
            function,
            source: path_buf(),
            size: bytes.len(),
            pre,
        })
    }
}
