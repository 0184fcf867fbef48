//! The plugin directory: every `NAME.wasm` in it serves function `NAME`.
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
    /// The file name is not a valid function name.
    #[error("{path:?} is skipped: {reason}")]
    BadName {
        /// The file.
        path: PathBuf,
        /// Why the name is refused.
        reason: String,
    },
    /// The component could not be loaded.
    #[error(transparent)]
    Plugin(#[from] PluginError),
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
            match load_one(runtime, &path) {
                Ok(plugin) => registry.insert(plugin),
                Err(problem) => problems.push(problem),
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

    /// Adds or replaces the plugin for its function.
    pub fn insert(&self, plugin: Plugin) {
        let mut plugins = self.plugins.write().unwrap_or_else(|e| e.into_inner());
        plugins.insert(plugin.function().clone(), Arc::new(plugin));
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

/// Loads the plugin at `path`, named after the file's stem.
fn load_one(runtime: &Runtime, path: &Path) -> Result<Plugin, LoadProblem> {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let function = FunctionName::new(stem).map_err(|e| LoadProblem::BadName {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(runtime.load_plugin(function, path)?)
}
