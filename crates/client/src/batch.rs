//! Batches: jobs of any functions, added in one or several calls while the batch is open,
//! with callbacks: a job enqueued when all of them succeeded (`on_success`), and one when all
//! have ended (`on_complete`), each receiving the batch's counts and the ids of the jobs that
//! failed or were cancelled. Exactly one of each per batch, however many workers end its
//! last jobs at once.
//!
//! A batch's keys are in a slot of its own (`{batch:ID}`, [`BatchKeys`]); its jobs' ends
//! reach it as they reach dependents in other functions: the script that ends a job returns
//! `batch ID` in its `notify`, and the caller counts it (`batch_done`, once per job). The
//! batch that is closed and complete marks its callbacks due, atomically, once; the caller
//! that got them enqueues each with the `once` key `batch:ID:KIND` (enqueued again, it is the
//! same job) and notes it (`batch_fired`). A caller that dies between the steps is made up
//! for by the workers' upkeep ([`check_due`]): it counts the ended jobs whose end was not
//! counted and enqueues callbacks left due.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasmgear_proto::crypto::{Field, KeyRing};
use wasmgear_proto::keys::BatchKeys;
use wasmgear_proto::limits::{MAX_BATCH_JOBS, MAX_FLOW_JOBS, RESERVATION_MS};
use wasmgear_proto::{FunctionName, JobId, JobState};

use crate::client::{Client, Placement};
use crate::connection::Connection;
use crate::dependencies::outcomes;
use crate::flow::ops_reserve as reserve;
use crate::options::EnqueueOptions;
use crate::{QueueError, Result, links, scripts};

/// A batch's callback: a job of `function`, whose input is the batch's outcome (JSON: the
/// batch's id and name, `total`, `succeeded`, `failed`, `cancelled`, the `failed_ids` and
/// `cancelled_ids`, and `data` as given here).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Callback {
    /// The function of the callback job.
    pub function: FunctionName,
    /// Passed on in the callback's input as `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// A batch's definition as stored: its spec, and the trace context it was opened in (its
/// callbacks carry it).
#[derive(Debug, Default, Serialize, Deserialize)]
struct StoredSpec {
    #[serde(flatten)]
    spec: BatchSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

impl StoredSpec {
    fn trace(&self) -> Option<wasmgear_proto::TraceContext> {
        let parent = self.trace.as_deref()?;
        wasmgear_proto::TraceContext::new(parent, self.tracestate.as_deref()).ok()
    }
}

/// What a batch is: its name and its callbacks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSpec {
    /// What the batch is called (shown with its status).
    #[serde(default)]
    pub name: String,
    /// Enqueued once every job has succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<Callback>,
    /// Enqueued once every job has ended, however.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<Callback>,
}

/// How a batch stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BatchStatus {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Whether jobs can still be added.
    pub open: bool,
    /// Its jobs.
    pub total: u64,
    /// Those not counted as ended yet.
    pub pending: u64,
    /// Those that succeeded.
    pub succeeded: u64,
    /// Those that failed.
    pub failed: u64,
    /// Those that were cancelled.
    pub cancelled: u64,
    /// The ids of the jobs that failed.
    pub failed_ids: Vec<String>,
    /// The ids of the jobs that were cancelled.
    pub cancelled_ids: Vec<String>,
    /// `on_success`: `None` (not due, or not asked for), `due`, or the callback job's id.
    pub on_success: Option<String>,
    /// `on_complete`: as `on_success`.
    pub on_complete: Option<String>,
    /// When it was opened, ms since the epoch (Redis' clock).
    pub created_ms: u64,
    /// When its last job ended with the batch closed, if it has.
    pub ended_ms: Option<u64>,
}

/// Checks a batch id: 1 to 32 hex digits.
fn check_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 32 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(QueueError::BadOption(format!(
            "batch id {id:?} is not 1 to 32 hex digits"
        )));
    }
    Ok(())
}

/// A refusal from a batch function, as the client's error.
fn refused(id: &str, error: redis::RedisError) -> QueueError {
    match (error.code(), error.detail()) {
        (Some("NOBATCH"), _) => QueueError::NoSuchBatch(id.to_string()),
        (Some("CONFLICT"), Some(detail)) => QueueError::Conflict(format!("batch {id}: {detail}")),
        (Some("BADBATCH"), Some(detail)) => QueueError::BadOption(format!("batch {id}: {detail}")),
        _ => QueueError::Redis(error),
    }
}

impl Client {
    /// Opens a batch: jobs are added with [`Client::add_to_batch`] until
    /// [`Client::close_batch`]. Returns its id.
    pub async fn open_batch(&self, spec: &BatchSpec) -> Result<String> {
        let id = wasmgear_proto::sync::random_hex(8);
        let opened_in = crate::propagation::current();
        let stored = StoredSpec {
            spec: spec.clone(),
            trace: opened_in.as_ref().map(|t| t.traceparent().to_string()),
            tracestate: opened_in.and_then(|t| t.tracestate().map(str::to_string)),
        };
        let def = serde_json::to_string(&stored)
            .map_err(|e| QueueError::BadOption(format!("the batch does not write as JSON: {e}")))?;
        let _: u64 = scripts::BATCH_OPEN
            .with_keys(&BatchKeys::all(&id))
            .arg(def)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| refused(&id, e))?;
        let _: i64 = scripts::BATCHES_DUE
            .with_keys(&[BatchKeys::due()])
            .arg("watch")
            .arg(&id)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(id)
    }

    /// Adds jobs of any functions to open batch `id`: every job is checked first, the batch
    /// counts them before they are written (so that none ends uncounted), then each
    /// function's jobs are written in one call. Returns their ids, in order.
    pub async fn add_to_batch(
        &self,
        id: &str,
        jobs: &[(FunctionName, &[u8], EnqueueOptions)],
    ) -> Result<Vec<JobId>> {
        check_id(id)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        if jobs.len() as u64 > MAX_BATCH_JOBS {
            return Err(QueueError::BadOption(format!(
                "{} jobs are more than the {MAX_BATCH_JOBS} a batch may have",
                jobs.len()
            )));
        }
        let mut groups: BTreeMap<&FunctionName, Vec<usize>> = BTreeMap::new();
        for (i, (function, input, options)) in jobs.iter().enumerate() {
            options
                .validate()
                .map_err(|e| QueueError::BadOption(format!("job {}: {e}", i + 1)))?;
            // A job whose key returned another would leave its reserved number unwritten,
            // and the batch waiting on it.
            if options.uniq.is_some() || options.once.is_some() || options.tick.is_some() {
                return Err(QueueError::BadOption(format!(
                    "job {}: a batch's jobs are always new, so they take no uniq, once or schedule tick",
                    i + 1
                )));
            }
            if input.len() > self.max_input_bytes() {
                return Err(QueueError::BadOption(format!(
                    "job {}: input of {} bytes is larger than the limit of {} bytes",
                    i + 1,
                    input.len(),
                    self.max_input_bytes()
                )));
            }
            groups.entry(function).or_default().push(i);
        }
        // `reserve` sets aside at most MAX_FLOW_JOBS numbers a call.
        let chunks: Vec<(&FunctionName, &[usize])> = groups
            .iter()
            .flat_map(|(function, members)| {
                members
                    .chunks(MAX_FLOW_JOBS as usize)
                    .map(move |chunk| (*function, chunk))
            })
            .collect();
        let firsts = futures_util::future::try_join_all(
            chunks
                .iter()
                .map(|(function, chunk)| reserve(&self.conn, function, chunk.len())),
        )
        .await?;
        let mut ids: Vec<Option<JobId>> = vec![None; jobs.len()];
        for ((function, chunk), first) in chunks.iter().zip(&firsts) {
            for (k, &i) in chunk.iter().enumerate() {
                ids[i] = Some(JobId {
                    function: (*function).clone(),
                    seq: first + k as u64,
                });
            }
        }
        let ids: Vec<JobId> = ids.into_iter().flatten().collect();
        let mut add = scripts::BATCH_ADD.with_keys(&BatchKeys::all(id));
        for job in &ids {
            add.arg(job.to_string());
        }
        let _: u64 = add
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| refused(id, e))?;
        let calls = groups.iter().map(|(function, members)| {
            let batch: Vec<(&[u8], EnqueueOptions)> = members
                .iter()
                .map(|&i| (jobs[i].1, jobs[i].2.clone()))
                .collect();
            let placements: Vec<Placement> = members
                .iter()
                .map(|&i| Placement {
                    number: Some(ids[i].seq),
                    batch: Some(id.to_string()),
                    ..Placement::default()
                })
                .collect();
            async move { self.write_jobs(function, &batch, &placements).await }
        });
        let written = futures_util::future::try_join_all(calls).await?;
        links::link_many(
            &self.conn,
            self.keys.as_deref(),
            written.into_iter().flat_map(|(_, l)| l).collect(),
        )
        .await?;
        Ok(ids)
    }

    /// Closes batch `id`: no job can be added any more; once all have ended, its callbacks
    /// are enqueued (at once, if they have).
    pub async fn close_batch(&self, id: &str) -> Result<()> {
        check_id(id)?;
        let fire: Vec<String> = scripts::BATCH_CLOSE
            .with_keys(&BatchKeys::all(id))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| refused(id, e))?;
        fire_callbacks(&self.conn, self.keys.as_deref(), id, &fire).await
    }

    /// Opens a batch, adds `jobs` and closes it: the usual way. Returns its id and the
    /// jobs' ids.
    pub async fn batch(
        &self,
        spec: &BatchSpec,
        jobs: &[(FunctionName, &[u8], EnqueueOptions)],
    ) -> Result<(String, Vec<JobId>)> {
        let id = self.open_batch(spec).await?;
        let ids = self.add_to_batch(&id, jobs).await?;
        self.close_batch(&id).await?;
        Ok((id, ids))
    }

    /// The batches not ended yet (or whose callbacks are not all enqueued), at most
    /// `most`, the soonest re-checked first.
    pub async fn unfinished_batches(&self, most: usize) -> Result<Vec<BatchStatus>> {
        let ids: Vec<String> = redis::cmd("ZRANGE")
            .arg(BatchKeys::due())
            .arg(0)
            .arg(most.saturating_sub(1))
            .query_async(&mut self.conn.clone())
            .await?;
        let mut batches = Vec::new();
        for id in ids.iter().filter(|id| check_id(id).is_ok()) {
            if let (Some(status), _) = read(&self.conn, id, false).await? {
                batches.push(status);
            }
        }
        Ok(batches)
    }

    /// How batch `id` stands.
    pub async fn batch_status(&self, id: &str) -> Result<BatchStatus> {
        check_id(id)?;
        let (state, _) = read(&self.conn, id, false).await?;
        state.ok_or_else(|| QueueError::NoSuchBatch(id.to_string()))
    }
}

/// Batch `id` as `batch_get` answers it (`None`: no such batch), and, with `unended`, the
/// ids of its jobs not counted as ended.
async fn read(
    conn: &Connection,
    id: &str,
    unended: bool,
) -> Result<(Option<BatchStatus>, Vec<String>)> {
    let (read, left) = read_with_spec(conn, id, unended).await?;
    Ok((read.map(|(status, _)| status), left))
}

/// [`read`], with the batch's definition (its callbacks).
async fn read_with_spec(
    conn: &Connection,
    id: &str,
    unended: bool,
) -> Result<(Option<(BatchStatus, StoredSpec)>, Vec<String>)> {
    let (fields, unsuccessful, left): (Vec<String>, Vec<String>, Vec<String>) = scripts::BATCH_GET
        .with_keys(&BatchKeys::all(id))
        .arg(if unended { "1" } else { "0" })
        .invoke_async(&mut conn.clone())
        .await?;
    if fields.is_empty() {
        return Ok((None, left));
    }
    let map: BTreeMap<&str, &str> = fields
        .chunks_exact(2)
        .map(|pair| (pair[0].as_str(), pair[1].as_str()))
        .collect();
    let number = |name: &str| map.get(name).and_then(|v| v.parse::<u64>().ok());
    let def: StoredSpec = map
        .get("def")
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    let (mut failed_ids, mut cancelled_ids) = (Vec::new(), Vec::new());
    for pair in unsuccessful.chunks_exact(2) {
        match pair[1].as_str() {
            "failed" => failed_ids.push(pair[0].clone()),
            _ => cancelled_ids.push(pair[0].clone()),
        }
    }
    let (total, succeeded, failed, cancelled) = (
        number("total").unwrap_or(0),
        number("succeeded").unwrap_or(0),
        number("failed").unwrap_or(0),
        number("cancelled").unwrap_or(0),
    );
    let status = BatchStatus {
        id: id.to_string(),
        name: def.spec.name.clone(),
        open: map.get("open") == Some(&"1"),
        total,
        pending: total.saturating_sub(succeeded + failed + cancelled),
        succeeded,
        failed,
        cancelled,
        failed_ids,
        cancelled_ids,
        on_success: map.get("success").map(|s| s.to_string()),
        on_complete: map.get("complete").map(|s| s.to_string()),
        created_ms: number("created_ms").unwrap_or(0),
        ended_ms: number("ended_ms"),
    };
    Ok((Some((status, def)), left))
}

/// Counts the end of job `job` (in `state`) in batch `batch`, and enqueues the callbacks
/// that made due.
pub(crate) async fn done(
    conn: &Connection,
    keys: Option<&KeyRing>,
    batch: &str,
    job: &str,
    state: &str,
) -> Result<()> {
    if check_id(batch).is_err() {
        tracing::warn!(batch, "skipping a batch id that does not read");
        return Ok(());
    }
    let fire: Vec<String> = scripts::BATCH_DONE
        .with_keys(&BatchKeys::all(batch))
        .arg(job)
        .arg(state)
        .invoke_async(&mut conn.clone())
        .await?;
    fire_callbacks(conn, keys, batch, &fire).await
}

/// Enqueues batch `id`'s callbacks `kinds` (`success`, `complete`), each once.
async fn fire_callbacks(
    conn: &Connection,
    keys: Option<&KeyRing>,
    id: &str,
    kinds: &[String],
) -> Result<()> {
    if kinds.is_empty() {
        return Ok(());
    }
    let (Some((status, def)), _) = read_with_spec(conn, id, false).await? else {
        return Ok(());
    };
    for kind in kinds {
        let callback = match kind.as_str() {
            "success" => def.spec.on_success.as_ref(),
            "complete" => def.spec.on_complete.as_ref(),
            _ => None,
        };
        let Some(callback) = callback else { continue };
        let input = json!({
            "batch": id,
            "name": status.name,
            "callback": kind,
            "total": status.total,
            "succeeded": status.succeeded,
            "failed": status.failed,
            "cancelled": status.cancelled,
            "failed_ids": status.failed_ids,
            "cancelled_ids": status.cancelled_ids,
            "data": callback.data,
        });
        let job = enqueue_once(
            conn,
            keys,
            &callback.function,
            &format!("batch:{id}:{kind}"),
            input.to_string().as_bytes(),
            def.trace().as_ref(),
        )
        .await?;
        let _: i64 = scripts::BATCH_FIRED
            .with_keys(&BatchKeys::all(id))
            .arg(kind)
            .arg(job.to_string())
            .invoke_async(&mut conn.clone())
            .await?;
    }
    Ok(())
}

/// Enqueues one job of `function` with `input` and the `once` key `once` (enqueued again,
/// the call returns the first job), in `trace` if given. A function that stores only
/// encrypted input refuses it plain: with `keys`, it is sent again sealed, bound to a number
/// reserved for it; without, the refusal says to give this component the key file (the
/// workers' upkeep, with its keys, fires it later).
async fn enqueue_once(
    conn: &Connection,
    keys: Option<&KeyRing>,
    function: &FunctionName,
    once: &str,
    input: &[u8],
    trace: Option<&wasmgear_proto::TraceContext>,
) -> Result<JobId> {
    let seq = match send_once(conn, function, once, input, None, trace).await {
        Err(e) if e.code() == Some("ENCRYPT") => {
            let Some(keys) = keys else {
                return Err(QueueError::Encryption(format!(
                    "the batch callback ({once}) of function {function}, which stores only encrypted input: \
                     give the component that fires it the key file (WASMGEAR_ENCRYPTION_KEY_FILE)"
                )));
            };
            let number = reserve(conn, function, 1).await?;
            let sealed = keys
                .seal(&format!("{function}:{number}"), Field::Input, input)
                .map_err(|e| QueueError::Encryption(e.to_string()))?;
            send_once(conn, function, once, &sealed, Some(number), trace).await?
        }
        sent => sent?,
    };
    let _: i64 = redis::cmd("SADD")
        .arg(wasmgear_proto::keys::functions())
        .arg(function.as_str())
        .query_async(&mut conn.clone())
        .await?;
    Ok(JobId {
        function: function.clone(),
        seq,
    })
}

/// One `enqueue` call of the job [`enqueue_once`] enqueues (at reserved `number`, if given):
/// its number.
async fn send_once(
    conn: &Connection,
    function: &FunctionName,
    once: &str,
    input: &[u8],
    number: Option<u64>,
    trace: Option<&wasmgear_proto::TraceContext>,
) -> redis::RedisResult<u64> {
    let mut call = scripts::on_function(&scripts::ENQUEUE, function);
    let mut options = vec![("once", once.to_string())];
    options.extend(number.map(|n| ("number", n.to_string())));
    if let Some(trace) = trace {
        options.push(("trace", trace.traceparent().to_string()));
        options.extend(trace.tracestate().map(|s| ("tracestate", s.to_string())));
    }
    call.arg(1)
        .option("call", wasmgear_proto::sync::random_hex(12))
        .arg(1)
        .arg(options.len());
    for (name, value) in &options {
        call.option(name, value);
    }
    call.arg(input);
    let (numbers, _, _, _): (Vec<u64>, String, Vec<String>, u32) =
        crate::connection::invoke_retrying("enqueue", conn, &call).await?;
    numbers.first().copied().ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "enqueue answered no job for a batch's callback",
        ))
    })
}

/// The most batches one upkeep round re-checks.
const BATCHES_PER_CHECK: usize = 20;

/// The workers' safety net for batches: re-checks a few batches due for it, counting the
/// ended jobs whose end was not counted (their caller died before `batch_done`; a job never
/// written, its reservation lapsed, counts as cancelled), and enqueueing callbacks left due.
/// A batch that is gone, or has ended with its callbacks enqueued, is no longer re-checked.
pub(crate) async fn check_due(conn: &Connection, keys: Option<&KeyRing>) -> Result<()> {
    let ids: Vec<String> = scripts::BATCHES_DUE
        .with_keys(&[BatchKeys::due()])
        .arg("due")
        .arg(BATCHES_PER_CHECK)
        .invoke_async(&mut conn.clone())
        .await?;
    for id in ids {
        if check_id(&id).is_err() {
            continue;
        }
        let (status, unended) = read(conn, &id, true).await?;
        let Some(status) = status else {
            unwatch(conn, &id).await?;
            continue;
        };
        let due: Vec<String> = [
            ("success", &status.on_success),
            ("complete", &status.on_complete),
        ]
        .into_iter()
        .filter(|(_, state)| state.as_deref() == Some("due"))
        .map(|(kind, _)| kind.to_string())
        .collect();
        if status.ended_ms.is_some() {
            fire_callbacks(conn, keys, &id, &due).await?;
            unwatch(conn, &id).await?;
            continue;
        }
        let jobs: Vec<JobId> = unended.iter().filter_map(|j| j.parse().ok()).collect();
        let lapsed = wasmgear_proto::units::now_ms() > status.created_ms + RESERVATION_MS;
        for outcome in outcomes(conn, &jobs).await? {
            let state = match outcome.state {
                Some(state) if state.is_final() => state,
                None if lapsed => JobState::Cancelled,
                _ => continue,
            };
            done(conn, keys, &id, &outcome.id.to_string(), state.as_str()).await?;
        }
    }
    Ok(())
}

async fn unwatch(conn: &Connection, id: &str) -> Result<()> {
    let _: i64 = scripts::BATCHES_DUE
        .with_keys(&[BatchKeys::due()])
        .arg("unwatch")
        .arg(id)
        .invoke_async(&mut conn.clone())
        .await?;
    Ok(())
}
