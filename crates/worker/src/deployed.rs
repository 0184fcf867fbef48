//! Plugins deployed through Redis (`wasmgear deploy`, `wasmgear worker --plugins-from-redis`).
//!
//! The worker reads the current version of each deployed function, fetches the versions it
//! does not have (chunk by chunk, checked against their SHA-256), compiles them through the
//! compile cache off the job path and swaps them into the registry exactly as a hot reload
//! does: running jobs finish on the version they started with. It learns of a deploy at
//! once from the store's channel and re-reads the registry every [`POLL`] as a safety net
//! (a message missed while Redis was unreachable). A version that cannot be fetched or
//! loaded, or (for a worker started with `--trust`) is not signed by a trusted key, is
//! refused with the reason in the worker list, and the version before it keeps serving. A function the plugin directory also serves is served from the directory. At
//! each reading it also collects the chunks nothing needs any more
//! ([`Client::collect_deployed`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use wasmgear_client::Client;
use wasmgear_client::subscriber::Delivery;
use wasmgear_proto::deploy::DeployedVersion;

use crate::plugins::PluginRegistry;
use wasmgear_proto::FunctionName;
use wasmgear_runtime::{Plugin, Runtime, manifest};

/// How often the registry is re-read even without a message.
pub const POLL: Duration = Duration::from_secs(10);

/// The path a deployed version is known by in messages (`deployed:VERSION/NAME.wasm`); its
/// stem names the function when the manifest names none.
pub fn source_path(record: &DeployedVersion) -> PathBuf {
    PathBuf::from(format!("deployed:{}/{}.wasm", record.version, record.name))
}

/// What makes one build of a deployed plugin: its version, its name and its manifest.
type Build = (String, String, Option<String>);

/// What one reading of the registry changed.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Versions loaded, with the functions they now serve.
    pub loaded: Vec<(Arc<Plugin>, Vec<FunctionName>)>,
    /// Functions whose current version could not be loaded, and why.
    pub failed: Vec<(FunctionName, String)>,
}

/// Brings the deployed plugins of `registry` in line with the store's current versions.
/// Fails only when Redis cannot be read.
pub async fn sync(
    client: &Client,
    runtime: &Arc<Runtime>,
    registry: &Arc<PluginRegistry>,
) -> Result<SyncReport, wasmgear_client::QueueError> {
    let current = client.deployed_current().await?;
    let loaded = registry.deployed();
    for function in loaded.keys() {
        if !current.contains_key(function.as_str()) {
            registry.remove_deployed(function);
        }
    }
    let mut report = SyncReport::default();
    // The functions whose current version is not loaded, grouped by what serves them (one
    // compilation for a plugin deployed for several functions).
    let mut wanted: BTreeMap<Build, (DeployedVersion, Vec<FunctionName>)> = BTreeMap::new();
    for (function, version) in &current {
        let Ok(function) = FunctionName::new(function) else {
            continue;
        };
        let record = match client.deployed_version(&function, version).await {
            Ok(Some(record)) => record,
            Ok(None) => {
                let reason = format!(
                    "current deployed version {version} is not in the store (deploy it again)"
                );
                fail_all(registry, &[function], &reason, &mut report);
                continue;
            }
            Err(wasmgear_client::QueueError::Redis(e)) => return Err(e.into()),
            Err(error) => {
                fail_all(registry, &[function], &error.to_string(), &mut report);
                continue;
            }
        };
        if loaded
            .get(&function)
            .is_some_and(|(v, m)| v == version && *m == record.manifest)
        {
            continue;
        }
        let key = (
            record.version.clone(),
            record.name.clone(),
            record.manifest.clone(),
        );
        wanted
            .entry(key)
            .or_insert_with(|| (record, Vec::new()))
            .1
            .push(function);
    }
    for (record, functions) in wanted.into_values() {
        let bytes = match client.fetch_deployed(&record).await {
            Ok(bytes) => bytes,
            Err(wasmgear_client::QueueError::Redis(e)) => return Err(e.into()),
            Err(error) => {
                fail_all(registry, &functions, &error.to_string(), &mut report);
                continue;
            }
        };
        let compiled = {
            let runtime = runtime.clone();
            let record = record.clone();
            let trust = registry.trust().clone();
            tokio::task::spawn_blocking(move || {
                trust
                    .check(
                        &record.name,
                        &bytes,
                        record.manifest.as_deref(),
                        record.signature.as_deref(),
                    )
                    .map_err(|e| e.to_string())?;
                load(&runtime, &record, &bytes)
            })
            .await
        };
        match compiled {
            Ok(Ok(plugin)) => {
                let plugin = Arc::new(plugin);
                registry.set_deployed(&functions, plugin.clone(), record.manifest.clone());
                report.loaded.push((plugin, functions));
            }
            Ok(Err(reason)) => fail_all(registry, &functions, &reason, &mut report),
            Err(_) => fail_all(
                registry,
                &functions,
                "loading it stopped halfway",
                &mut report,
            ),
        }
    }
    Ok(report)
}

fn fail_all(
    registry: &PluginRegistry,
    functions: &[FunctionName],
    reason: &str,
    report: &mut SyncReport,
) {
    for function in functions {
        registry.deployed_failed(function, reason.to_string());
        report.failed.push((function.clone(), reason.to_string()));
    }
}

/// Parses the deployed manifest and compiles the component (through the compile cache).
pub fn load(runtime: &Runtime, record: &DeployedVersion, bytes: &[u8]) -> Result<Plugin, String> {
    let path = source_path(record);
    let manifest = match &record.manifest {
        Some(text) => {
            manifest::parse(&manifest::manifest_path(&path), text).map_err(|e| e.to_string())?
        }
        None => manifest::Manifest::default(),
    };
    runtime
        .compile_plugin(&path, bytes, manifest)
        .map_err(|e| e.to_string())
}

/// Logs what a sync did.
pub fn log(report: &SyncReport) {
    for (plugin, functions) in &report.loaded {
        tracing::info!(
            plugin = ?plugin.source(),
            version = plugin.version(),
            functions = ?functions,
            compiled_from = ?plugin.compiled_from(),
            "deployed plugin loaded"
        );
    }
    for (function, reason) in &report.failed {
        tracing::error!(%function, "deployed plugin refused: {reason} (the version before it, if any, keeps serving)");
    }
}

/// Keeps the deployed plugins of `registry` in line with the store until dropped: at once
/// on each announcement, after a reconnection, and every [`POLL`].
pub async fn watch(client: Client, runtime: Arc<Runtime>, registry: Arc<PluginRegistry>) {
    let mut subscription = None;
    loop {
        if subscription.is_none() {
            match client.deploy_changes().await {
                Ok(s) => subscription = Some(s),
                Err(error) => {
                    tracing::warn!(%error, "cannot hear of deploys yet; reading the store every {}s", POLL.as_secs());
                }
            }
        }
        match sync(&client, &runtime, &registry).await {
            Ok(report) => log(&report),
            Err(error) => tracing::warn!(%error, "cannot read the deployed plugins; trying again"),
        }
        // Upkeep of the store: chunks nothing needs any more (never those in use).
        match client.collect_deployed().await {
            Ok(collected) => {
                for version in collected {
                    tracing::info!(
                        version,
                        "collected the chunks of a deployed version nothing needs"
                    );
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot collect unused deployed chunks; trying again later")
            }
        }
        let next = async {
            match subscription.as_mut() {
                Some(s) => s.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            delivery = next => match delivery {
                // Lost: nothing to read until Resubscribed (then read again).
                Some(Delivery::Lost) => {
                    let resubscribed = async {
                        while let Some(d) = subscription.as_mut()?.next().await {
                            if !matches!(d, Delivery::Lost) { return Some(()); }
                        }
                        None
                    };
                    tokio::select! {
                        r = resubscribed => if r.is_none() { subscription = None },
                        _ = tokio::time::sleep(POLL) => {}
                    }
                }
                Some(Delivery::Message(message)) => {
                    tracing::info!(
                        deploy = %String::from_utf8_lossy(&message.payload),
                        "deploy announced"
                    );
                }
                Some(Delivery::Resubscribed) => {}
                None => {
                    subscription = None;
                    tokio::time::sleep(POLL).await;
                }
            },
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}
