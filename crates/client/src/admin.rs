//! The operator side of the queue: the overview of queues, failure groups and retries,
//! tags, statistics, and each function's settings (pause, concurrency cap, rate limit,
//! finished jobs kept).

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Serialize;
use wasmgear_proto::{Event, FunctionEvent};

use super::client::Client;
use super::options::{Priority, RetryOptions, check_key};
use super::subscriber::{Delivery, Topic};
use super::{QueueError, Result, links, scripts};
use wasmgear_proto::keys::{self, FunctionKeys};
use wasmgear_proto::model::{JobState, JobStatus};
use wasmgear_proto::{FunctionName, JobId};

/// The most jobs one `retry` call moves; bigger groups take several calls.
const RETRY_BATCH: usize = 1000;

/// How many jobs of one function are where, and who serves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueOverview {
    /// The function.
    pub function: String,
    /// Ready to run.
    pub queued: u64,
    /// Waiting for their time (delayed, or retrying after backoff).
    pub scheduled: u64,
    /// Running now.
    pub running: u64,
    /// Waiting for their dependencies.
    pub waiting: u64,
    /// Finished and still kept, by outcome.
    pub succeeded: u64,
    /// Failed for good and still kept.
    pub failed: u64,
    /// Cancelled and still kept.
    pub cancelled: u64,
    /// Live workers serving the function.
    pub workers: u64,
    /// Whether leasing is paused.
    pub paused: bool,
}

/// One failure group of one function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureGroup {
    /// The function.
    pub function: String,
    /// The group: the error class the jobs failed with.
    pub group: String,
    /// Failed jobs kept in the group.
    pub count: u64,
}

/// Wait or run times of one day.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeStats {
    /// How many jobs were measured.
    pub count: u64,
    /// Their mean, ms.
    pub mean_ms: f64,
    /// Their standard deviation, ms.
    pub std_dev_ms: f64,
    /// Histogram: `s0`..`s59` (seconds), `m1`..`m59` (minutes), `h1`..`h23` (hours),
    /// `d1`..`d30` (days; d30 is "30 days or more") → count, non-empty buckets in order.
    pub histogram: Vec<(String, u64)>,
}

/// One function's statistics for one day (UTC), as qless keeps them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DailyStats {
    /// The function.
    pub function: String,
    /// The day, `YYYY-MM-DD`.
    pub date: String,
    /// From ready to leased, for the jobs leased that day.
    pub wait: TimeStats,
    /// From leased to ended, for the attempts that ended that day.
    pub run: TimeStats,
    /// Attempts that failed (one job may fail several times).
    pub failures: u64,
    /// Attempts that were retried.
    pub retries: u64,
    /// Jobs that failed for good.
    pub failed: u64,
}

/// A function's settings, shared by all workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FunctionConfig {
    /// Workers lease none of its jobs.
    pub paused: bool,
    /// The most of its jobs running at once, over all workers.
    pub concurrency: Option<u64>,
    /// The most leases per interval, over all workers: `(leases, interval)`.
    #[serde(serialize_with = "rate_as_text")]
    pub rate_limit: Option<(u64, Duration)>,
    /// The most finished jobs kept (default 50 000).
    pub keep_finished: Option<u64>,
    /// Each group's most jobs running at once, over all workers, unless the group has its
    /// own (1: each group is a sequence).
    pub group_concurrency: Option<u64>,
    /// Each group's most leases per interval, unless the group has its own.
    #[serde(serialize_with = "rate_as_text")]
    pub group_rate_limit: Option<(u64, Duration)>,
    /// How many replicas must confirm each enqueue of its jobs and each completion before
    /// the call reports success (a client's or a worker's own setting may ask for more).
    pub min_replicas: Option<u64>,
    /// It stores only encrypted input: a plain one is refused (see
    /// [`wasmgear_proto::crypto`]).
    pub encrypt: bool,
}

pub(crate) fn rate_as_text<S: serde::Serializer>(
    rate: &Option<(u64, Duration)>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match rate {
        Some((n, interval)) => s.serialize_str(&format!("{n}/{}ms", interval.as_millis())),
        None => s.serialize_none(),
    }
}

/// One change to a function's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Setting {
    /// Pause (`true`) or resume leasing.
    Paused(bool),
    /// Cap jobs running at once (`None`: no cap).
    Concurrency(Option<u64>),
    /// Limit leases per interval (`None`: no limit).
    RateLimit(Option<(u64, Duration)>),
    /// Cap finished jobs kept (`None`: the default).
    KeepFinished(Option<u64>),
    /// Cap each group's jobs running at once (`None`: no cap); a group's own overrides it.
    GroupConcurrency(Option<u64>),
    /// Limit each group's leases per interval (`None`: no limit); a group's own overrides it.
    GroupRateLimit(Option<(u64, Duration)>),
    /// Have each enqueue of its jobs and each completion confirmed by this many replicas
    /// (`None`: none asked; see [`crate::replication`]).
    MinReplicas(Option<u64>),
    /// Store only encrypted input (`true`), or take plain input again.
    Encrypt(bool),
}

impl Client {
    /// Every function enqueued to or served so far, sorted.
    pub async fn functions(&self) -> Result<Vec<FunctionName>> {
        let names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys::functions())
            .query_async(&mut self.conn.clone())
            .await?;
        let mut functions: Vec<FunctionName> = names
            .into_iter()
            .filter_map(|name| FunctionName::new(name).ok())
            .collect();
        functions.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        Ok(functions)
    }

    /// Refuses a function nothing was ever enqueued for, configured, or served
    /// ([`QueueError::NoSuchFunction`]).
    pub async fn check_function(&self, function: &FunctionName) -> Result<()> {
        let known: bool = redis::cmd("SISMEMBER")
            .arg(keys::functions())
            .arg(function.as_str())
            .query_async(&mut self.conn.clone())
            .await?;
        match known {
            true => Ok(()),
            false => Err(QueueError::NoSuchFunction(function.clone())),
        }
    }

    /// The overview of `function`'s queue.
    pub async fn queue(&self, function: &FunctionName) -> Result<QueueOverview> {
        let keys = FunctionKeys::new(function);
        let (ungrouped, grouped, scheduled, running, waiting, counts, paused): (
            u64,
            u64,
            u64,
            u64,
            u64,
            BTreeMap<String, i64>,
            Option<String>,
        ) = redis::pipe()
            .zcard(keys.ready())
            .zcard(keys.group_ready())
            .zcard(keys.scheduled())
            .zcard(keys.leased())
            .zcard(keys.waiting())
            .hgetall(keys.counts())
            .hget(keys.config(), "paused")
            .query_async(&mut self.conn.clone())
            .await?;
        let count = |state: &str| counts.get(state).copied().unwrap_or(0).max(0) as u64;
        Ok(QueueOverview {
            function: function.to_string(),
            queued: ungrouped + grouped,
            scheduled,
            running,
            waiting,
            succeeded: count("succeeded"),
            failed: count("failed"),
            cancelled: count("cancelled"),
            workers: self.live_workers(function).await?,
            paused: paused.as_deref() == Some("1"),
        })
    }

    /// The overview of every known function's queue.
    pub async fn queues(&self) -> Result<Vec<QueueOverview>> {
        let mut overviews = Vec::new();
        for function in self.functions().await? {
            overviews.push(self.queue(&function).await?);
        }
        Ok(overviews)
    }

    /// The failure groups of `function` (or of every known function), with their counts.
    pub async fn failure_groups(
        &self,
        function: Option<&FunctionName>,
    ) -> Result<Vec<FailureGroup>> {
        let functions = match function {
            Some(f) => vec![f.clone()],
            None => self.functions().await?,
        };
        let mut groups = Vec::new();
        for function in functions {
            let counts: BTreeMap<String, i64> = redis::cmd("HGETALL")
                .arg(FunctionKeys::new(&function).counts())
                .query_async(&mut self.conn.clone())
                .await?;
            for (field, count) in counts {
                if let Some(group) = field.strip_prefix("failed:")
                    && count > 0
                {
                    groups.push(FailureGroup {
                        function: function.to_string(),
                        group: group.to_string(),
                        count: count as u64,
                    });
                }
            }
        }
        Ok(groups)
    }

    /// The failed jobs of `function` in failure group `group`, oldest first, from `offset`,
    /// at most `limit`; and how many the group holds in all.
    pub async fn failed_jobs(
        &self,
        function: &FunctionName,
        group: &str,
        offset: usize,
        limit: usize,
    ) -> Result<(u64, Vec<JobStatus>)> {
        let key = FunctionKeys::new(function).failed();
        let (from, to) = lex_range(group);
        let (total, members): (u64, Vec<Vec<u8>>) = redis::pipe()
            .cmd("ZLEXCOUNT")
            .arg(&key)
            .arg(&from)
            .arg(&to)
            .cmd("ZRANGEBYLEX")
            .arg(&key)
            .arg(&from)
            .arg(&to)
            .arg("LIMIT")
            .arg(offset)
            .arg(limit)
            .query_async(&mut self.conn.clone())
            .await?;
        let mut jobs = Vec::new();
        for seq in members.iter().filter_map(|m| indexed_number(m)) {
            let id = JobId {
                function: function.clone(),
                seq,
            };
            match self.status(&id).await {
                Ok(status) => jobs.push(status),
                Err(QueueError::NoSuchJob(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok((total, jobs))
    }

    /// Runs job `id` again if it failed or was cancelled, with as many attempts as it first
    /// had; it resumes from its checkpoint, if it keeps one. Returns whether it was queued
    /// again (`false`: it had not ended so).
    pub async fn retry(&self, id: &JobId) -> Result<bool> {
        self.retry_with(id, RetryOptions::default()).await
    }

    /// [`Client::retry`] with `options` (`fresh`: drop its checkpoint, so that it starts
    /// from the beginning).
    pub async fn retry_with(&self, id: &JobId, options: RetryOptions) -> Result<bool> {
        let (moved, relink, _): (Vec<u64>, Vec<String>, u64) =
            scripts::on_function(&scripts::RETRY, &id.function)
                .arg("job")
                .arg(id.seq)
                .arg(options.args())
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(|e| no_job(e, id))?;
        self.relink_retried(relink).await?;
        Ok(!moved.is_empty())
    }

    /// Links retried jobs again to their dependencies in other functions (the flat list of
    /// dependent, dependency that `retry` returned).
    async fn relink_retried(&self, relink: Vec<String>) -> Result<()> {
        for pair in relink.chunks_exact(2) {
            let dependent: JobId = pair[0].parse()?;
            let dependency: JobId = pair[1].parse()?;
            links::link(&self.conn, self.keys.as_deref(), &dependent, &dependency).await?;
        }
        Ok(())
    }

    /// Runs up to `limit` failed jobs of `function`'s failure group `group` again (oldest
    /// first), in batches, each resuming from its checkpoint if it keeps one. Returns their
    /// ids.
    pub async fn retry_group(
        &self,
        function: &FunctionName,
        group: &str,
        limit: usize,
    ) -> Result<Vec<JobId>> {
        self.retry_group_with(function, group, limit, RetryOptions::default())
            .await
    }

    /// [`Client::retry_group`] with `options`.
    pub async fn retry_group_with(
        &self,
        function: &FunctionName,
        group: &str,
        limit: usize,
        options: RetryOptions,
    ) -> Result<Vec<JobId>> {
        let mut ids = Vec::new();
        while ids.len() < limit {
            let batch = (limit - ids.len()).min(RETRY_BATCH);
            let (moved, relink, looked): (Vec<u64>, Vec<String>, usize) =
                scripts::on_function(&scripts::RETRY, function)
                    .arg("group")
                    .arg(group)
                    .arg(batch)
                    .arg(options.args())
                    .invoke_async(&mut self.conn.clone())
                    .await?;
            self.relink_retried(relink).await?;
            ids.extend(moved.into_iter().map(|seq| JobId {
                function: function.clone(),
                seq,
            }));
            if looked < batch {
                break;
            }
        }
        Ok(ids)
    }

    /// Changes the priority of job `id`, if it has not started. Returns the job's state and
    /// whether the priority changed (`false`: it is running or has ended).
    pub async fn set_priority(&self, id: &JobId, priority: Priority) -> Result<(bool, JobState)> {
        let (changed, state): (i64, String) =
            scripts::on_function(&scripts::PRIORITY, &id.function)
                .arg(id.seq)
                .arg(priority.value())
                .invoke_async(&mut self.conn.clone())
                .await?;
        if state == "missing" {
            return Err(QueueError::NoSuchJob(id.clone()));
        }
        let state = state.parse().map_err(|reason| QueueError::Corrupt {
            id: id.clone(),
            reason,
        })?;
        Ok((changed == 1, state))
    }

    /// The events of `function` (of every function when `None`) as they are published,
    /// typed, from the server the client was given (in a cluster, every node's events
    /// reach it). The stream goes on across reconnections (a restart of Redis, a cut
    /// network); what is published while the connection is down is missed, and said so in
    /// the log.
    pub async fn events(
        &self,
        function: Option<&FunctionName>,
    ) -> Result<impl futures_util::Stream<Item = FunctionEvent> + use<>> {
        let subscription = self.subscriber.open();
        subscription
            .subscribe(match function {
                Some(function) => Topic::Channel(FunctionKeys::new(function).events()),
                None => Topic::Pattern(FunctionKeys::all_events_pattern()),
            })
            .await?;
        Ok(subscription
            .into_stream()
            .filter_map(|delivery| async move {
                let message = match delivery {
                    Delivery::Message(message) => message,
                    Delivery::Lost => {
                        tracing::warn!(
                            "lost the connection to Redis: events are missed until it is back"
                        );
                        return None;
                    }
                    Delivery::Resubscribed => {
                        tracing::info!(
                            "listening to events again (those published meanwhile were missed)"
                        );
                        return None;
                    }
                };
                let function = FunctionKeys::function_of_events(&message.channel)?;
                let events: Vec<FunctionEvent> = Event::parse_message(&message.payload)
                    .into_iter()
                    .map(|(event, json)| FunctionEvent {
                        function: function.clone(),
                        event,
                        json: json.to_string(),
                    })
                    .collect();
                Some(futures_util::stream::iter(events))
            })
            .flatten())
    }

    /// Adds (`add`) or removes tags of job `id`; returns its tags afterwards.
    pub async fn tag(&self, id: &JobId, add: bool, tags: &[String]) -> Result<Vec<String>> {
        for tag in tags {
            check_key("tag", tag)?;
        }
        let mut call = scripts::on_function(&scripts::TAG, &id.function);
        call.arg(id.seq).arg(if add { "add" } else { "remove" });
        for tag in tags {
            call.arg(tag);
        }
        call.invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| no_job(e, id))
    }

    /// The jobs tagged `tag`, of `function` or of every known function, oldest first within
    /// a function, at most `limit`.
    pub async fn tagged(
        &self,
        tag: &str,
        function: Option<&FunctionName>,
        limit: usize,
    ) -> Result<Vec<JobId>> {
        check_key("tag", tag)?;
        let functions = match function {
            Some(f) => vec![f.clone()],
            None => self.functions().await?,
        };
        let (from, to) = lex_range(tag);
        let mut ids = Vec::new();
        for function in functions {
            if ids.len() >= limit {
                break;
            }
            let members: Vec<Vec<u8>> = redis::cmd("ZRANGEBYLEX")
                .arg(FunctionKeys::new(&function).tagged())
                .arg(&from)
                .arg(&to)
                .arg("LIMIT")
                .arg(0)
                .arg(limit - ids.len())
                .query_async(&mut self.conn.clone())
                .await?;
            ids.extend(
                members
                    .iter()
                    .filter_map(|m| indexed_number(m))
                    .map(|seq| JobId {
                        function: function.clone(),
                        seq,
                    }),
            );
        }
        Ok(ids)
    }

    /// Jobs of `function` in `state`, at most `limit`: queued ones in the order they will
    /// run, scheduled ones by time, running ones by lease expiry, failed ones by group,
    /// succeeded and cancelled ones by when they will be forgotten.
    pub async fn jobs_in_state(
        &self,
        function: &FunctionName,
        state: JobState,
        limit: usize,
    ) -> Result<Vec<JobId>> {
        let keys = FunctionKeys::new(function);
        let range = |key: String, stop: usize| async move {
            let numbers: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(stop as i64 - 1)
                .query_async(&mut self.conn.clone())
                .await?;
            Ok::<_, QueueError>(numbers)
        };
        let id = |seq| JobId {
            function: function.clone(),
            seq,
        };
        let numbers = |members: Vec<Vec<u8>>| -> Vec<u64> {
            members
                .iter()
                .filter_map(|m| match m.contains(&0) {
                    true => indexed_number(m),
                    false => std::str::from_utf8(m).ok()?.parse().ok(),
                })
                .collect()
        };
        let listed = match state {
            JobState::Queued => {
                // Those without a group, then those with one (by group, then as they run).
                let mut members = range(keys.ready(), limit).await?;
                if members.len() < limit {
                    members.extend(range(keys.group_ready(), limit - members.len()).await?);
                }
                members
            }
            JobState::Scheduled => range(keys.scheduled(), limit).await?,
            JobState::Running => range(keys.leased(), limit).await?,
            JobState::Waiting => range(keys.waiting(), limit).await?,
            JobState::Failed => range(keys.failed(), limit).await?,
            JobState::Succeeded | JobState::Cancelled | JobState::Expired => {
                // Finished jobs share one set: read it in pages and keep those in `state`.
                let mut found = Vec::new();
                let mut offset = 0usize;
                while found.len() < limit {
                    let page: Vec<u64> = redis::cmd("ZRANGE")
                        .arg(keys.expires())
                        .arg(offset)
                        .arg(offset + 499)
                        .query_async(&mut self.conn.clone())
                        .await?;
                    if page.is_empty() {
                        break;
                    }
                    offset += page.len();
                    for seq in page {
                        match self.status(&id(seq)).await {
                            Ok(status) if status.record.state == state => found.push(id(seq)),
                            Ok(_) | Err(QueueError::NoSuchJob(_)) => {}
                            Err(e) => return Err(e),
                        }
                        if found.len() >= limit {
                            break;
                        }
                    }
                }
                return Ok(found);
            }
        };
        Ok(numbers(listed).into_iter().map(id).collect())
    }

    /// `function`'s statistics for `day` (days since 1970-01-01, UTC).
    pub async fn stats(&self, function: &FunctionName, day: i64) -> Result<DailyStats> {
        let all: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(FunctionKeys::new(function).stats())
            .query_async(&mut self.conn.clone())
            .await?;
        let prefix = format!("{day}:");
        let field = |name: &str| all.get(&format!("{prefix}{name}"));
        let number = |name: &str| {
            field(name)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let times = |kind: &str| {
            let count = number(&format!("{kind}:count")) as u64;
            // Sums (`sum`, `squares`), or, for days written by earlier versions, Welford's
            // running mean and sum of squared deviations (`mean`, `vk`).
            let (mean_ms, vk) = match field(&format!("{kind}:sum")) {
                Some(_) if count > 0 => {
                    let n = count as f64;
                    let sum = number(&format!("{kind}:sum"));
                    let squares = number(&format!("{kind}:squares"));
                    (sum / n, squares - sum * sum / n)
                }
                Some(_) => (0.0, 0.0),
                None => (
                    number(&format!("{kind}:mean")),
                    number(&format!("{kind}:vk")),
                ),
            };
            // Buckets in time order: s before m before h before d, then by number.
            let mut buckets = Vec::new();
            for (name, value) in &all {
                let Some(bucket) = name
                    .strip_prefix(&prefix)
                    .and_then(|rest| rest.strip_prefix(kind))
                    .and_then(|rest| rest.strip_prefix(':'))
                else {
                    continue;
                };
                let Some(order) = bucket.chars().next().and_then(|unit| "smhd".find(unit)) else {
                    continue;
                };
                // (`mean`, `sum` and `squares` start with a unit letter but are no
                // buckets: their rest is no number.)
                let (Ok(n), Ok(count)) = (bucket[1..].parse::<u64>(), value.parse::<u64>()) else {
                    continue;
                };
                if count > 0 {
                    buckets.push(((order, n), bucket.to_string(), count));
                }
            }
            buckets.sort();
            let histogram = buckets.into_iter().map(|(_, b, c)| (b, c)).collect();
            TimeStats {
                count,
                mean_ms,
                std_dev_ms: if count > 1 {
                    (vk / (count - 1) as f64).max(0.0).sqrt()
                } else {
                    0.0
                },
                histogram,
            }
        };
        Ok(DailyStats {
            function: function.to_string(),
            date: wasmgear_proto::units::date_of_day(day),
            wait: times("wait"),
            run: times("run"),
            failures: number("failures") as u64,
            retries: number("retries") as u64,
            failed: number("failed") as u64,
        })
    }

    /// `function`'s settings.
    pub async fn config(&self, function: &FunctionName) -> Result<FunctionConfig> {
        let all: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(FunctionKeys::new(function).config())
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(read_config(&all))
    }

    /// Changes `function`'s settings; idle workers see the change at once. Returns the
    /// settings afterwards.
    pub async fn configure(
        &self,
        function: &FunctionName,
        settings: &[Setting],
    ) -> Result<FunctionConfig> {
        let mut call = scripts::on_function(&scripts::CONFIGURE, function);
        let text = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
        for setting in settings {
            match setting {
                Setting::Paused(paused) => {
                    call.arg("paused").arg(if *paused { "1" } else { "" });
                }
                Setting::Encrypt(encrypt) => {
                    call.arg("encrypt").arg(if *encrypt { "1" } else { "" });
                }
                Setting::Concurrency(cap) => {
                    if *cap == Some(0) {
                        return Err(QueueError::BadOption(
                            "a concurrency cap of 0 would stop the queue; use pause instead".into(),
                        ));
                    }
                    call.arg("concurrency").arg(text(*cap));
                }
                Setting::RateLimit(rate) => {
                    rate_args(&mut call, "rate_limit", "rate_interval_ms", *rate)?;
                }
                Setting::KeepFinished(keep) => {
                    if *keep == Some(0) {
                        return Err(QueueError::BadOption(
                            "keep at least 1 finished job (results would vanish at once)".into(),
                        ));
                    }
                    call.arg("keep_finished").arg(text(*keep));
                }
                Setting::GroupConcurrency(cap) => {
                    if *cap == Some(0) {
                        return Err(QueueError::BadOption(
                            "a group concurrency of 0 would stop every group; pause the function or a group instead".into(),
                        ));
                    }
                    call.arg("group_concurrency").arg(text(*cap));
                }
                Setting::GroupRateLimit(rate) => {
                    rate_args(
                        &mut call,
                        "group_rate_limit",
                        "group_rate_interval_ms",
                        *rate,
                    )?;
                }
                Setting::MinReplicas(count) => {
                    use wasmgear_proto::limits::MAX_MIN_REPLICAS;
                    if count.is_some_and(|n| n == 0 || n > MAX_MIN_REPLICAS) {
                        return Err(QueueError::BadOption(format!(
                            "min_replicas must be 1 to {MAX_MIN_REPLICAS} (or none to ask for none)"
                        )));
                    }
                    call.arg("min_replicas").arg(text(*count));
                }
            }
        }
        self.register(function).await?;
        let flat: Vec<String> = call.invoke_async(&mut self.conn.clone()).await?;
        let all = flat
            .chunks(2)
            .filter_map(|pair| Some((pair.first()?.clone(), pair.get(1)?.clone())))
            .collect();
        Ok(read_config(&all))
    }
}

/// Adds a rate limit's settings `limit` and `interval` to `call` (empty values clear them),
/// refusing a limit of 0 jobs or an interval under 1 ms.
pub(crate) fn rate_args(
    call: &mut scripts::FunctionCall,
    limit: &str,
    interval: &str,
    rate: Option<(u64, Duration)>,
) -> Result<()> {
    if let Some((n, every)) = rate
        && (n == 0 || every.as_millis() == 0)
    {
        return Err(QueueError::BadOption(
            "a rate limit needs at least 1 job per interval of at least 1ms".into(),
        ));
    }
    let text = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
    call.arg(limit).arg(text(rate.map(|r| r.0)));
    call.arg(interval)
        .arg(text(rate.map(|r| r.1.as_millis() as u64)));
    Ok(())
}

fn read_config(all: &BTreeMap<String, String>) -> FunctionConfig {
    let number = |name: &str| all.get(name).and_then(|v| v.parse::<u64>().ok());
    FunctionConfig {
        paused: all.get("paused").map(String::as_str) == Some("1"),
        concurrency: number("concurrency"),
        rate_limit: number("rate_limit")
            .zip(number("rate_interval_ms"))
            .map(|(n, ms)| (n, Duration::from_millis(ms))),
        keep_finished: number("keep_finished"),
        group_concurrency: number("group_concurrency"),
        group_rate_limit: number("group_rate_limit")
            .zip(number("group_rate_interval_ms"))
            .map(|(n, ms)| (n, Duration::from_millis(ms))),
        min_replicas: number("min_replicas"),
        encrypt: all.get("encrypt").map(String::as_str) == Some("1"),
    }
}

/// The lex range of the index members `NAME\0NUMBER` of one name.
fn lex_range(name: &str) -> (Vec<u8>, Vec<u8>) {
    let mut from = b"[".to_vec();
    from.extend_from_slice(name.as_bytes());
    from.push(0);
    let mut to = b"(".to_vec();
    to.extend_from_slice(name.as_bytes());
    to.push(1);
    (from, to)
}

/// The job number at the end of an index member `NAME\0NUMBER`.
fn indexed_number(member: &[u8]) -> Option<u64> {
    let at = member.iter().rposition(|&b| b == 0)?;
    std::str::from_utf8(&member[at + 1..]).ok()?.parse().ok()
}

/// Reads the script errors `NOJOB` as [`QueueError::NoSuchJob`], `BADJOB` as
/// [`QueueError::BadOption`] and `CONFLICT` as [`QueueError::Conflict`].
fn no_job(e: redis::RedisError, id: &JobId) -> QueueError {
    match e.code() {
        Some("NOJOB") => QueueError::NoSuchJob(id.clone()),
        Some("BADJOB") => QueueError::BadOption(e.detail().unwrap_or_default().to_string()),
        Some("CONFLICT") => QueueError::Conflict(e.detail().unwrap_or_default().to_string()),
        _ => QueueError::Redis(e),
    }
}
