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

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};
use wasmgear_proto::deploy::{CHUNK_BYTES, DeployedVersion, field, version_of};
use wasmgear_proto::keys::DeployKeys;

use super::client::Client;
use super::keys::FunctionKeys;
use super::subscriber::{Subscription, Topic};
use super::{QueueError, Result, scripts};
use crate::job::FunctionName;

/// How many job records one `HSCAN` step reads when looking for jobs that name a version.
const SCAN_COUNT: usize = 500;

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

/// Field-value pairs of a hash.
type Pairs = Vec<(String, String)>;

fn registry_keys() -> [String; 4] {
    [
        DeployKeys::versions(),
        DeployKeys::current(),
        DeployKeys::history(),
        DeployKeys::events(),
    ]
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
    /// Stores `component` (a file named `name`.wasm, serving `functions`, with `manifest`'s
    /// text if it has one) and, if `activate`, makes it the current version of each of its
    /// functions. Then forgets versions beyond `keep` per function that no kept job names.
    /// The caller has checked that the component loads and the manifest parses.
    pub async fn deploy(
        &self,
        component: &[u8],
        name: &str,
        functions: &[FunctionName],
        manifest: Option<&str>,
        activate: bool,
        keep: usize,
    ) -> Result<DeployOutcome> {
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
        let chunks_key = DeployKeys::chunks(&version);
        let mut conn = self.conn.clone();
        // One chunk per call: no call holds Redis for long, and a worker reading this version
        // meanwhile (deployed before with the same bytes) reads the same bytes throughout.
        let mut chunks = 0u32;
        for (number, chunk) in component.chunks(CHUNK_BYTES).enumerate() {
            let _: i64 = redis::cmd("HSET")
                .arg(&chunks_key)
                .arg(number)
                .arg(chunk)
                .query_async(&mut conn)
                .await?;
            chunks += 1;
        }
        let record = DeployedVersion {
            function: String::new(),
            version: version.clone(),
            sha256,
            size: component.len() as u64,
            chunks,
            name: name.to_string(),
            functions: functions.iter().map(|f| f.to_string()).collect(),
            manifest: manifest.map(str::to_string),
            deployed_ms: 0,
        };
        let text = serde_json::to_string(&record).unwrap_or_default();
        let candidates: Vec<String> = scripts::DEPLOY
            .with_keys(&registry_keys())
            .arg(&version)
            .arg(text)
            .arg(if activate { "1" } else { "0" })
            .arg(keep)
            .invoke_async(&mut conn)
            .await?;
        let (forgotten, kept_for_jobs) = self.forget_unused(candidates, keep).await?;
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
        })
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
        let reply: Vec<String> = scripts::DEPLOY_FORGET
            .with_keys(&registry_keys())
            .arg(keep)
            .arg(&unnamed)
            .invoke_async(&mut conn)
            .await?;
        let split = reply.iter().position(|r| r == "-").unwrap_or(reply.len());
        for version in reply.iter().skip(split + 1) {
            let _: i64 = redis::cmd("DEL")
                .arg(DeployKeys::chunks(version))
                .query_async(&mut conn)
                .await?;
        }
        Ok((reply[..split].to_vec(), named.into_iter().collect()))
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
