//! The deployed-plugin store: components kept in Redis once for every worker node
//! (`wasmgear deploy`, `wasmgear worker --plugins-from-redis`).
//!
//! A component is stored content-addressed: its version is the first 16 hex digits of its
//! SHA-256 (what workers record in each attempt's history), its bytes are chunks of
//! [`CHUNK_BYTES`] in one hash under a hash tag of its own (one cluster slot per version),
//! and its record for each function it serves (name, manifest, size, full SHA-256) is in the
//! registry, in the `{deploy}` slot with the current version of each function and each
//! function's history.
//! Every change of the registry is one library function (`deploy`, `deploy_activate`,
//! `deploy_rollback`, `deploy_forget`) that announces the new current versions on
//! [`DeployKeys::events`]. Workers check the SHA-256 of what they fetch; a corrupt version is
//! refused, never run.
//!
//! Chunks and records are in different slots, so no script sees both: they are kept in step
//! by order. A deploy notes itself under way in the registry (`deploy_begin`), pins the
//! version's chunks in their slot (`deploy_pin`), writes them, and records the version only
//! if no collector has doomed it meanwhile (else it starts again). Versions no record names
//! any more go to a graveyard; a collector ([`Client::collect_deployed`], run after every
//! deploy, by workers serving deployed plugins and by `wasmgear deploy --collect`) takes
//! them and the chunks of interrupted deploys, pins the version alone, asks the registry
//! (`deploy_doom`: no record names it, no deploy of it is under way, and those that lapsed
//! are doomed) and only then deletes the chunks, if its pin still holds. So a chunk is never
//! deleted while a record names its version, and no chunk stays once nothing needs it.

use std::collections::{BTreeMap, BTreeSet};

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmgear_proto::deploy::{CHUNK_BYTES, DeployedVersion, field, version_of};
use wasmgear_proto::keys::DeployKeys;
use wasmgear_proto::limits::{COLLECT_PIN_MS, DEPLOY_PIN_MS};

use super::client::Client;
use super::subscriber::{Subscription, Topic};
use super::{QueueError, Result, scripts};
use wasmgear_proto::FunctionName;
use wasmgear_proto::keys::FunctionKeys;

/// How many job records one `HSCAN` step reads when looking for jobs that name a version.
const SCAN_COUNT: usize = 500;

/// How many times a deploy starts again when a collector took it for an interrupted one.
const DEPLOY_TRIES: usize = 3;

/// The most versions one collection deals with (the rest at the next).
const COLLECT_BATCH: usize = 100;

/// A plugin to deploy ([`Client::deploy`]).
#[derive(Debug, Clone, Copy)]
pub struct PluginUpload<'a> {
    /// The component's bytes.
    pub component: &'a [u8],
    /// The name of the file deployed, without `.wasm` (the function it serves when its
    /// manifest names none).
    pub name: &'a str,
    /// The functions it serves.
    pub functions: &'a [FunctionName],
    /// Its manifest's text, if it has one.
    pub manifest: Option<&'a str>,
    /// Its signature line, if it is signed (`wasmgear_proto::signing`).
    pub signature: Option<&'a str>,
}

/// What `deploy` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployOutcome {
    /// The version stored, as the registry now has it.
    pub record: DeployedVersion,
    /// Whether it became the current version of its functions.
    pub activated: bool,
    /// Older versions forgotten (beyond the count kept, named by no kept job), as
    /// `FUNCTION VERSION`.
    pub forgotten: Vec<String>,
    /// Older versions beyond the count kept that stay because a kept job's history names
    /// them, as `FUNCTION VERSION`.
    pub kept_for_jobs: Vec<String>,
    /// Versions whose chunks were deleted after the deploy (no record names them any more,
    /// or their deploy was interrupted).
    pub collected: Vec<String>,
}

/// The whole registry of deployed plugins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployState {
    /// Every version of every function kept, oldest deploy first.
    pub versions: Vec<DeployedVersion>,
    /// Function → its current version.
    pub current: BTreeMap<String, String>,
    /// Function → the versions it was given, oldest first, the current one last (what
    /// rollbacks go back through).
    pub history: BTreeMap<String, Vec<String>>,
}

impl DeployState {
    /// The versions serving `function`, oldest deploy first.
    pub fn versions_of<'a>(
        &'a self,
        function: &'a str,
    ) -> impl Iterator<Item = &'a DeployedVersion> + 'a {
        self.versions.iter().filter(move |v| v.function == function)
    }
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One try of a deploy: the component, its version, and the token it is under way with.
struct Deploying<'a> {
    component: &'a [u8],
    version: &'a str,
    token: String,
}

/// Field-value pairs of a hash.
type Pairs = Vec<(String, String)>;

/// The keys of the registry functions that change no deploy under way (`deploy_activate`,
/// `deploy_rollback`, `deploy_remove`); the others take [`DeployKeys::registry`].
fn registry_keys() -> [String; 4] {
    [
        DeployKeys::versions(),
        DeployKeys::current(),
        DeployKeys::history(),
        DeployKeys::events(),
    ]
}

/// A refusal of a deploy function of the library (`BADDEPLOY why`) as such; other errors
/// as they are.
fn refused(error: redis::RedisError) -> QueueError {
    match (error.code(), error.detail()) {
        (Some("BADDEPLOY"), Some(detail)) => QueueError::DeployRefused(detail.to_string()),
        _ => QueueError::Redis(error),
    }
}

fn corrupt(version: &str, reason: String) -> QueueError {
    QueueError::CorruptVersion {
        version: version.to_string(),
        reason,
    }
}

fn read_record(field: &str, text: &str) -> Result<DeployedVersion> {
    serde_json::from_str(text).map_err(|e| corrupt(field, format!("its record does not read: {e}")))
}

impl Client {
    /// Stores `plugin` and, if `activate`, makes it the current version of each of its
    /// functions. Then forgets versions beyond `keep` per function that no kept job names,
    /// and collects the chunks nothing needs any more. The caller has checked that the
    /// component loads and the manifest parses.
    pub async fn deploy(
        &self,
        plugin: &PluginUpload<'_>,
        activate: bool,
        keep: usize,
    ) -> Result<DeployOutcome> {
        let PluginUpload {
            component,
            name,
            functions,
            manifest,
            signature,
        } = *plugin;
        if keep == 0 {
            return Err(QueueError::BadOption(
                "at least one version of each function must be kept".into(),
            ));
        }
        if functions.is_empty() {
            return Err(QueueError::BadOption(
                "a deployed plugin must serve at least one function".into(),
            ));
        }
        let sha256 = sha256_hex(component);
        let version = version_of(&sha256).to_string();
        let record = DeployedVersion {
            function: String::new(),
            version: version.clone(),
            sha256,
            size: component.len() as u64,
            chunks: component.chunks(CHUNK_BYTES).count() as u32,
            name: name.to_string(),
            functions: functions.iter().map(|f| f.to_string()).collect(),
            manifest: manifest.map(str::to_string),
            deployed_ms: 0,
            signature: signature.map(str::to_string),
        };
        let text = serde_json::to_string(&record).unwrap_or_default();
        let mut candidates = None;
        for _ in 0..DEPLOY_TRIES {
            let deploy = Deploying {
                component,
                version: &version,
                token: wasmgear_proto::sync::random_hex(12),
            };
            if let Some(reply) = self.deploy_once(&deploy, &text, activate, keep).await? {
                candidates = Some(reply);
                break;
            }
        }
        let Some(candidates) = candidates else {
            return Err(QueueError::DeployInterrupted(format!(
                "a collector took the deploy of version {version} for an interrupted one \
                 {DEPLOY_TRIES} times: it wrote its chunks for longer than {}s each time",
                DEPLOY_PIN_MS / 1000
            )));
        };
        let (forgotten, kept_for_jobs) = self.forget_unused(candidates, keep).await?;
        let collected = self.collect_deployed().await?;
        let record = self
            .deployed_version(&functions[0], &version)
            .await?
            .ok_or_else(|| {
                corrupt(
                    &version,
                    "its record vanished right after the deploy".into(),
                )
            })?;
        Ok(DeployOutcome {
            record,
            activated: activate,
            forgotten,
            kept_for_jobs,
            collected,
        })
    }

    /// One try of a deploy: notes it under way, pins the version's chunks, writes them and
    /// records the version. Returns `deploy`'s reply (the versions no longer kept), or `None`
    /// when a collector took the deploy for an interrupted one (it starts again).
    async fn deploy_once(
        &self,
        deploy: &Deploying<'_>,
        record: &str,
        activate: bool,
        keep: usize,
    ) -> Result<Option<Vec<String>>> {
        let chunks_key = DeployKeys::chunks(deploy.version);
        let mut conn = self.conn.clone();
        if !self.deploy_under_way(deploy, false).await? {
            return Ok(None);
        }
        self.pin_for_deploy(deploy.version).await?;
        let mut renewed = Instant::now();
        // One chunk per call: no call holds Redis for long, and a worker reading this version
        // meanwhile (deployed before with the same bytes) reads the same bytes throughout.
        for (number, chunk) in deploy.component.chunks(CHUNK_BYTES).enumerate() {
            if renewed.elapsed() > Duration::from_millis(DEPLOY_PIN_MS / 3) {
                if !self.deploy_under_way(deploy, true).await? {
                    return Ok(None);
                }
                self.pin_for_deploy(deploy.version).await?;
                renewed = Instant::now();
            }
            let _: i64 = redis::cmd("HSET")
                .arg(&chunks_key)
                .arg(number)
                .arg(chunk)
                .query_async(&mut conn)
                .await?;
        }
        let reply: Vec<String> = scripts::DEPLOY
            .with_keys(&DeployKeys::registry())
            .arg(deploy.version)
            .arg(record)
            .arg(if activate { "1" } else { "0" })
            .arg(keep)
            .arg(&deploy.token)
            .invoke_async(&mut conn)
            .await
            .map_err(refused)?;
        match reply.split_first() {
            Some((ok, gone)) if ok == "ok" => {
                // Recorded: the record keeps the chunks from now on (another deploy of the
                // same bytes still writing is kept safe by its note as under way).
                let _: i64 = scripts::DEPLOY_UNPIN
                    .with_keys(&[chunks_key, DeployKeys::pin(deploy.version)])
                    .arg("deploy")
                    .arg("0")
                    .invoke_async(&mut conn)
                    .await
                    .map_err(refused)?;
                Ok(Some(gone.to_vec()))
            }
            Some((lapsed, _)) if lapsed == "lapsed" => Ok(None),
            _ => Err(QueueError::DeployRefused(format!(
                "unexpected reply from deploy: {reply:?}"
            ))),
        }
    }

    /// Notes `deploy` as under way for [`DEPLOY_PIN_MS`] (again if `renew`); `false` when
    /// it cannot go on (a collector doomed it: it starts again).
    async fn deploy_under_way(&self, deploy: &Deploying<'_>, renew: bool) -> Result<bool> {
        let noted: i64 = scripts::DEPLOY_BEGIN
            .with_keys(&DeployKeys::registry())
            .arg(deploy.version)
            .arg(&deploy.token)
            .arg(DEPLOY_PIN_MS)
            .arg(if renew { "1" } else { "0" })
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(refused)?;
        Ok(noted == 1)
    }

    /// Pins `version`'s chunks for a deploy for [`DEPLOY_PIN_MS`], waiting while a collector
    /// holds the pin (at most twice as long as a collector's pin holds).
    async fn pin_for_deploy(&self, version: &str) -> Result<()> {
        let started = Instant::now();
        let mut wait = Duration::from_millis(20);
        loop {
            let pinned: i64 = scripts::DEPLOY_PIN
                .with_keys(&[DeployKeys::pin(version)])
                .arg("deploy")
                .arg(DEPLOY_PIN_MS)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(refused)?;
            if pinned == 1 {
                return Ok(());
            }
            if started.elapsed() > Duration::from_millis(2 * COLLECT_PIN_MS) {
                return Err(QueueError::DeployInterrupted(format!(
                    "version {version}'s chunks were being collected for more than {}s",
                    2 * COLLECT_PIN_MS / 1000
                )));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_millis(500));
        }
    }

    /// Deletes the chunks of the versions no record names any more and of deploys that were
    /// interrupted; never those of a version a record names or a deploy is writing (see the
    /// module's doc). Returns the versions whose chunks were deleted.
    pub async fn collect_deployed(&self) -> Result<Vec<String>> {
        let mut conn = self.conn.clone();
        let registry = DeployKeys::registry();
        let candidates: Vec<String> = scripts::DEPLOY_COLLECTABLE
            .with_keys(&registry)
            .arg(COLLECT_BATCH)
            .invoke_async(&mut conn)
            .await
            .map_err(refused)?;
        let mut collected = Vec::new();
        for version in candidates {
            if version.is_empty() || !version.bytes().all(|b| b.is_ascii_hexdigit()) {
                continue;
            }
            let who = format!("collect:{}", wasmgear_proto::sync::random_hex(12));
            let pinned: i64 = scripts::DEPLOY_PIN
                .with_keys(&[DeployKeys::pin(&version)])
                .arg(&who)
                .arg(COLLECT_PIN_MS)
                .invoke_async(&mut conn)
                .await
                .map_err(refused)?;
            if pinned == 0 {
                // A deploy (or another collector) holds it: later.
                continue;
            }
            let verdict: String = scripts::DEPLOY_DOOM
                .with_keys(&registry)
                .arg(&version)
                .invoke_async(&mut conn)
                .await
                .map_err(refused)?;
            let doomed = verdict == "doomed";
            let done: i64 = scripts::DEPLOY_UNPIN
                .with_keys(&[DeployKeys::chunks(&version), DeployKeys::pin(&version)])
                .arg(&who)
                .arg(if doomed { "1" } else { "0" })
                .invoke_async(&mut conn)
                .await
                .map_err(refused)?;
            if doomed && done == 1 {
                let _: i64 = scripts::DEPLOY_BURY
                    .with_keys(&registry)
                    .arg(&version)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(refused)?;
                collected.push(version);
            }
        }
        Ok(collected)
    }

    /// Forgets those of `candidates` (`FUNCTION VERSION`s beyond the count kept) that no
    /// kept job's history names, and the chunks no function uses any more. Returns those
    /// forgotten and those kept for jobs.
    async fn forget_unused(
        &self,
        candidates: Vec<String>,
        keep: usize,
    ) -> Result<(Vec<String>, Vec<String>)> {
        if candidates.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut conn = self.conn.clone();
        let mut by_function: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for candidate in &candidates {
            if let Some((function, version)) = candidate.split_once(' ') {
                by_function.entry(function).or_default().push(version);
            }
        }
        let mut named = BTreeSet::new();
        for (function, versions) in by_function {
            let Ok(function) = FunctionName::new(function) else {
                continue;
            };
            for version in self.versions_named_by_jobs(&function, &versions).await? {
                named.insert(field(function.as_str(), version));
            }
        }
        let unnamed: Vec<&String> = candidates.iter().filter(|c| !named.contains(*c)).collect();
        if unnamed.is_empty() {
            return Ok((Vec::new(), named.into_iter().collect()));
        }
        // Versions no record names any more go to the graveyard: the collector deletes
        // their chunks (not here: a deploy of the same bytes may be writing them).
        let forgotten: Vec<String> = scripts::DEPLOY_FORGET
            .with_keys(&DeployKeys::registry())
            .arg(keep)
            .arg(&unnamed)
            .invoke_async(&mut conn)
            .await
            .map_err(refused)?;
        Ok((forgotten, named.into_iter().collect()))
    }

    /// Those of `versions` that the history of a kept job of `function` names (read a step
    /// at a time with `HSCAN`, so Redis is never held for long).
    async fn versions_named_by_jobs<'a>(
        &self,
        function: &FunctionName,
        versions: &[&'a str],
    ) -> Result<BTreeSet<&'a str>> {
        let key = FunctionKeys::new(function).jobs();
        let mut conn = self.conn.clone();
        let mut named = BTreeSet::new();
        let mut cursor = 0u64;
        loop {
            let (next, entries): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
                .arg(&key)
                .arg(cursor)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await?;
            for (_, record) in &entries {
                for version in versions {
                    if record.contains(version) {
                        named.insert(*version);
                    }
                }
            }
            if next == 0 || named.len() == versions.len() {
                return Ok(named);
            }
            cursor = next;
        }
    }

    /// The registry of deployed plugins.
    pub async fn deploy_state(&self) -> Result<DeployState> {
        let mut conn = self.conn.clone();
        let (versions, current, history): (Pairs, BTreeMap<String, String>, Pairs) = redis::pipe()
            .hgetall(DeployKeys::versions())
            .hgetall(DeployKeys::current())
            .hgetall(DeployKeys::history())
            .query_async(&mut conn)
            .await?;
        let mut records = versions
            .iter()
            .map(|(field, text)| read_record(field, text))
            .collect::<Result<Vec<_>>>()?;
        records.sort_by(|a, b| (a.deployed_ms, &a.version).cmp(&(b.deployed_ms, &b.version)));
        let history = history
            .into_iter()
            .map(|(function, stack)| {
                let stack: Vec<String> = serde_json::from_str(&stack).unwrap_or_default();
                (function, stack)
            })
            .collect();
        Ok(DeployState {
            versions: records,
            current,
            history,
        })
    }

    /// Function → its current deployed version.
    pub async fn deployed_current(&self) -> Result<BTreeMap<String, String>> {
        Ok(redis::cmd("HGETALL")
            .arg(DeployKeys::current())
            .query_async(&mut self.conn.clone())
            .await?)
    }

    /// The record of deployed version `version` of `function`, if it is kept.
    pub async fn deployed_version(
        &self,
        function: &FunctionName,
        version: &str,
    ) -> Result<Option<DeployedVersion>> {
        let field = field(function.as_str(), version);
        let text: Option<String> = redis::cmd("HGET")
            .arg(DeployKeys::versions())
            .arg(&field)
            .query_async(&mut self.conn.clone())
            .await?;
        text.map(|text| read_record(&field, &text)).transpose()
    }

    /// The component of deployed version `record`, read chunk by chunk and checked against
    /// its SHA-256: a missing or altered chunk is [`QueueError::CorruptVersion`].
    pub async fn fetch_deployed(&self, record: &DeployedVersion) -> Result<Vec<u8>> {
        let key = DeployKeys::chunks(&record.version);
        let mut conn = self.conn.clone();
        let mut bytes = Vec::with_capacity(usize::try_from(record.size).unwrap_or(0));
        for number in record.chunk_numbers() {
            let chunk: Option<Vec<u8>> = redis::cmd("HGET")
                .arg(&key)
                .arg(number)
                .query_async(&mut conn)
                .await?;
            let Some(chunk) = chunk else {
                return Err(corrupt(
                    &record.version,
                    format!("chunk {number} of {} is missing", record.chunks),
                ));
            };
            bytes.extend_from_slice(&chunk);
        }
        if bytes.len() as u64 != record.size {
            return Err(corrupt(
                &record.version,
                format!(
                    "its chunks hold {} bytes, {} were deployed",
                    bytes.len(),
                    record.size
                ),
            ));
        }
        let sha256 = sha256_hex(&bytes);
        if sha256 != record.sha256 {
            return Err(corrupt(
                &record.version,
                format!(
                    "its chunks hash to {}, not to the {} deployed",
                    version_of(&sha256),
                    version_of(&record.sha256)
                ),
            ));
        }
        Ok(bytes)
    }

    /// Makes deployed version `version` of `function` (or its one version starting with it)
    /// its current version. Returns the whole version.
    pub async fn activate_deployed(
        &self,
        function: &FunctionName,
        version: &str,
    ) -> Result<String> {
        let reply: Vec<String> = scripts::DEPLOY_ACTIVATE
            .with_keys(&registry_keys())
            .arg(function.as_str())
            .arg(version)
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [ok, version] if ok == "ok" => Ok(version.clone()),
            [missing, why] if missing == "missing" => Err(QueueError::NoSuchVersion(why.clone())),
            [_, why, ..] => Err(QueueError::DeployRefused(why.clone())),
            _ => Err(QueueError::DeployRefused(format!(
                "unexpected reply from deploy_activate: {reply:?}"
            ))),
        }
    }

    /// Puts `function` back on the version it had before its current one. Returns the
    /// version left and the version now current.
    pub async fn rollback_deployed(&self, function: &FunctionName) -> Result<(String, String)> {
        let reply: Vec<String> = scripts::DEPLOY_ROLLBACK
            .with_keys(&registry_keys())
            .arg(function.as_str())
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [ok, left, now] if ok == "ok" => Ok((left.clone(), now.clone())),
            [_, why, ..] => Err(QueueError::DeployRefused(why.clone())),
            _ => Err(QueueError::DeployRefused(format!(
                "unexpected reply from deploy_rollback: {reply:?}"
            ))),
        }
    }

    /// Stops serving `function` from the store (its versions stay stored). Returns the
    /// version it had.
    pub async fn remove_deployed(&self, function: &FunctionName) -> Result<String> {
        let reply: Vec<String> = scripts::DEPLOY_REMOVE
            .with_keys(&registry_keys())
            .arg(function.as_str())
            .invoke_async(&mut self.conn.clone())
            .await?;
        match reply.as_slice() {
            [ok, left] if ok == "ok" => Ok(left.clone()),
            [_, why, ..] => Err(QueueError::DeployRefused(why.clone())),
            _ => Err(QueueError::DeployRefused(format!(
                "unexpected reply from deploy_remove: {reply:?}"
            ))),
        }
    }

    /// A subscription to the announcements of new current versions (`FUNCTION VERSION`).
    pub async fn deploy_changes(&self) -> Result<Subscription> {
        let subscription = self.subscriber.open();
        subscription
            .subscribe(Topic::Channel(DeployKeys::events()))
            .await?;
        Ok(subscription)
    }
}
