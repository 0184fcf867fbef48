//! The plugin directory: every `NAME.wasm` in it serves function `NAME` (or the functions
//! its manifest `NAME.toml` names).
//!
//! The registry maps function names to loaded plugins behind `Arc`s, so a job keeps the
//! plugin it started with even if the registry changes while it runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::job::FunctionName;
use crate::runtime::{Plugin, PluginError, Runtime};

/// The file extension of plugins.
pub const PLUGIN_EXTENSION: &str = "wasm";

/// Why the plugin directory as a whole is unusable.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The directory cannot be listed.
    #[error(
        "cannot read the plugin directory {dir:?}: {source} (pass an existing directory with --plugins or WASMGEAR_PLUGINS)"
    )]
    Unreadable {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not one plugin could be loaded from the directory.
    #[error("no usable plugin in {dir:?}: put components named FUNCTION.wasm there{}", problems_text(.problems))]
    NoPlugins {
        /// The directory.
        dir: PathBuf,
        /// Why each `.wasm` file there was refused.
        problems: Vec<LoadProblem>,
    },
}

fn problems_text(problems: &[LoadProblem]) -> String {
    problems.iter().map(|p| format!("\n  - {p}")).collect()
}

/// Why one file in the plugin directory was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadProblem {
    /// The plugin (or its manifest) could not be loaded.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// Another plugin already serves one of its functions.
    #[error("{path:?} is skipped: function {function} is already served by {other:?}")]
    Duplicate {
        /// The plugin skipped.
        path: PathBuf,
        /// The function both claim.
        function: FunctionName,
        /// The plugin that keeps it.
        other: PathBuf,
    },
}

/// The loaded plugins, by function name.
#[derive(Debug, Default)]
pub struct PluginRegistry {
    plugins: RwLock<BTreeMap<FunctionName, Arc<Plugin>>>,
}

impl PluginRegistry {
    /// Loads every `*.wasm` in `dir`. Returns the registry and the files that were refused;
    /// fails only when the directory is unreadable or nothing in it could be loaded.
    pub fn load_dir(
        runtime: &Runtime,
        dir: &Path,
    ) -> Result<(Self, Vec<LoadProblem>), RegistryError> {
        let unreadable = |source| RegistryError::Unreadable {
            dir: dir.to_path_buf(),
            source,
        };
        let mut paths = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(unreadable)? {
            let path = entry.map_err(unreadable)?.path();
            if path.extension().is_some_and(|e| e == PLUGIN_EXTENSION) && path.is_file() {
                paths.push(path);
            }
        }
        paths.sort();

        let registry = PluginRegistry::default();
        let mut problems = Vec::new();
        for path in paths {
            match runtime.load_plugin(&path) {
                Ok(plugin) => {
                    if let Err(problem) = registry.insert(plugin) {
                        problems.push(problem);
                    }
                }
                Err(error) => problems.push(error.into()),
            }
        }
        if registry.functions().is_empty() {
            return Err(RegistryError::NoPlugins {
                dir: dir.to_path_buf(),
                problems,
            });
        }
        Ok((registry, problems))
    }

    /// Adds a plugin for each function it serves; refused if another plugin serves one of
    /// them already.
    pub fn insert(&self, plugin: Plugin) -> Result<(), LoadProblem> {
        let mut plugins = self.plugins.write().unwrap_or_else(|e| e.into_inner());
        for function in plugin.functions() {
            if let Some(other) = plugins.get(function) {
                return Err(LoadProblem::Duplicate {
                    path: plugin.source().to_path_buf(),
                    function: function.clone(),
                    other: other.source().to_path_buf(),
                });
            }
        }
        let plugin = Arc::new(plugin);
        for function in plugin.functions() {
            plugins.insert(function.clone(), plugin.clone());
        }
        Ok(())
    }

    /// The plugin serving `function`, if any.
    pub fn get(&self, function: &FunctionName) -> Option<Arc<Plugin>> {
        self.plugins
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(function)
            .cloned()
    }

    /// The functions served, in name order.
    pub fn functions(&self) -> Vec<FunctionName> {
        self.plugins
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}
