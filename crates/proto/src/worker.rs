//! What workers tell the queue about themselves: the worker list.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a worker advertises in the worker list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerAd {
    /// The machine's host name.
    pub host: String,
    /// The worker's process id.
    pub pid: u32,
    /// The wasmgear version.
    pub version: String,
    /// When the worker started, ms since the epoch.
    pub started_ms: u64,
    /// The most jobs it runs at once.
    pub concurrency: usize,
    /// Function → version (content hash) of the plugin serving it.
    pub functions: BTreeMap<String, String>,
    /// Ids of the jobs it runs now.
    pub running: Vec<String>,
    /// Plugin files that failed to load, with the reason.
    pub plugin_errors: Vec<String>,
    /// The queues it serves besides wasmgear's own on this Redis (`gearmonkey`,
    /// `gearmonkey@redis://host:6380`, ...); empty for wasmgear's own queue alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// The functions it serves from the deployed-plugin store (`--plugins-from-redis`); the
    /// others come from its plugin directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deployed: Vec<String>,
    /// The functions served by batch plugins → the most jobs one call takes
    /// (their manifests' `batch.max`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub batches: BTreeMap<String, usize>,
}

/// A live worker as the worker list holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveWorker {
    /// The worker's id (host, pid and a random part).
    pub id: String,
    /// When its entry runs out unless renewed, ms since the epoch.
    pub expires_ms: u64,
    /// What it advertises; `Err` holds the stored text when it does not read as a
    /// [`WorkerAd`] (a worker of another version).
    pub ad: Result<WorkerAd, String>,
}

impl LiveWorker {
    /// Reads a worker-list entry.
    pub fn read(id: String, ad: &str, expires_ms: u64) -> Self {
        let ad = serde_json::from_str(ad).map_err(|_| ad.to_string());
        LiveWorker { id, expires_ms, ad }
    }
}
