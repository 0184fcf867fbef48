//! `wasmgear replay`: run a job of the queue again, locally (no worker, nothing written to
//! the queue), on the exact plugin build one of its attempts ran on, found by its content
//! hash in a plugin directory or in the deployed-plugin store; or through another build (`--plugin`), the way to try a fix
//! against the input that failed. `--requeue` enqueues it for real afterwards.

use std::path::{Path, PathBuf};
use std::time::Duration;

use wasmgear_client::{EnqueueOptions, JobId, Priority};
use wasmgear_proto::{JobInfo, JobStatus};
use wasmgear_runtime::cache::sha256_hex;

use super::{RedisArgs, usage};

/// Options of `wasmgear replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    replicas: super::ReplicaArgs,

    /// The job (`FUNCTION:N`).
    id: String,

    /// Which ended attempt to replay [default: the last].
    #[arg(long)]
    attempt: Option<u32>,

    /// Find the build the attempt ran on among the plugins of this directory (by content
    /// hash, whatever the file's name). Without it or --plugin, the build is taken from the
    /// deployed-plugin store (`wasmgear deploy`).
    #[arg(long, env = "WASMGEAR_PLUGINS", conflicts_with = "plugin")]
    plugins: Option<PathBuf>,

    /// Run the job through this build instead (a fix to try against the input).
    #[arg(long)]
    plugin: Option<PathBuf>,

    /// Afterwards, enqueue the job's input again for real, with its options (a new job).
    #[arg(long)]
    requeue: bool,

    /// The most memory the job's linear memory may grow to (`256MiB`, `1GiB`, or bytes; the
    /// manifest may only lower it).
    #[arg(long, default_value_t = super::Size::of(wasmgear_runtime::engine::DEFAULT_MEMORY_BYTES))]
    memory_limit: super::Size,

    /// Meter fuel, so that the manifest's `limits.fuel` applies.
    #[arg(long)]
    fuel: bool,

    /// Compile the plugin instead of using the compile cache.
    #[arg(long)]
    no_cache: bool,
}

pub async fn run(args: ReplayArgs) -> anyhow::Result<i32> {
    let id: JobId = args.id.parse()?;
    let client = args.redis.writer(&args.replicas).await?;
    let status = client.status(&id).await?;
    let Some(input) = client.input(&id).await? else {
        return Err(usage(format!(
            "the input of {id} is no longer kept: it cannot be replayed"
        )));
    };
    let (attempt, version) = attempt_of(&status, args.attempt)?;
    let runtime = super::run::local_runtime(
        args.memory_limit.bytes(),
        args.fuel,
        &args.redis.home,
        args.no_cache,
    )?;
    let (plugin, source) = match (&args.plugin, &args.plugins) {
        (Some(path), _) => (load_file(&runtime, path)?, path.display().to_string()),
        (None, Some(dir)) => {
            let version = recorded_version(&id, attempt, &version)?;
            let path = find_version(dir, version)?.ok_or_else(|| {
                not_found(format!(
                    "attempt {attempt} of {id} ran on version {version} of its plugin, which \
                     is not among the plugins of {}: give the directory that has it, or try \
                     another build with --plugin",
                    dir.display()
                ))
            })?;
            (load_file(&runtime, &path)?, path.display().to_string())
        }
        (None, None) => {
            let version = recorded_version(&id, attempt, &version)?;
            match client.deployed_version(&id.function, version).await? {
                Some(record) => {
                    let bytes = client.fetch_deployed(&record).await?;
                    let plugin = wasmgear_worker::deployed::load(&runtime, &record, &bytes)
                        .map_err(|e| anyhow::anyhow!(e))?;
                    (plugin, format!("deployed version {version}"))
                }
                None => (
                    from_cache(&runtime, &args, &id, attempt, version)?,
                    format!("version {version} from the compile cache"),
                ),
            }
        }
    };
    let record = &status.record;
    let which = match &version {
        Some(v) if v != plugin.version() => {
            format!(" (version {}; the attempt ran on {v})", plugin.version())
        }
        _ if args.plugin.is_none() && args.plugins.is_none() => String::new(),
        _ => format!(" (version {})", plugin.version()),
    };
    eprintln!(
        "replaying {id} attempt {attempt} locally on {source}{which}, {} bytes of input",
        input.len()
    );
    let info = JobInfo {
        id: id.clone(),
        attempt,
        max_attempts: record.max_attempts,
        enqueued_at_ms: record.created_ms,
        timeout_ms: record.timeout_ms,
        trace: None,
    };
    let code = super::run::run_here(&runtime, &plugin, &info, &input).await?;
    if args.requeue {
        let options = EnqueueOptions {
            priority: Priority::new(record.priority)?,
            max_attempts: Some(record.max_attempts),
            timeout: Some(Duration::from_millis(record.timeout_ms)),
            tags: record.tags.clone(),
            ..EnqueueOptions::default()
        };
        let new = client.enqueue(&id.function, &input, &options).await?;
        eprintln!("requeued the input of {id} as {new}");
    }
    Ok(code)
}

/// Version `version` of `id`'s plugin from the compile cache (where `run`, `deploy`,
/// `replay` and workers sharing this home leave what they compiled), with the strict default
/// manifest: the cache keeps no manifest.
fn from_cache(
    runtime: &wasmgear_runtime::Runtime,
    args: &ReplayArgs,
    id: &JobId,
    attempt: u32,
    version: &str,
) -> anyhow::Result<wasmgear_runtime::Plugin> {
    let path = PathBuf::from(format!("cache:{version}/{}.wasm", id.function));
    let cached = (!args.no_cache)
        .then(|| runtime.cached_plugin(&path, version, wasmgear_runtime::Manifest::default()))
        .flatten();
    let Some(plugin) = cached else {
        return Err(not_found(format!(
            "attempt {attempt} of {id} ran on version {version} of its plugin, which is \
             neither in the deployed-plugin store (`wasmgear deploy list`) nor in the compile \
             cache of {}: give the plugin directory that has it with --plugins, or try another \
             build with --plugin",
            args.redis.home.display()
        )));
    };
    eprintln!(
        "its manifest is not known here (the compile cache keeps none): running with the \
         default limits and no grants"
    );
    plugin.map_err(|e| usage(e.to_string()))
}

/// The plugin file at `path`, loaded with the manifest beside it.
fn load_file(
    runtime: &wasmgear_runtime::Runtime,
    path: &Path,
) -> anyhow::Result<wasmgear_runtime::Plugin> {
    runtime.load_plugin(path).map_err(|e| usage(e.to_string()))
}

/// The plugin version attempt `attempt` of `id` recorded, or why there is none.
fn recorded_version<'a>(
    id: &JobId,
    attempt: u32,
    version: &'a Option<String>,
) -> anyhow::Result<&'a str> {
    version.as_deref().ok_or_else(|| {
        usage(format!(
            "attempt {attempt} of {id} recorded no plugin version: name the build with --plugin"
        ))
    })
}

/// The attempt to replay (the last ended one unless `wanted`) and the plugin version it ran
/// on.
fn attempt_of(status: &JobStatus, wanted: Option<u32>) -> anyhow::Result<(u32, Option<String>)> {
    let history = &status.record.history;
    let ended: Vec<u32> = history.iter().map(|a| a.attempt).collect();
    let chosen = match wanted {
        Some(n) => history.iter().rev().find(|a| a.attempt == n),
        None => history.last(),
    };
    match chosen {
        Some(attempt) => Ok((attempt.attempt, attempt.version.clone())),
        None if ended.is_empty() => Err(usage(format!(
            "{} has no ended attempt yet: a replay runs one that has ended (its plugin version \
             is recorded then)",
            status.id
        ))),
        None => Err(usage(format!(
            "{} has no ended attempt {}; its ended attempts: {}",
            status.id,
            wanted.unwrap_or_default(),
            ended
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The plugin of `dir` whose content hash starts with `version` (the 16 hex digits a job's
/// history records).
fn find_version(dir: &Path, version: &str) -> anyhow::Result<Option<PathBuf>> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        usage(format!(
            "cannot read the plugin directory {}: {e}",
            dir.display()
        ))
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "wasm") {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if sha256_hex(&bytes).starts_with(version) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// An error that exits with [`super::exit::NOT_FOUND`].
fn not_found(message: String) -> anyhow::Error {
    super::NotFoundError(message).into()
}
