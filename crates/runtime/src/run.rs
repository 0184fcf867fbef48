//! One job in one fresh `Store`: instantiate, call `handler.run`, drop; traps and limits
//! become error classes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline, WasmBacktrace};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::cancel::{CancelReason, CancelSignal};
use wasmgear_proto::{ErrorClass, JobFailure, JobInfo, LogLevel, Outcome, Progress};

use super::bindings::{JobError, WitJobInfo};
use super::engine::{Limits, Runtime};
use super::http::HttpGate;
use super::output::{GuestOutput, JobLog, truncate};
use super::plugin::{Entry, Plugin};
use wasmgear_proto::sync::Locked;

/// Where a running job's reports go. Called from inside the guest: must not block.
pub trait JobHooks: Send + Sync {
    /// The guest reported progress.
    fn progress(&self, progress: Progress);
    /// The guest wrote a log line.
    fn log(&self, level: LogLevel, message: String);
    /// The job's fresh instance is ready, `took` after `run` began (its store, WASI context
    /// and instantiation); the guest's handler is called next. By default nothing is done.
    fn instantiated(&self, took: Duration) {
        let _ = took;
    }
    /// The job has stopped; its linear memories reached `peak_bytes` together at most (their
    /// initial sizes and every growth allowed). By default nothing is done.
    fn memory(&self, peak_bytes: usize) {
        let _ = peak_bytes;
    }
    /// Where the job's child jobs go (`wasmgear:job/jobs`); `None` (the default): the job
    /// runs with no queue behind it, and enqueueing a child says so.
    fn children(&self) -> Option<Arc<dyn ChildJobs>> {
        None
    }
    /// Where the job's dependencies are read (`wasmgear:job/dependencies`); `None` (the
    /// default): the job runs with no queue behind it and has no dependencies.
    fn dependencies(&self) -> Option<Arc<dyn crate::JobDependencies>> {
        None
    }
    /// Where the job's checkpoints are kept (`wasmgear:job/checkpoint`); `None` (the
    /// default): the job runs with no queue behind it, and keeps them for the attempt only.
    fn checkpoints(&self) -> Option<Arc<dyn crate::JobCheckpoints>> {
        None
    }
}

/// A child job to enqueue, as the guest asked for it (its grant and the cap checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildRequest {
    /// The function.
    pub function: wasmgear_proto::FunctionName,
    /// The input.
    pub input: Vec<u8>,
    /// Its key within the parent: the guest's, or `#DIGEST.N` (a digest of its function and
    /// input, and how many children alike in both the attempt enqueued before it).
    pub key: String,
    /// Priority, -1000..1000.
    pub priority: Option<i32>,
    /// Attempts in all.
    pub max_attempts: Option<u32>,
    /// Timeout of one attempt.
    pub timeout: Option<Duration>,
}

/// How a child job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildOutcome {
    /// Succeeded with this output.
    Succeeded(Vec<u8>),
    /// Failed for good with this message.
    Failed(String),
    /// Cancelled.
    Cancelled,
}

/// A future a [`ChildJobs`] method returns.
pub type ChildFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// The queue behind a running job's child jobs (the worker provides it; the runtime never
/// talks to Redis). Errors are sentences the guest sees.
pub trait ChildJobs: Send + Sync {
    /// Enqueues `request` as a child of the running job (the same key from any attempt of
    /// the parent returns the same child). Returns its id.
    fn enqueue(&self, request: ChildRequest) -> ChildFuture<Result<String, String>>;
    /// Waits up to `timeout` for job `id` to end.
    fn wait(&self, id: String, timeout: Duration) -> ChildFuture<Result<ChildOutcome, String>>;
}

/// Caps one job's memory and notes when it was refused, so that the trap that usually
/// follows (an allocation failure aborts the guest) is reported as `memory-limit`.
struct MemoryLimiter {
    memory_bytes: usize,
    refused: bool,
    /// The bytes of linear memory allowed so far, every memory of the instance together.
    total: usize,
    /// The most `total` has been.
    peak: usize,
}

/// Most table elements one job may have (function tables of large interpreters fit).
pub(crate) const MAX_TABLE_ELEMENTS: usize = 200_000;

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.refused = true;
            return Ok(false);
        }
        self.total = self.total.saturating_add(desired.saturating_sub(current));
        self.peak = self.peak.max(self.total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            self.refused = true;
            return Ok(false);
        }
        Ok(true)
    }
}

/// The data of one job's `Store` (what host imports see as `self`).
pub struct StoreData {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    pub(crate) log: Arc<JobLog>,
    pub(crate) cancel: CancelSignal,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    http: WasiHttpCtx,
    http_gate: HttpGate,
    /// The queue behind child jobs, and how many `enqueue` calls the job has made.
    pub(crate) children: Option<Arc<dyn ChildJobs>>,
    pub(crate) child_calls: u32,
    /// Children enqueued without a key, per the digest of their function and input: the
    /// default key is that digest and its count, the same on every attempt of the parent
    /// whatever the order of its calls.
    pub(crate) unkeyed_children: std::collections::HashMap<[u8; 32], u32>,
    pub(crate) child_grants: Arc<Vec<wasmgear_proto::FunctionName>>,
    pub(crate) max_children: u32,
    /// The queue behind the job's dependencies.
    pub(crate) dependencies: Option<Arc<dyn crate::JobDependencies>>,
    /// The job's checkpoints.
    pub(crate) checkpoint: CheckpointState,
    /// The cancel signals of a batch's jobs, in the batch's order (`batch-jobs.cancelled`);
    /// empty for one job.
    pub(crate) batch: Vec<CancelSignal>,
}

/// A running job's checkpoints: where they are kept, the plugin's limit, and the last one
/// this attempt saved (what `load` answers first).
pub(crate) struct CheckpointState {
    pub(crate) queue: Option<Arc<dyn crate::JobCheckpoints>>,
    pub(crate) max_bytes: usize,
    pub(crate) saved: Option<Vec<u8>>,
}

impl WasiHttpView for StoreData {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_gate,
        }
    }
}

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Why the epoch callback stopped the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    Deadline,
    Cancelled,
}

/// One job of a batch, as [`Runtime::run_batch`] is given it.
pub struct BatchEntry<'a> {
    /// The job.
    pub job: &'a JobInfo,
    /// Its input.
    pub input: &'a [u8],
    /// Its own cancellation (a client's cancel, its lease lost): the guest sees it through
    /// `batch-jobs.cancelled`, and a job whose signal fired ends cancelled.
    pub cancel: CancelSignal,
}

/// What watches one call into a guest (a job's or a batch's store): its deadline and
/// cancellation, and what its end is read from.
struct Watch {
    stopped: Arc<std::sync::Mutex<Option<Stopped>>>,
    deadline: std::time::Instant,
    started: std::time::Instant,
    cancel: CancelSignal,
    grace: Duration,
    stdout: GuestOutput,
    stderr: GuestOutput,
    log: Arc<JobLog>,
    timing: Arc<dyn JobHooks>,
}

/// How a call into the guest ended, beside what it returned.
struct Ended {
    stopped: Option<Stopped>,
    cancelled: Option<CancelReason>,
    memory_refused: bool,
}

impl Runtime {
    /// Runs `job` with `input` in a fresh instance of `plugin` and says how it ended.
    ///
    /// The job is stopped when it runs past `job.timeout_ms`, and `cancel_grace` after
    /// `cancel` fires if the guest has not returned by then. Never panics on anything the
    /// guest does. A batch plugin's component is called with a batch of this one job.
    pub async fn run(
        &self,
        plugin: &Plugin,
        job: &JobInfo,
        input: &[u8],
        hooks: Arc<dyn JobHooks>,
        cancel: CancelSignal,
    ) -> Outcome {
        let pre = match &plugin.entry {
            Entry::Job(pre) => pre,
            Entry::Batch(_) => {
                let one = BatchEntry {
                    job,
                    input,
                    cancel: cancel.clone(),
                };
                let mut outcomes = self.run_batch(plugin, &[one], hooks, cancel).await;
                return outcomes.pop().unwrap_or_else(|| {
                    Outcome::Failed(JobFailure::new(
                        ErrorClass::GuestError,
                        "the batch handler returned no result",
                    ))
                });
            }
        };
        let timeout_ms = job_timeout(plugin, job);
        let (mut store, watch) = match self.prepare(
            plugin,
            timeout_ms,
            job.trace.clone(),
            hooks,
            cancel,
            Vec::new(),
        ) {
            Ok(prepared) => prepared,
            Err(outcome) => return outcome,
        };
        let wit_job = wit_job_info(job, timeout_ms);
        let result = watch
            .call(async {
                let instance = pre.instantiate_async(&mut store).await?;
                watch.instantiated();
                instance
                    .wasmgear_job_handler()
                    .call_run(&mut store, &wit_job, input)
                    .await
            })
            .await;
        let ended = watch.settle(&store);
        let limits = &plugin.limits;
        let outcome = classify(
            result,
            ended.stopped,
            ended.cancelled,
            ended.memory_refused,
            limits,
            timeout_ms,
        );
        log_failure(&watch.log, &outcome);
        outcome
    }

    /// Runs `jobs` (of one batch plugin) in one fresh instance of `plugin`, with one call
    /// of its `batch-handler`, and says how each ended, in order.
    ///
    /// The limits hold for the call: it is stopped when it runs past the shortest timeout
    /// of its jobs, or `cancel_grace` after `cancel` fires (the whole batch is to stop),
    /// and its memory is capped as one job's. A trap, a timeout or a result list of the
    /// wrong length ends every job of the batch alike; otherwise each job ends with its own
    /// result (a job whose own signal fired and that returned an error ends cancelled).
    pub async fn run_batch(
        &self,
        plugin: &Plugin,
        jobs: &[BatchEntry<'_>],
        hooks: Arc<dyn JobHooks>,
        cancel: CancelSignal,
    ) -> Vec<Outcome> {
        let same = |outcome: Outcome| vec![outcome; jobs.len()];
        let Entry::Batch(pre) = &plugin.entry else {
            return same(Outcome::Failed(JobFailure::new(
                ErrorClass::PluginInvalid,
                "the plugin exports wasmgear:job/handler, one job per call, not a batch handler",
            )));
        };
        let Some(first) = jobs.first() else {
            return Vec::new();
        };
        let timeout_ms = jobs
            .iter()
            .map(|entry| job_timeout(plugin, entry.job))
            .min()
            .unwrap_or_default();
        let signals = jobs.iter().map(|entry| entry.cancel.clone()).collect();
        let (mut store, watch) = match self.prepare(
            plugin,
            timeout_ms,
            first.job.trace.clone(),
            hooks,
            cancel,
            signals,
        ) {
            Ok(prepared) => prepared,
            Err(outcome) => return same(outcome),
        };
        let wit_jobs: Vec<_> = jobs
            .iter()
            .map(|entry| crate::bindings::batch::WitBatchJob {
                job: wit_job_info(entry.job, job_timeout(plugin, entry.job)),
                input: entry.input.to_vec(),
            })
            .collect();
        let result = watch
            .call(async {
                let instance = pre.instantiate_async(&mut store).await?;
                watch.instantiated();
                instance
                    .wasmgear_job_batch_handler()
                    .call_run_batch(&mut store, &wit_jobs)
                    .await
            })
            .await;
        let ended = watch.settle(&store);
        let limits = &plugin.limits;
        let outcomes = match result {
            Ok(results) if results.len() != jobs.len() => same(Outcome::Failed(JobFailure::new(
                ErrorClass::GuestError,
                format!(
                    "the batch handler returned {} results for {} jobs (one per job, in order)",
                    results.len(),
                    jobs.len()
                ),
            ))),
            Ok(results) => results
                .into_iter()
                .zip(jobs)
                .map(|(result, entry)| {
                    let cancelled = entry.cancel.fired().map(|(reason, _)| reason);
                    classify(
                        Ok(result),
                        None,
                        cancelled,
                        ended.memory_refused,
                        limits,
                        timeout_ms,
                    )
                })
                .collect(),
            Err(error) => same(classify(
                Err(error),
                ended.stopped,
                ended.cancelled,
                ended.memory_refused,
                limits,
                timeout_ms,
            )),
        };
        if let Some(outcome) = outcomes.iter().find(
            |o| matches!(o, Outcome::Failed(failure) if failure.class != ErrorClass::GuestError),
        ) {
            log_failure(&watch.log, outcome);
        }
        outcomes
    }

    /// A fresh store for one call of `plugin`'s guest, with its WASI context (deny by
    /// default, the manifest's grants), limits, deadline and cancellation; `batch`: the
    /// signals of a batch's jobs. A grant that cannot be honoured is the outcome.
    fn prepare(
        &self,
        plugin: &Plugin,
        timeout_ms: u64,
        trace: Option<wasmgear_proto::TraceContext>,
        hooks: Arc<dyn JobHooks>,
        cancel: CancelSignal,
        batch: Vec<CancelSignal>,
    ) -> Result<(Store<StoreData>, Watch), Outcome> {
        let limits = &plugin.limits;
        // Tokio's clock throughout: the timers below sleep on it (and tests can pause it).
        let started = tokio::time::Instant::now().into_std();
        let deadline = started + Duration::from_millis(timeout_ms);
        let timing = hooks.clone();
        let children = hooks.children();
        let dependencies = hooks.dependencies();
        let checkpoint = CheckpointState {
            queue: hooks.checkpoints(),
            max_bytes: limits.checkpoint_bytes,
            saved: None,
        };
        let log = JobLog::new(hooks, limits.log_lines);
        let stdout = GuestOutput::new(log.clone(), "stdout", LogLevel::Info);
        let stderr = GuestOutput::new(log.clone(), "stderr", LogLevel::Warn);
        // Deny by default: no environment, no arguments, no files, no network, stdin
        // closed; stdout and stderr go to the job's log. The manifest grants the rest.
        let mut wasi = WasiCtx::builder();
        wasi.allow_tcp(false)
            .allow_udp(false)
            .stdout(stdout.clone())
            .stderr(stderr.clone());
        for (key, value) in &plugin.capabilities.env {
            wasi.env(key, value);
        }
        for (host, guest) in &plugin.capabilities.dirs {
            if let Err(error) = wasi.preopened_dir(host, guest, FsPerms::ReadOnly) {
                return Err(Outcome::Failed(JobFailure::new(
                    ErrorClass::PluginInvalid,
                    format!("cannot open the granted directory {host:?}: {error:#}"),
                )));
            }
        }
        let state = StoreData {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                memory_bytes: limits.memory_bytes,
                refused: false,
                total: 0,
                peak: 0,
            },
            log: log.clone(),
            cancel: cancel.clone(),
            config: plugin.config.clone(),
            http: WasiHttpCtx::new(),
            http_gate: HttpGate::new(plugin.http_allow.clone(), Some(log.clone()))
                .with_trace(trace),
            children,
            child_calls: 0,
            unkeyed_children: std::collections::HashMap::new(),
            child_grants: plugin.child_grants.clone(),
            max_children: plugin.capabilities.max_children,
            dependencies,
            checkpoint,
            batch,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        if self.fuel
            && let Err(error) = store.set_fuel(plugin.fuel.unwrap_or(u64::MAX))
        {
            return Err(Outcome::Failed(JobFailure::new(
                ErrorClass::PluginInvalid,
                format!("{error:#}"),
            )));
        }

        let stopped = Arc::new(std::sync::Mutex::new(None::<Stopped>));
        let stopped_by_callback = stopped.clone();
        let grace = limits.cancel_grace;
        let cancel_for_callback = cancel.clone();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            let now = tokio::time::Instant::now().into_std();
            let reason = if now >= deadline {
                Some(Stopped::Deadline)
            } else {
                cancel_for_callback
                    .stop_at(grace)
                    .filter(|at| now >= *at)
                    .map(|_| Stopped::Cancelled)
            };
            match reason {
                Some(reason) => {
                    *stopped_by_callback.locked() = Some(reason);
                    Ok(UpdateDeadline::Interrupt)
                }
                // Yield at every tick so that many jobs share the worker's threads fairly.
                None => Ok(UpdateDeadline::Yield(1)),
            }
        });
        let watch = Watch {
            stopped,
            deadline,
            started,
            cancel,
            grace,
            stdout,
            stderr,
            log,
            timing,
        };
        Ok((store, watch))
    }
}

impl Watch {
    /// The instance is ready: tells the hooks how long it took.
    fn instantiated(&self) {
        self.timing.instantiated(self.started.elapsed());
    }

    /// Runs `call` (an instance's creation and its guest's call) to its end, or until the
    /// deadline or the hard stop a grace after the cancel fires.
    ///
    /// The epoch callback stops code that spins in wasm; a guest waiting inside a host call
    /// (a sleep, a pollable, an HTTP request) never reaches an epoch check, so the call
    /// itself is raced against the deadline and the cancellation's hard stop, and dropped
    /// when one of them comes first.
    async fn call<T>(
        &self,
        call: impl std::future::Future<Output = wasmtime::Result<T>>,
    ) -> wasmtime::Result<T> {
        let hard_stop = async {
            self.cancel.fired_wait().await;
            if let Some(at) = self.cancel.stop_at(self.grace) {
                tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
            }
        };
        // Most jobs finish at the first poll (a guest that never waits in a host call and
        // runs shorter than an epoch tick): those need no timer, which would be registered
        // with tokio's timer wheel and taken out again for each job.
        let mut call = std::pin::pin!(call);
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await;
        match first {
            std::task::Poll::Ready(result) => result,
            std::task::Poll::Pending => tokio::select! {
                result = call => result,
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(self.deadline)) => {
                    Err(stop_waiting(&self.stopped, Stopped::Deadline))
                }
                () = hard_stop => Err(stop_waiting(&self.stopped, Stopped::Cancelled)),
            },
        }
    }

    /// Reads how the call in `store` ended (and flushes the guest's last partial output
    /// lines).
    fn settle(&self, store: &Store<StoreData>) -> Ended {
        self.stdout.flush_partial();
        self.stderr.flush_partial();
        let data = store.data();
        self.timing.memory(data.limiter.peak);
        Ended {
            stopped: *self.stopped.locked(),
            cancelled: data.cancel.fired().map(|(reason, _)| reason),
            memory_refused: data.limiter.refused,
        }
    }
}

/// The timeout `job` runs with under `plugin` (its own, within the manifest's cap).
fn job_timeout(plugin: &Plugin, job: &JobInfo) -> u64 {
    match plugin.max_timeout {
        Some(max) => job.timeout_ms.min(max.as_millis() as u64),
        None => job.timeout_ms,
    }
}

/// What the guest is told of `job`.
fn wit_job_info(job: &JobInfo, timeout_ms: u64) -> WitJobInfo {
    WitJobInfo {
        id: job.id.to_string(),
        function: job.id.function.to_string(),
        attempt: job.attempt,
        max_attempts: job.max_attempts,
        enqueued_at_ms: job.enqueued_at_ms,
        timeout_ms,
    }
}

/// Writes a failure the host found (not the guest's own error) to the job's log.
fn log_failure(log: &JobLog, outcome: &Outcome) {
    if let Outcome::Failed(failure) = outcome
        && failure.class != ErrorClass::GuestError
    {
        log.write(
            LogLevel::Error,
            format!("[{}] {}", failure.class, failure.message),
        );
    }
}

/// The most bytes of an error message kept (a guest's `fail`/`retry` message, or a trap's
/// reason and wasm frames); the rest is cut with a marker.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 16 * 1024;

/// A trap in words for the job's record: the reason, then the guest's wasm frames. The
/// host's own Rust backtrace (which wasmtime's `Debug` adds) goes to the debug log only.
fn describe_trap(error: &wasmtime::Error) -> String {
    let frames = error.downcast_ref::<WasmBacktrace>().map(|f| f.to_string());
    let mut reasons: Vec<String> = error
        .chain()
        .map(|cause| cause.to_string())
        .filter(|text| Some(text) != frames.as_ref())
        .collect();
    reasons.dedup();
    let mut text = reasons.join(": ");
    if let Some(function) = deep_recursion(error) {
        text.push_str(&format!(
            " (most likely the guest's stack overflowed: {function} calls itself over and over)"
        ));
    }
    if let Some(frames) = frames {
        text.push('\n');
        text.push_str(&frames);
    }
    truncate(text, MAX_ERROR_MESSAGE_BYTES)
}

/// The function that recursed without end, when a trap looks like the overflow of a guest
/// stack kept in linear memory (as Rust and C guests keep theirs): an out-of-bounds access
/// whose innermost frames are all one function. (Overflowing wasm's own stack is reported
/// as "call stack exhausted" already.)
fn deep_recursion(error: &wasmtime::Error) -> Option<String> {
    /// How many frames in a row must be the same function.
    const DEEP: usize = 28;
    if error.downcast_ref::<Trap>() != Some(&Trap::MemoryOutOfBounds) {
        return None;
    }
    let frames = error.downcast_ref::<WasmBacktrace>()?.frames();
    let same = |a: &wasmtime::FrameInfo, b: &wasmtime::FrameInfo| {
        a.func_index() == b.func_index() && a.func_name() == b.func_name()
    };
    // The trap may hit in a callee (a memset, say) a few frames inside the recursion.
    (0..=4).find_map(|start| {
        let run = frames.get(start..start + DEEP)?;
        run.iter().all(|f| same(f, &run[0])).then(|| {
            run[0]
                .func_name()
                .map(|name| format!("{:#}", rustc_demangle::demangle(name)))
                .unwrap_or_else(|| format!("function #{}", run[0].func_index()))
        })
    })
}

/// Notes why a guest blocked in a host call was stopped, and gives the interrupt trap the
/// epoch callback would have raised, so both ways of stopping are reported alike.
fn stop_waiting(stopped: &std::sync::Mutex<Option<Stopped>>, why: Stopped) -> wasmtime::Error {
    let mut stopped = stopped.locked();
    if stopped.is_none() {
        *stopped = Some(why);
    }
    wasmtime::Error::from(Trap::Interrupt)
}

/// Turns what the call returned into an outcome with an error class.
fn classify(
    result: wasmtime::Result<Result<Vec<u8>, JobError>>,
    stopped: Option<Stopped>,
    cancelled: Option<CancelReason>,
    memory_refused: bool,
    limits: &Limits,
    timeout_ms: u64,
) -> Outcome {
    let cancelled_class = |reason: CancelReason| match reason {
        CancelReason::LeaseLost => ErrorClass::LeaseLost,
        CancelReason::Requested | CancelReason::Shutdown => ErrorClass::Cancelled,
    };
    match result {
        Ok(Ok(output)) if output.len() > limits.output_bytes => Outcome::Failed(JobFailure::new(
            ErrorClass::OutputTooLarge,
            format!(
                "the output of {} bytes is larger than the limit of {} bytes",
                output.len(),
                limits.output_bytes
            ),
        )),
        Ok(Ok(output)) => Outcome::Succeeded(output),
        Ok(Err(error)) => {
            let (message, retryable) = match error {
                JobError::Retry(message) => (message, true),
                JobError::Fail(message) => (message, false),
            };
            let message = truncate(message, MAX_ERROR_MESSAGE_BYTES);
            if let Some(reason) = cancelled {
                return Outcome::Failed(JobFailure::new(cancelled_class(reason), message));
            }
            if memory_refused {
                // The guest handled the refused allocation itself; the cause is the limit.
                return Outcome::Failed(JobFailure::new(
                    ErrorClass::MemoryLimit,
                    format!(
                        "{message} (the job reached its memory limit of {} bytes)",
                        limits.memory_bytes
                    ),
                ));
            }
            Outcome::Failed(JobFailure {
                class: ErrorClass::GuestError,
                message: truncate(message, MAX_ERROR_MESSAGE_BYTES),
                retryable,
            })
        }
        Err(error) => {
            if matches!(error.downcast_ref::<Trap>(), Some(Trap::OutOfFuel)) {
                return Outcome::Failed(JobFailure::new(
                    ErrorClass::OutOfFuel,
                    "the job used up its fuel (its manifest's limits.fuel)",
                ));
            }
            let interrupted = matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt));
            let failure = match (interrupted, stopped) {
                (true, Some(Stopped::Deadline)) => JobFailure::new(
                    ErrorClass::TimedOut,
                    format!("the job ran longer than its timeout of {timeout_ms} ms"),
                ),
                (true, _) => JobFailure::new(
                    cancelled
                        .map(cancelled_class)
                        .unwrap_or(ErrorClass::Cancelled),
                    format!(
                        "the job was cancelled and did not stop within {} ms",
                        limits.cancel_grace.as_millis()
                    ),
                ),
                _ if memory_refused => JobFailure::new(
                    ErrorClass::MemoryLimit,
                    format!(
                        "the job needed more than its memory limit of {} bytes: {}",
                        limits.memory_bytes,
                        describe_trap(&error)
                    ),
                ),
                _ => {
                    tracing::debug!(error = ?error, "the job trapped");
                    JobFailure::new(ErrorClass::Trap, describe_trap(&error))
                }
            };
            Outcome::Failed(failure)
        }
    }
}
