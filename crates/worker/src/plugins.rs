//! The plugin directory: every `NAME.wasm` in it serves function `NAME` (or the functions
//! its manifest `NAME.toml` names), and the directory is watched for changes.
//!
//! The registry maps function names to loaded plugins behind `Arc`s. A reload compiles the
//! new version off the job path and swaps the `Arc`s in one step: a job keeps the plugin it
//! started with, leases after the swap get the new one. A file that fails to load leaves the
//! previous version serving, with the reason kept in [`PluginRegistry::errors`]; it is
//! reported once and not loaded again until the file (or its manifest) changes.
//!
//! The directory is scanned when something in it is created, written, renamed or removed
//! (merely reading it, as a scan does, is no change), and every [`RESCAN`] as a safety net;
//! [`PluginRegistry::scans`] counts the scans.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use wasmgear_proto::FunctionName;
use wasmgear_proto::signing::{Trust, TrustError, signature_path};
use wasmgear_proto::sync::RwLocked;
use wasmgear_runtime::cache::sha256_hex;
use wasmgear_runtime::manifest;
use wasmgear_runtime::{Plugin, PluginError, Runtime};

/// The file extension of plugins.
pub const PLUGIN_EXTENSION: &str = "wasm";
/// How long the directory must be quiet before a change is loaded (a copy in progress, an
/// editor's save-via-temp-file and a symlink swap all settle within it).
pub const SETTLE: Duration = Duration::from_millis(200);
/// How often the directory is rescanned even without events (a safety net).
pub const RESCAN: Duration = Duration::from_secs(30);

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
    /// The directory cannot be watched.
    #[error("cannot watch the plugin directory {dir:?}: {reason}")]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// Why.
        reason: String,
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
    /// The worker trusts only signed plugins (`--trust`), and this one's signature
    /// (`NAME.wasm.sig`) is missing or invalid.
    #[error("{path:?} {reason}")]
    Untrusted {
        /// The plugin refused.
        path: PathBuf,
        /// Why.
        reason: TrustError,
    },
}

/// What one scan of the directory changed.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Plugins loaded for the first time or in a new version.
    pub loaded: Vec<Arc<Plugin>>,
    /// Plugin files that are gone; their functions are no longer served.
    pub removed: Vec<PathBuf>,
    /// Files that could not be loaded (a previous version, if any, keeps serving), each
    /// reported here once per change of the file: a file that failed to load is not loaded
    /// again, nor reported again, until it (or its manifest) changes.
    pub problems: Vec<LoadProblem>,
}

/// What the file system says about one file: any change of its content changes this (a
/// write changes its modification time, a replacement by rename its inode).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    changed: (i64, i64),
    inode: u64,
}

impl FileStamp {
    /// The stamp of `path`, or `None` when there is no such file.
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            changed: (meta.ctime(), meta.ctime_nsec()),
            inode: meta.ino(),
        })
    }
}

/// The stamps of a plugin file, its manifest and its signature (if any): what a load read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    wasm: Option<FileStamp>,
    manifest: Option<FileStamp>,
    signature: Option<FileStamp>,
}

impl Stamp {
    fn of(wasm: &Path) -> Self {
        Stamp {
            wasm: FileStamp::of(wasm),
            manifest: FileStamp::of(&manifest::manifest_path(wasm)),
            signature: FileStamp::of(&signature_path(wasm)),
        }
    }
}

/// The last failed load of a file: what it saw, and why it failed.
#[derive(Debug)]
struct Failure {
    stamp: Stamp,
    reason: String,
    /// Whether loading the same files again would fail the same way (a file that does not
    /// compile, a bad manifest), rather than depend on the other plugins (a duplicate).
    settled: bool,
}

#[derive(Debug, Default)]
struct State {
    by_file: BTreeMap<PathBuf, Arc<Plugin>>,
    by_function: BTreeMap<FunctionName, Arc<Plugin>>,
    errors: BTreeMap<PathBuf, String>,
    /// Directory files whose last load failed, with what that load saw.
    failures: BTreeMap<PathBuf, Failure>,
    /// Plugins from the deployed-plugin store, by function, with the manifest text they
    /// were deployed with; a function the directory serves is served from the directory.
    deployed: BTreeMap<FunctionName, (Arc<Plugin>, Option<String>)>,
}

/// The loaded plugins, by function name.
#[derive(Debug)]
pub struct PluginRegistry {
    state: RwLock<State>,
    generation: watch::Sender<u64>,
    loaded: AtomicU64,
    reloaded: AtomicU64,
    failed: AtomicU64,
    scans: AtomicU64,
    /// The keys a plugin must be signed by (none: every plugin is loaded).
    trust: Trust,
}

impl Default for PluginRegistry {
    fn default() -> Self {
        PluginRegistry {
            trust: Trust::default(),
            state: RwLock::default(),
            generation: watch::Sender::new(0),
            loaded: AtomicU64::new(0),
            reloaded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            scans: AtomicU64::new(0),
        }
    }
}

/// How many plugin loads the registry made since it was created, by result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadCounts {
    /// The first version of a file loaded.
    pub loaded: u64,
    /// A new version of a file swapped in for the one serving.
    pub reloaded: u64,
    /// A file that could not be loaded (the previous version, if any, kept serving): one
    /// per attempt, and a file that failed is attempted again only once it has changed.
    pub failed: u64,
}

impl PluginRegistry {
    /// Loads every `*.wasm` in `dir`. Returns the registry and the files that were refused;
    /// fails only when the directory is unreadable or nothing in it could be loaded.
    pub fn load_dir(
        runtime: &Runtime,
        dir: &Path,
    ) -> Result<(Self, Vec<LoadProblem>), RegistryError> {
        Self::load_dir_allow_empty(runtime, dir, false)
    }

    /// [`load_dir`](Self::load_dir), which, if `allow_empty`, also accepts a directory with
    /// no usable plugin (the worker's plugins come from elsewhere too, or will appear in the
    /// watched directory).
    pub fn load_dir_allow_empty(
        runtime: &Runtime,
        dir: &Path,
        allow_empty: bool,
    ) -> Result<(Self, Vec<LoadProblem>), RegistryError> {
        Self::load_dir_trusting(runtime, dir, allow_empty, Trust::default())
    }

    /// [`load_dir_allow_empty`](Self::load_dir_allow_empty) for a registry that loads only
    /// plugins signed by a key `trust` names, from the directory and from the store alike.
    pub fn load_dir_trusting(
        runtime: &Runtime,
        dir: &Path,
        allow_empty: bool,
        trust: Trust,
    ) -> Result<(Self, Vec<LoadProblem>), RegistryError> {
        let registry = PluginRegistry::trusting(trust);
        let report = registry.sync_dir(runtime, dir)?;
        if registry.functions().is_empty() && !allow_empty {
            return Err(RegistryError::NoPlugins {
                dir: dir.to_path_buf(),
                problems: report.problems,
            });
        }
        Ok((registry, report.problems))
    }

    /// An empty registry that loads only plugins signed by a key `trust` names.
    pub fn trusting(trust: Trust) -> Self {
        PluginRegistry {
            trust,
            ..PluginRegistry::default()
        }
    }

    /// The keys a plugin must be signed by.
    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// Brings the registry in line with `dir`: loads new and changed plugins (a file whose
    /// component and manifest are unchanged is not reloaded), drops removed ones, and keeps
    /// the previous version of a plugin whose new file fails to load.
    pub fn sync_dir(&self, runtime: &Runtime, dir: &Path) -> Result<SyncReport, RegistryError> {
        self.scans.fetch_add(1, Ordering::Relaxed);
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

        let mut report = SyncReport::default();
        let (known, failed): (Vec<PathBuf>, Vec<PathBuf>) = {
            let state = self.read();
            (
                state.by_file.keys().cloned().collect(),
                state.failures.keys().cloned().collect(),
            )
        };
        for gone in known.into_iter().filter(|p| !paths.contains(p)) {
            self.remove_file(&gone);
            report.removed.push(gone);
        }
        for gone in failed.into_iter().filter(|p| !paths.contains(p)) {
            self.remove_file(&gone);
        }
        for path in paths {
            let stamp = Stamp::of(&path);
            let repeat = match self.read().failures.get(&path) {
                // Failed as it is now, and would again: reported already.
                Some(last) if last.stamp == stamp && last.settled => continue,
                Some(last) if last.stamp == stamp => Some(last.reason.clone()),
                _ => None,
            };
            match self.load_if_changed(runtime, &path) {
                Ok(loaded) => {
                    self.write().failures.remove(&path);
                    report.loaded.extend(loaded);
                }
                Err(problem) => {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    let reason = problem.to_string();
                    let failure = Failure {
                        stamp,
                        reason: reason.clone(),
                        settled: matches!(
                            problem,
                            LoadProblem::Plugin(_) | LoadProblem::Untrusted { .. }
                        ),
                    };
                    let mut state = self.write();
                    state.errors.insert(path.clone(), reason.clone());
                    state.failures.insert(path, failure);
                    drop(state);
                    if repeat.as_ref() != Some(&reason) {
                        report.problems.push(problem);
                    }
                }
            }
        }
        if !report.loaded.is_empty() || !report.removed.is_empty() {
            self.generation.send_modify(|g| *g += 1);
        }
        Ok(report)
    }

    /// Loads the plugin at `path` unless the registry already has this exact version with
    /// this exact manifest; swaps it in on success.
    fn load_if_changed(
        &self,
        runtime: &Runtime,
        path: &Path,
    ) -> Result<Option<Arc<Plugin>>, LoadProblem> {
        // Read once: what is checked against the signature is what is loaded.
        let manifest_text = manifest::read_for(path).map_err(PluginError::from)?;
        let manifest =
            manifest::parse_for(path, manifest_text.as_deref()).map_err(PluginError::from)?;
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let version = &sha256_hex(&bytes)[..16];
        let current = self.read().by_file.get(path).cloned();
        if let Some(current) = &current
            && current.version() == version
            && *current.manifest() == manifest
        {
            self.write().errors.remove(path);
            return Ok(None);
        }
        self.check_signature(path, &bytes, manifest_text.as_deref())?;
        let plugin = Arc::new(runtime.compile_plugin(path, &bytes, manifest)?);
        self.swap_in(plugin.clone())?;
        let counter = match current {
            Some(_) => &self.reloaded,
            None => &self.loaded,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(Some(plugin))
    }

    /// Refuses the plugin at `path` (its component `bytes`) unless it is signed by a
    /// trusted key, when the registry trusts only signed plugins.
    fn check_signature(
        &self,
        path: &Path,
        bytes: &[u8],
        manifest: Option<&str>,
    ) -> Result<(), LoadProblem> {
        if !self.trust.is_enforced() {
            return Ok(());
        }
        let signature_path = signature_path(path);
        let signature = match std::fs::read_to_string(&signature_path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(PluginError::Read {
                    path: signature_path,
                    source,
                }
                .into());
            }
        };
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        self.trust
            .check(name, bytes, manifest, signature.as_deref())
            .map_err(|reason| LoadProblem::Untrusted {
                path: path.to_path_buf(),
                reason,
            })
    }

    fn swap_in(&self, plugin: Arc<Plugin>) -> Result<(), LoadProblem> {
        let mut state = self.write();
        let path = plugin.source().to_path_buf();
        for function in plugin.functions() {
            if let Some(other) = state.by_function.get(function)
                && other.source() != path
            {
                return Err(LoadProblem::Duplicate {
                    path,
                    function: function.clone(),
                    other: other.source().to_path_buf(),
                });
            }
        }
        state.by_function.retain(|_, p| p.source() != path);
        for function in plugin.functions() {
            state.by_function.insert(function.clone(), plugin.clone());
        }
        state.errors.remove(&path);
        state.by_file.insert(path, plugin);
        Ok(())
    }

    fn remove_file(&self, path: &Path) {
        let mut state = self.write();
        state.by_file.remove(path);
        state.by_function.retain(|_, p| p.source() != path);
        state.errors.remove(path);
        state.failures.remove(path);
    }

    /// Serves `functions` with `plugin`, deployed with `manifest` (its text), where the
    /// directory does not serve them; the plugin serving them before (if any) keeps running
    /// the jobs it started.
    pub fn set_deployed(
        &self,
        functions: &[FunctionName],
        plugin: Arc<Plugin>,
        manifest: Option<String>,
    ) {
        let mut state = self.write();
        let mut replaced = false;
        for function in functions {
            replaced |= state
                .deployed
                .insert(function.clone(), (plugin.clone(), manifest.clone()))
                .is_some();
            state.errors.remove(&deployed_source(function));
        }
        drop(state);
        let counter = if replaced {
            &self.reloaded
        } else {
            &self.loaded
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Stops serving `function` from the deployed-plugin store.
    pub fn remove_deployed(&self, function: &FunctionName) {
        let mut state = self.write();
        let removed = state.deployed.remove(function).is_some()
            | state.errors.remove(&deployed_source(function)).is_some();
        drop(state);
        if removed {
            self.generation.send_modify(|g| *g += 1);
        }
    }

    /// Records why the current deployed version of `function` could not be loaded (the
    /// version serving it, if any, keeps serving).
    pub fn deployed_failed(&self, function: &FunctionName, reason: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.write()
            .errors
            .insert(deployed_source(function), reason);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Function → the version and manifest text of the deployed plugin loaded for it.
    pub fn deployed(&self) -> BTreeMap<FunctionName, (String, Option<String>)> {
        self.read()
            .deployed
            .iter()
            .map(|(f, (p, m))| (f.clone(), (p.version().to_string(), m.clone())))
            .collect()
    }

    /// Whether `function` is served from the deployed-plugin store (not from the directory).
    pub fn is_deployed(&self, function: &FunctionName) -> bool {
        let state = self.read();
        !state.by_function.contains_key(function) && state.deployed.contains_key(function)
    }

    /// The plugin serving `function`, if any: the directory's, else the deployed one.
    pub fn get(&self, function: &FunctionName) -> Option<Arc<Plugin>> {
        let state = self.read();
        state
            .by_function
            .get(function)
            .or_else(|| state.deployed.get(function).map(|(p, _)| p))
            .cloned()
    }

    /// The functions served, in name order.
    pub fn functions(&self) -> Vec<FunctionName> {
        let state = self.read();
        let mut functions: Vec<FunctionName> = state
            .by_function
            .keys()
            .chain(state.deployed.keys())
            .cloned()
            .collect();
        functions.sort();
        functions.dedup();
        functions
    }

    /// The loaded plugins: the directory's by file, then the deployed ones.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        let state = self.read();
        let mut plugins: Vec<Arc<Plugin>> = state.by_file.values().cloned().collect();
        for (plugin, _) in state.deployed.values() {
            if !plugins.iter().any(|p| Arc::ptr_eq(p, plugin)) {
                plugins.push(plugin.clone());
            }
        }
        plugins
    }

    /// Files whose last load failed, and why (a previous version may still be serving).
    pub fn errors(&self) -> Vec<(PathBuf, String)> {
        self.read()
            .errors
            .iter()
            .map(|(p, e)| (p.clone(), e.clone()))
            .collect()
    }

    /// How many loads were made so far, by result.
    pub fn load_counts(&self) -> LoadCounts {
        LoadCounts {
            loaded: self.loaded.load(Ordering::Relaxed),
            reloaded: self.reloaded.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    /// How many times the plugin directory has been scanned (loaded, then on each change and
    /// every [`RESCAN`] while watched).
    pub fn scans(&self) -> u64 {
        self.scans.load(Ordering::Relaxed)
    }

    /// A receiver that sees a new value whenever the set of plugins changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read_locked()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write_locked()
    }
}

/// The name under which problems with the deployed plugin of `function` are reported.
pub fn deployed_source(function: &FunctionName) -> PathBuf {
    PathBuf::from(format!("deployed:{function}"))
}

/// Whether an event of `kind` in the directory may change what it serves: anything but a
/// file (or the directory) being opened or read without a write.
fn is_change(kind: &notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// Watches `dir` and keeps `registry` in line with it until the returned future is dropped.
/// Changes are loaded once the directory has been quiet for [`SETTLE`]; the directory is
/// also rescanned every [`RESCAN`]. Each problem is logged once per change of its file.
pub async fn watch(
    runtime: Arc<Runtime>,
    registry: Arc<PluginRegistry>,
    dir: PathBuf,
) -> Result<(), RegistryError> {
    use notify::RecursiveMode;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watch_error = |e: notify::Error| RegistryError::Watch {
        dir: dir.clone(),
        reason: e.to_string(),
    };
    let mut debouncer = notify_debouncer_full::new_debouncer(
        SETTLE,
        None,
        move |result: notify_debouncer_full::DebounceEventResult| {
            // A scan opens the directory and its files: that is no change to scan for.
            let changed = match result {
                Ok(events) => events.iter().any(|event| is_change(&event.kind)),
                Err(_) => true,
            };
            if changed {
                let _ = tx.send(());
            }
        },
    )
    .map_err(watch_error)?;
    debouncer
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(watch_error)?;
    // One scan now catches anything that changed between the first load and the watch.
    let mut pending = true;
    loop {
        if !pending {
            tokio::select! {
                event = rx.recv() => if event.is_none() { return Ok(()) },
                _ = tokio::time::sleep(RESCAN) => {}
            }
        }
        pending = false;
        while rx.try_recv().is_ok() {}
        let (runtime, registry, scan_dir) = (runtime.clone(), registry.clone(), dir.clone());
        let report =
            match tokio::task::spawn_blocking(move || registry.sync_dir(&runtime, &scan_dir)).await
            {
                Ok(Ok(report)) => report,
                Ok(Err(error)) => {
                    tracing::error!(%error, "cannot rescan the plugin directory");
                    continue;
                }
                Err(_) => continue,
            };
        for plugin in &report.loaded {
            tracing::info!(plugin = ?plugin.source(), version = plugin.version(), functions = ?plugin.functions(), "plugin loaded");
        }
        for path in &report.removed {
            tracing::info!(plugin = ?path, "plugin removed: its functions are no longer served");
        }
        for problem in &report.problems {
            tracing::error!(
                "{problem} (the previous version, if any, keeps serving; the file is loaded again once it changes)"
            );
        }
    }
}
