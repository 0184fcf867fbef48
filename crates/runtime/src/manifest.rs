//! A plugin's manifest: `NAME.toml` beside `NAME.wasm`, saying which functions the plugin
//! serves, its limits, its concurrency, its job defaults and its capabilities.
//!
//! Everything is denied unless the manifest grants it, and no manifest means the strict
//! defaults. A manifest with a mistake is refused with an error naming the file and the field.
//!
//! ```toml
//! functions = ["resize", "thumbnail"]   # default: the file stem
//! concurrency = 4                       # jobs of this plugin at once on one worker
//! max_attempts = 5                      # for jobs enqueued without --max-attempts
//! timeout = "2m"                        # for jobs enqueued without --timeout
//! batch = { max = 100, wait = "20ms" }  # a batch plugin (world `batch`): up to 100 jobs per
//!                                       # call, waiting at most 20 ms for the batch to fill
//!
//! [limits]
//! memory = "128MiB"                     # at most the worker's own memory limit
//! timeout = "10m"                       # no job of this plugin runs longer
//! output = "4MiB"
//! log_lines = 500
//! fuel = 5_000_000_000                  # needs `wasmgear worker --fuel`
//! checkpoint = "4MiB"                   # the largest checkpoint a job may save (1 MiB)
//!
//! [env]                                 # environment variables (never inherited)
//! API_BASE = "https://images.example.com"
//!
//! [[dirs]]                              # read-only directories
//! host = "assets"                       # relative to this file
//! guest = "/assets"
//!
//! [config]                              # values for `wasmgear:job/config.get`
//! quality = "85"
//!
//! [http]                                # outgoing wasi:http, to these hosts only
//! allow = ["images.example.com", "127.0.0.1:8080"]
//!
//! [jobs]                                # child jobs (wasmgear:job/jobs)
//! enqueue = ["thumbnail"]               # the functions a job may enqueue children of
//! max_children = 100                    # per job (the default)
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use wasmgear_proto::FunctionName;

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("cannot read the plugin manifest {path:?}: {source}")]
    Read {
        /// The manifest.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML, or a field is unknown or of the wrong type.
    #[error("plugin manifest {path:?} is invalid: {reason}")]
    Syntax {
        /// The manifest.
        path: PathBuf,
        /// The parser's message (it names the line and the key).
        reason: String,
    },
    /// A field has a value that cannot be used.
    #[error("plugin manifest {path:?}: field `{field}` {reason}")]
    Field {
        /// The manifest.
        path: PathBuf,
        /// The field, e.g. `limits.memory`.
        field: String,
        /// What is wrong with its value.
        reason: String,
    },
}

/// Limits a manifest may set; `None` keeps the worker's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginLimits {
    /// Memory cap per linear memory, in bytes.
    pub memory_bytes: Option<usize>,
    /// The longest any job of the plugin may run.
    pub max_timeout: Option<Duration>,
    /// Output cap, in bytes.
    pub output_bytes: Option<usize>,
    /// Log lines per job.
    pub log_lines: Option<u32>,
    /// Fuel (executed-instruction budget) per job.
    pub fuel: Option<u64>,
    /// The largest checkpoint a job may save, in bytes.
    pub checkpoint_bytes: Option<usize>,
}

/// Defaults for jobs enqueued without their own value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobDefaults {
    /// Attempts in all.
    pub max_attempts: Option<u32>,
    /// How long one attempt may run.
    pub timeout: Option<Duration>,
}

/// What a plugin may use besides computing. Empty: nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Environment variables the guest sees.
    pub env: Vec<(String, String)>,
    /// Read-only directories: host path, guest path.
    pub dirs: Vec<(PathBuf, String)>,
    /// Configuration values.
    pub config: BTreeMap<String, String>,
    /// Hosts (`host` or `host:port`) outgoing HTTP may reach.
    pub http_allow: Vec<String>,
    /// Functions whose jobs a job may enqueue as its children (`wasmgear:job/jobs`).
    pub enqueue: Vec<FunctionName>,
    /// The most children one job may enqueue.
    pub max_children: u32,
}

/// The most children one job may enqueue when the manifest does not say.
pub const DEFAULT_MAX_CHILDREN: u32 = 100;
/// The most children one job may ever be allowed.
pub const MAX_CHILDREN_LIMIT: u32 = wasmgear_proto::limits::MAX_CHILDREN as u32;

/// How a batch plugin's jobs are gathered into one call (`batch = { max, wait }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSettings {
    /// The most jobs in one call, 1 to [`MAX_PLUGIN_BATCH`](wasmgear_proto::limits::MAX_PLUGIN_BATCH).
    pub max: usize,
    /// How long the worker waits for more jobs when fewer than `max` are ready (zero: it
    /// runs what is there at once).
    pub wait: Duration,
}

/// A plugin's manifest, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The functions served; empty: the plugin file's stem.
    pub functions: Vec<FunctionName>,
    /// Jobs of this plugin at once on one worker; `None`: only the worker's limit.
    pub concurrency: Option<usize>,
    /// Defaults for jobs that do not say.
    pub defaults: JobDefaults,
    /// Limits.
    pub limits: PluginLimits,
    /// Capabilities.
    pub capabilities: Capabilities,
    /// How jobs are gathered for a batch plugin; `None` for a plugin that takes one job
    /// per call (a batch plugin without it gets one job per call too).
    pub batch: Option<BatchSettings>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    functions: Option<Vec<String>>,
    concurrency: Option<usize>,
    max_attempts: Option<u32>,
    timeout: Option<String>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    dirs: Vec<RawDir>,
    #[serde(default)]
    config: BTreeMap<String, String>,
    #[serde(default)]
    http: RawHttp,
    #[serde(default)]
    jobs: RawJobs,
    batch: Option<RawBatch>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBatch {
    max: usize,
    wait: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJobs {
    #[serde(default)]
    enqueue: Vec<String>,
    max_children: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    #[serde(default)]
    allow: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<Size>,
    timeout: Option<String>,
    output: Option<Size>,
    log_lines: Option<u32>,
    fuel: Option<u64>,
    checkpoint: Option<Size>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDir {
    host: PathBuf,
    guest: String,
}

/// A size: bytes as a number, or text with a unit (`64KiB`, `128MiB`, `1GiB`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    fn bytes(&self) -> Result<usize, String> {
        let bytes = match self {
            Size::Bytes(n) => *n,
            Size::Text(text) => parse_size(text)?,
        };
        usize::try_from(bytes).map_err(|_| "is too large".to_string())
    }
}

/// Bytes from a number with an optional unit, read by bytesize: `4096`, `64KiB`, `128MiB`,
/// `1GiB` (powers of 1024) or `500KB`, `2MB` (powers of 1000); the error completes a sentence
/// naming the value ("... is not a size").
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let size: bytesize::ByteSize = text
        .parse()
        .map_err(|_| format!("is not a size: {text:?} (write e.g. 4096, 64KiB, 128MiB or 1GiB)"))?;
    match size.as_u64() {
        // bytesize saturates instead of failing on overflow.
        u64::MAX => Err(format!("is too large: {text:?}")),
        bytes => Ok(bytes),
    }
}

/// The manifest path of the plugin at `wasm`: the same name with `.toml`.
pub fn manifest_path(wasm: &Path) -> PathBuf {
    wasm.with_extension("toml")
}

/// Reads the manifest beside `wasm`; no file means the strict defaults.
pub fn load_for(wasm: &Path) -> Result<Manifest, ManifestError> {
    parse_for(wasm, read_for(wasm)?.as_deref())
}

/// The text of the manifest of the plugin at `wasm`, if it has one.
pub fn read_for(wasm: &Path) -> Result<Option<String>, ManifestError> {
    let path = manifest_path(wasm);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ManifestError::Read { path, source }),
    }
}

/// The manifest of the plugin at `wasm` from its `text` ([`read_for`]); no text is the
/// default manifest.
pub fn parse_for(wasm: &Path, text: Option<&str>) -> Result<Manifest, ManifestError> {
    match text {
        Some(text) => parse(&manifest_path(wasm), text),
        None => Ok(Manifest::default()),
    }
}

/// Parses and checks manifest `text` read from `path` (which names it in errors and
/// anchors relative directories).
pub fn parse(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
    let raw: RawManifest = toml::from_str(text).map_err(|e| ManifestError::Syntax {
        path: path.to_path_buf(),
        reason: e.to_string().trim().to_string(),
    })?;
    let field = |field: &str, reason: String| ManifestError::Field {
        path: path.to_path_buf(),
        field: field.to_string(),
        reason,
    };
    let duration = |name: &str, text: &Option<String>| -> Result<Option<Duration>, ManifestError> {
        text.as_deref()
            .map(|t| {
                wasmgear_proto::units::parse_duration(t)
                    .map_err(|e| field(name, format!("{e:#}")))
                    .and_then(|d| {
                        let most = Duration::from_millis(wasmgear_proto::limits::MAX_DURATION_MS);
                        if d.is_zero() {
                            Err(field(name, "must be longer than 0".into()))
                        } else if d > most {
                            Err(field(name, "must be at most 10 years".into()))
                        } else {
                            Ok(d)
                        }
                    })
            })
            .transpose()
    };

    let mut functions = Vec::new();
    for (i, name) in raw.functions.unwrap_or_default().into_iter().enumerate() {
        functions.push(
            FunctionName::new(name)
                .map_err(|e| field(&format!("functions[{i}]"), format!("is refused: {e}")))?,
        );
    }
    if let Some(0) = raw.concurrency {
        return Err(field("concurrency", "must be at least 1".into()));
    }
    let most_attempts = wasmgear_proto::limits::MAX_ATTEMPTS;
    if let Some(attempts) = raw.max_attempts
        && (attempts == 0 || u64::from(attempts) > most_attempts)
    {
        return Err(field(
            "max_attempts",
            format!("must be 1 to {most_attempts}, not {attempts}"),
        ));
    }
    let size = |name: &str, size: &Option<Size>| -> Result<Option<usize>, ManifestError> {
        size.as_ref()
            .map(|s| s.bytes().map_err(|reason| field(name, reason)))
            .transpose()
    };
    let limits = PluginLimits {
        memory_bytes: size("limits.memory", &raw.limits.memory)?,
        max_timeout: duration("limits.timeout", &raw.limits.timeout)?,
        output_bytes: size("limits.output", &raw.limits.output)?,
        log_lines: raw.limits.log_lines,
        fuel: raw.limits.fuel,
        checkpoint_bytes: size("limits.checkpoint", &raw.limits.checkpoint)?,
    };
    let most_checkpoint = wasmgear_proto::limits::MAX_CHECKPOINT_BYTES;
    if let Some(bytes) = limits.checkpoint_bytes
        && bytes as u64 > most_checkpoint
    {
        return Err(field(
            "limits.checkpoint",
            format!(
                "is {bytes} bytes, more than the most a job may keep ({most_checkpoint}): save a position, not the data"
            ),
        ));
    }
    let mut env = Vec::new();
    for (key, value) in raw.env {
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(field(
                &format!("env.{key}"),
                "is not a valid environment variable".into(),
            ));
        }
        env.push((key, value));
    }
    let mut http_allow = Vec::new();
    for (i, host) in raw.http.allow.into_iter().enumerate() {
        let valid = !host.is_empty()
            && host.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
            });
        if !valid {
            return Err(field(
                &format!("http.allow[{i}]"),
                format!("is not a host or host:port: {host:?}"),
            ));
        }
        http_allow.push(host);
    }
    let mut enqueue = Vec::new();
    for (i, name) in raw.jobs.enqueue.iter().enumerate() {
        let function = FunctionName::new(name.clone())
            .map_err(|e| field(&format!("jobs.enqueue[{i}]"), e.to_string()))?;
        enqueue.push(function);
    }
    let max_children = raw.jobs.max_children.unwrap_or(DEFAULT_MAX_CHILDREN);
    if !(1..=MAX_CHILDREN_LIMIT).contains(&max_children) {
        return Err(field(
            "jobs.max_children",
            format!("must be 1..={MAX_CHILDREN_LIMIT}, got {max_children}"),
        ));
    }
    let batch = raw
        .batch
        .map(|batch| {
            let most = wasmgear_proto::limits::MAX_PLUGIN_BATCH as usize;
            if !(1..=most).contains(&batch.max) {
                return Err(field(
                    "batch.max",
                    format!("must be 1 to {most} jobs per call, not {}", batch.max),
                ));
            }
            let wait = match batch.wait.as_deref() {
                None => Duration::ZERO,
                Some(text) => wasmgear_proto::units::parse_duration(text)
                    .map_err(|e| field("batch.wait", format!("{e:#}")))?,
            };
            let longest = Duration::from_millis(wasmgear_proto::limits::MAX_PLUGIN_BATCH_WAIT_MS);
            if wait > longest {
                return Err(field(
                    "batch.wait",
                    format!(
                        "must be at most {} ms (the leases of the jobs gathered first run down meanwhile), not {} ms",
                        longest.as_millis(),
                        wait.as_millis()
                    ),
                ));
            }
            Ok(BatchSettings {
                max: batch.max,
                wait,
            })
        })
        .transpose()?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut dirs = Vec::new();
    for (i, dir) in raw.dirs.into_iter().enumerate() {
        let host = base.join(&dir.host);
        if !host.is_dir() {
            return Err(field(
                &format!("dirs[{i}].host"),
                format!("is not a directory: {host:?}"),
            ));
        }
        if !dir.guest.starts_with('/') {
            return Err(field(
                &format!("dirs[{i}].guest"),
                format!("must be an absolute path, got {:?}", dir.guest),
            ));
        }
        dirs.push((host, dir.guest));
    }
    Ok(Manifest {
        functions,
        concurrency: raw.concurrency,
        defaults: JobDefaults {
            max_attempts: raw.max_attempts,
            timeout: duration("timeout", &raw.timeout)?,
        },
        limits,
        capabilities: Capabilities {
            env,
            dirs,
            config: raw.config,
            http_allow,
            enqueue,
            max_children,
        },
        batch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Manifest, String> {
        parse(Path::new("/plugins/x.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_full_manifest_parses() {
        let m = check(
            r#"
            functions = ["a", "b"]
            concurrency = 2
            max_attempts = 5
            timeout = "2m"
            [limits]
            memory = "64MiB"
            timeout = "10m"
            output = 1024
            log_lines = 10
            fuel = 1000
            [env]
            KEY = "value"
            [config]
            quality = "85"
            "#,
        )
        .unwrap();
        assert_eq!(m.functions.len(), 2);
        assert_eq!(m.concurrency, Some(2));
        assert_eq!(m.defaults.timeout, Some(Duration::from_secs(120)));
        assert_eq!(m.limits.memory_bytes, Some(64 << 20));
        assert_eq!(m.limits.output_bytes, Some(1024));
        assert_eq!(
            m.capabilities.env,
            [("KEY".to_string(), "value".to_string())]
        );
        assert_eq!(m.capabilities.config["quality"], "85");
    }

    #[test]
    fn a_checkpoint_cap_is_a_size_up_to_the_queues_ceiling() {
        let m = check("[limits]\ncheckpoint = \"16MiB\"").unwrap();
        assert_eq!(m.limits.checkpoint_bytes, Some(16 << 20));
        assert_eq!(check("").unwrap().limits.checkpoint_bytes, None);
    }

    #[test]
    fn a_batch_says_how_many_jobs_per_call_and_how_long_to_wait() {
        let m = check("batch = { max = 100, wait = \"20ms\" }").unwrap();
        assert_eq!(
            m.batch,
            Some(BatchSettings {
                max: 100,
                wait: Duration::from_millis(20)
            })
        );
        let m = check("[batch]\nmax = 1").unwrap();
        assert_eq!(m.batch.map(|b| b.wait), Some(Duration::ZERO));
        assert_eq!(check("").unwrap().batch, None);
        for (text, said) in [
            (
                "batch = { max = 0 }",
                "batch.max` must be 1 to 1000 jobs per call, not 0",
            ),
            ("batch = { max = 1001 }", "not 1001"),
            (
                "batch = { max = 10, wait = \"11s\" }",
                "must be at most 10000 ms",
            ),
            ("batch = { max = 10, wait = \"soon\" }", "batch.wait"),
            ("batch = { wait = \"1s\" }", "missing field `max`"),
            ("batch = { max = 10, size = 3 }", "unknown field `size`"),
        ] {
            let error = check(text).unwrap_err();
            assert!(error.contains(said), "{text}: {error}");
        }
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("128 MiB"), Ok(128 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("500KB"), Ok(500_000));
        assert_eq!(parse_size("1.5MiB"), Ok(3 << 19));
        for bad in ["", "lots", "-1", "5XB", "1e9"] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn mistakes_name_the_file_and_the_field() {
        let cases = [
            ("memroy = 1", "unknown field `memroy`"),
            ("[limits]\nmemory = \"lots\"", "field `limits.memory`"),
            ("[limits]\nmemory = \"5XB\"", "is not a size"),
            ("[limits]\nmemory = \"99999999999999GiB\"", "is too large"),
            ("[limits]\ntimeout = \"soon\"", "field `limits.timeout`"),
            ("concurrency = 0", "field `concurrency` must be at least 1"),
            ("functions = [\"ok\", \"not ok\"]", "field `functions[1]`"),
            (
                "[[dirs]]\nhost = \"/no/such/dir\"\nguest = \"/d\"",
                "field `dirs[0].host`",
            ),
            ("[env]\n\"A=B\" = \"x\"", "field `env.A=B`"),
            ("timeout = 5", "invalid type"),
            // Past what the queue takes: its lease calls would all be refused.
            (
                "max_attempts = 5000",
                "field `max_attempts` must be 1 to 1000",
            ),
            (
                "timeout = \"4000d\"",
                "field `timeout` must be at most 10 years",
            ),
            // Past what the queue keeps for a job.
            (
                "[limits]\ncheckpoint = \"17MiB\"",
                "field `limits.checkpoint` is 17825792 bytes, more than the most a job may keep (16777216)",
            ),
        ];
        for (text, expected) in cases {
            let error = check(text).unwrap_err();
            assert!(error.contains("/plugins/x.toml"), "{error}");
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }
}
