//! Gearman (`../shared/seeds/gearman-design-notes.txt` in the repository's lineage): a
//! wasmgear worker as a Gearman worker of gearmand, over Gearman's binary protocol (written
//! here from the protocol's documentation).
//!
//! The worker opens one connection per gearmand server, names itself with `SET_CLIENT_ID`
//! (its wasmgear id, as `gearadmin --workers` shows it) and sends `CAN_DO` for each function
//! a plugin serves (`CANT_DO` when the plugin goes). It asks for jobs with `GRAB_JOB_ALL`
//! and accepts `JOB_ASSIGN`, `JOB_ASSIGN_UNIQ` and `JOB_ASSIGN_ALL`; when there is none it
//! sends `PRE_SLEEP` and wakes on `NOOP`. A job's argument is the plugin's input; progress
//! goes out as `WORK_STATUS`, the output as `WORK_COMPLETE`, a failure as `WORK_WARNING`
//! (the message) then `WORK_FAIL` (not `WORK_EXCEPTION`: gearmand 1.1.20 ends the job on it
//! and tells only clients that asked for exceptions, so the others would wait for ever). A
//! connection that drops is opened again with backoff, and the worker registers afresh.
//!
//! Gearman has no lease: gearmand gives a job whose worker's connection closed to another
//! worker (a background job, and a foreground job whose client still waits), so a job this
//! worker was running when its connection dropped, or when it died, runs again elsewhere;
//! what this worker would report for it afterwards is dropped. No retries either: a failure
//! is reported at once, as Gearman workers do.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{Notify, broadcast, mpsc};
use tokio_util::task::AbortOnDropHandle;
use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, JobId, JobInfo, JobState,
    Lease, LeaseRequest, LeaseStatus, Progress, WorkerAd,
};
use wasmgear_source::{JobSource, SourceError};

use crate::{ConnectError, settled};
use wasmgear_proto::sync::Locked;

pub mod codec;

pub use codec::{Command, DEFAULT_PORT, Packet, read_packet, request, with_port};

/// How long gearmand may take to answer a grab before the connection is taken for dead.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// The waits between attempts to open a dropped connection again.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// A live connection to one gearmand.
struct Live {
    generation: u64,
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    /// Replies to grabs, in order; one grab at a time holds it.
    replies: Arc<tokio::sync::Mutex<mpsc::Receiver<Packet>>>,
}

/// One gearmand server.
struct Server {
    address: String,
    live: Mutex<Option<Live>>,
    generations: AtomicU64,
}

impl Server {
    fn live(&self) -> Option<(u64, Arc<tokio::sync::Mutex<OwnedWriteHalf>>)> {
        let live = self.live.locked();
        live.as_ref().map(|l| (l.generation, l.writer.clone()))
    }

    /// Sends `packet` on connection `generation` (the current one when `None`); false when
    /// that connection is gone.
    async fn send(&self, generation: Option<u64>, packet: &[u8]) -> bool {
        let Some((current, writer)) = self.live() else {
            return false;
        };
        if generation.is_some_and(|g| g != current) {
            return false;
        }
        let mut writer = writer.lock().await;
        match writer.write_all(packet).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(server = self.address, %error, "could not write to gearmand");
                false
            }
        }
    }
}

/// A job held here: the server and connection it came on, and its handle.
struct Held {
    server: usize,
    generation: u64,
    handle: Vec<u8>,
}

/// What the source and its connections share.
struct Inner {
    servers: Vec<Server>,
    worker_id: String,
    functions: Mutex<Vec<FunctionName>>,
    seq: AtomicU64,
    held: Mutex<HashMap<String, Held>>,
    /// Jobs gearmand assigned beyond what a function could take at the time.
    pending: Mutex<VecDeque<Lease>>,
    work: Notify,
    cancels: broadcast::Sender<CancelRequest>,
    /// The worker is stopping: connections that close stay closed.
    stopped: std::sync::atomic::AtomicBool,
}

impl Inner {
    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.locked()
    }

    fn functions(&self) -> Vec<FunctionName> {
        self.functions.locked().clone()
    }

    /// Opens a connection to server `index` and registers: the client id, then `CAN_DO`
    /// for each function served.
    async fn open(self: &Arc<Self>, index: usize) -> Result<(), std::io::Error> {
        let server = &self.servers[index];
        let stream = TcpStream::connect(&server.address).await?;
        stream.set_nodelay(true)?;
        let (reader, mut writer) = stream.into_split();
        let mut hello = request(Command::SetClientId, &[self.worker_id.as_bytes()]);
        for function in self.functions() {
            hello.extend(request(Command::CanDo, &[function.as_str().as_bytes()]));
        }
        writer.write_all(&hello).await?;
        let generation = server.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let (replies_tx, replies_rx) = mpsc::channel(16);
        *server.live.locked() = Some(Live {
            generation,
            writer: Arc::new(tokio::sync::Mutex::new(writer)),
            replies: Arc::new(tokio::sync::Mutex::new(replies_rx)),
        });
        tokio::spawn(self.clone().read(index, generation, reader, replies_tx));
        // Jobs may have waited while the connection was down.
        self.work.notify_one();
        Ok(())
    }

    /// Reads gearmand's packets on one connection until it ends: `NOOP` wakes the worker,
    /// replies to grabs go to the grab waiting for them. Then the connection is opened
    /// again.
    async fn read(
        self: Arc<Self>,
        index: usize,
        generation: u64,
        reader: OwnedReadHalf,
        replies: mpsc::Sender<Packet>,
    ) {
        let server = &self.servers[index];
        let mut reader = BufReader::new(reader);
        let ended = loop {
            match read_packet(&mut reader).await {
                Ok(packet) if packet.kind == Command::Noop as u32 => self.work.notify_one(),
                Ok(packet) if packet.kind == Command::EchoRes as u32 => {}
                // An error answers a work report (grabs are not answered with errors).
                Ok(packet) if packet.kind == Command::Error as u32 => {
                    let text = String::from_utf8_lossy(&packet.body).replace('\0', ": ");
                    tracing::warn!(
                        server = server.address,
                        error = text,
                        "gearmand refused a report"
                    );
                }
                Ok(packet) => {
                    if replies.send(packet).await.is_err() {
                        break "the connection was replaced".to_string();
                    }
                }
                Err(error) => break error.to_string(),
            }
        };
        {
            let mut live = server.live.locked();
            if live.as_ref().is_some_and(|l| l.generation == generation) {
                *live = None;
            }
        }
        if self.stopped.load(Ordering::Relaxed) {
            return;
        }
        tracing::warn!(
            server = server.address,
            reason = ended,
            "lost the connection to gearmand; opening it again"
        );
        self.reconnect(index).await;
    }

    /// Opens server `index` again, waiting longer between attempts (doubling, with jitter, up
    /// to 5 s). (Boxed: it
    /// opens connections whose readers call it again.)
    fn reconnect(
        self: &Arc<Self>,
        index: usize,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>> {
        let inner = self.clone();
        Box::pin(async move {
            let mut waits = backon::BackoffBuilder::build(
                backon::ExponentialBuilder::default()
                    .with_min_delay(RECONNECT_MIN)
                    .with_max_delay(RECONNECT_MAX)
                    .with_jitter()
                    .without_max_times(),
            );
            loop {
                tokio::time::sleep(waits.next().unwrap_or(RECONNECT_MAX)).await;
                if inner.stopped.load(Ordering::Relaxed) {
                    return;
                }
                let address = &inner.servers[index].address;
                match inner.open(index).await {
                    Ok(()) => {
                        tracing::info!(server = address, "connected to gearmand again");
                        return;
                    }
                    Err(error) => {
                        tracing::debug!(server = address, %error, "gearmand is still unreachable");
                    }
                }
            }
        })
    }

    /// One `GRAB_JOB_ALL` on server `index`: the job assigned, or `None` (no job, or no
    /// connection).
    async fn grab(&self, index: usize) -> Result<Option<Assigned>, SourceError> {
        let server = &self.servers[index];
        let (generation, replies) = {
            let live = server.live.locked();
            match live.as_ref() {
                Some(l) => (l.generation, l.replies.clone()),
                None => return Ok(None),
            }
        };
        let mut replies = replies.lock().await;
        if !server
            .send(Some(generation), &request(Command::GrabJobAll, &[]))
            .await
        {
            return Ok(None);
        }
        let packet = match tokio::time::timeout(REPLY_TIMEOUT, replies.recv()).await {
            Ok(Some(packet)) => packet,
            Ok(None) => return Ok(None),
            Err(_) => {
                return Err(format!(
                    "gearmand at {} did not answer a grab within {REPLY_TIMEOUT:?}",
                    server.address
                )
                .into());
            }
        };
        let fields = match packet.kind {
            k if k == Command::NoJob as u32 => return Ok(None),
            k if k == Command::JobAssign as u32 => packet.args(3).map(|a| (a[0], a[1], a[2])),
            k if k == Command::JobAssignUniq as u32 => packet.args(4).map(|a| (a[0], a[1], a[3])),
            k if k == Command::JobAssignAll as u32 => packet.args(5).map(|a| (a[0], a[1], a[4])),
            k if k == Command::Error as u32 => {
                let text = String::from_utf8_lossy(&packet.body).replace('\0', ": ");
                return Err(
                    format!("gearmand at {} answered an error: {text}", server.address).into(),
                );
            }
            other => {
                return Err(format!(
                    "gearmand at {} answered a grab with packet type {other}",
                    server.address
                )
                .into());
            }
        };
        let Some((handle, function, argument)) = fields else {
            return Err(format!(
                "gearmand at {} sent a job assignment with too few fields",
                server.address
            )
            .into());
        };
        Ok(Some(Assigned {
            server: index,
            generation,
            handle: handle.to_vec(),
            function: String::from_utf8_lossy(function).into_owned(),
            argument: argument.to_vec(),
        }))
    }

    /// Sends `command` for the job held as `token` (its handle first, then `args`), and
    /// forgets the job when `last`; false when the job's connection is gone.
    async fn report(&self, token: &str, command: Command, args: &[&[u8]], last: bool) -> bool {
        let (server, generation, handle) = {
            let mut held = self.held();
            let Some(job) = held.get(token) else {
                return false;
            };
            let found = (job.server, job.generation, job.handle.clone());
            if last {
                held.remove(token);
            }
            found
        };
        let mut all: Vec<&[u8]> = vec![&handle];
        all.extend_from_slice(args);
        self.servers[server]
            .send(Some(generation), &request(command, &all))
            .await
    }

    /// Whether the connection the job held as `token` came on is still open.
    fn still_held(&self, token: &str) -> bool {
        let held = self.held();
        let Some(job) = held.get(token) else {
            return false;
        };
        self.servers[job.server]
            .live()
            .is_some_and(|(generation, _)| generation == job.generation)
    }
}

/// A job gearmand assigned.
struct Assigned {
    server: usize,
    generation: u64,
    handle: Vec<u8>,
    function: String,
    argument: Vec<u8>,
}

/// A worker's connections to gearmand servers.
pub struct Gearman {
    inner: Arc<Inner>,
    _keepalive: AbortOnDropHandle<()>,
}

impl Gearman {
    /// Connects to the gearmand `servers` (`HOST[:PORT]`) as worker `worker_id`; fails when
    /// none can be reached. Servers down now are connected to when they come up.
    pub async fn connect(
        servers: &[String],
        worker_id: impl Into<String>,
    ) -> Result<Self, ConnectError> {
        let inner = Arc::new(Inner {
            servers: servers
                .iter()
                .map(|address| Server {
                    address: with_port(address),
                    live: Mutex::new(None),
                    generations: AtomicU64::new(0),
                })
                .collect(),
            worker_id: worker_id.into(),
            functions: Mutex::new(Vec::new()),
            seq: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
            pending: Mutex::new(VecDeque::new()),
            work: Notify::new(),
            cancels: broadcast::channel(crate::multi::CANCEL_BUFFER).0,
            stopped: std::sync::atomic::AtomicBool::new(false),
        });
        let mut reached = false;
        let mut last_error = String::new();
        for index in 0..inner.servers.len() {
            match inner.open(index).await {
                Ok(()) => reached = true,
                Err(error) => {
                    last_error = format!("{}: {error}", inner.servers[index].address);
                    tokio::spawn(inner.reconnect(index));
                }
            }
        }
        if !reached {
            return Err(ConnectError::Unreachable {
                what: "gearmand".into(),
                error: last_error,
            });
        }
        // Each connection gets an ECHO now and then, so that one cut silently is noticed.
        let keepalive = tokio::spawn({
            let inner = inner.clone();
            async move {
                let mut every = tokio::time::interval(Duration::from_secs(30));
                loop {
                    every.tick().await;
                    for server in &inner.servers {
                        server
                            .send(None, &request(Command::EchoReq, &[b"ping"]))
                            .await;
                    }
                }
            }
        });
        Ok(Gearman {
            inner,
            _keepalive: AbortOnDropHandle::new(keepalive),
        })
    }

    /// Turns a job gearmand assigned into a lease, or reports it failed at once when its
    /// function is no function name (gearmand only assigns functions this worker can do).
    async fn lease_of(
        &self,
        job: Assigned,
        requests: &[LeaseRequest],
        ttl: Duration,
    ) -> Option<Lease> {
        let request = requests
            .iter()
            .find(|r| r.function.as_str() == job.function)
            .cloned()
            .or_else(|| FunctionName::new(&job.function).ok().map(LeaseRequest::new));
        let token = format!(
            "{}:{}:{}",
            job.server,
            job.generation,
            String::from_utf8_lossy(&job.handle)
        );
        self.inner.held().insert(
            token.clone(),
            Held {
                server: job.server,
                generation: job.generation,
                handle: job.handle,
            },
        );
        let Some(request) = request else {
            tracing::warn!(
                function = job.function,
                "gearmand assigned a job of a function with an impossible name; failed"
            );
            self.inner
                .report(&token, Command::WorkFail, &[], true)
                .await;
            return None;
        };
        let job_id = JobId {
            function: request.function.clone(),
            seq: self.inner.seq.fetch_add(1, Ordering::Relaxed) + 1,
        };
        tracing::info!(server = self.inner.servers[job.server].address, handle = %token, job = %job_id, "took a Gearman job");
        Some(Lease {
            info: JobInfo {
                id: job_id,
                attempt: 1,
                max_attempts: 1,
                enqueued_at_ms: wasmgear_proto::units::now_ms(),
                timeout_ms: request.default_timeout_ms,
                trace: None,
            },
            input: job.argument,
            token,
            expires: std::time::Instant::now() + ttl,
            ttl,
        })
    }
}

impl JobSource for Gearman {
    async fn lease(
        &self,
        requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        let mut room: HashMap<&str, usize> = requests
            .iter()
            .map(|r| (r.function.as_str(), r.max))
            .collect();
        let mut leases = Vec::new();
        let mut over = Vec::new();
        // A lease goes out when its function has room; else it waits here.
        let mut take = |lease: Lease, leases: &mut Vec<Lease>, over: &mut Vec<Lease>| match room
            .get_mut(lease.info.id.function.as_str())
        {
            Some(left) if *left > 0 && leases.len() < max => {
                *left -= 1;
                leases.push(lease);
            }
            _ => over.push(lease),
        };
        // Jobs assigned earlier that had no room then.
        let waiting: Vec<Lease> = self.inner.pending.locked().drain(..).collect();
        for mut lease in waiting {
            // Its time starts when it goes out.
            lease.expires = std::time::Instant::now() + lease.ttl;
            take(lease, &mut leases, &mut over);
        }
        for index in 0..self.inner.servers.len() {
            while leases.len() < max && over.len() < max {
                let Some(job) = self.inner.grab(index).await? else {
                    break;
                };
                if let Some(lease) = self.lease_of(job, requests, ttl).await {
                    take(lease, &mut leases, &mut over);
                }
            }
        }
        self.inner.pending.locked().extend(over);
        Ok(leases)
    }

    async fn wait_for_work(&self, timeout: Duration) {
        for server in &self.inner.servers {
            server.send(None, &request(Command::PreSleep, &[])).await;
        }
        let _ = tokio::time::timeout(timeout, self.inner.work.notified()).await;
    }

    async fn heartbeat(&self, lease: &Lease, _ttl: Duration) -> Result<LeaseStatus, SourceError> {
        Ok(match self.inner.still_held(&lease.token) {
            true => LeaseStatus::Held,
            false => LeaseStatus::Lost,
        })
    }

    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        // Gearman has no cancellation.
        self.inner.cancels.subscribe()
    }

    async fn progress(&self, lease: &Lease, progress: &Progress) -> Result<bool, SourceError> {
        let done = progress.done.to_string();
        let total = progress.total.to_string();
        Ok(self
            .inner
            .report(
                &lease.token,
                Command::WorkStatus,
                &[done.as_bytes(), total.as_bytes()],
                false,
            )
            .await)
    }

    async fn complete(
        &self,
        lease: &Lease,
        output: &[u8],
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        Ok(settled(
            self.inner
                .report(&lease.token, Command::WorkComplete, &[output], true)
                .await,
            JobState::Succeeded,
        ))
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        let message = format!("[{}] {}", failure.class, failure.message);
        let token = &lease.token;
        // The message as a warning, then the failure: gearmand (1.1.20) ends a job on
        // WORK_EXCEPTION and tells only the clients that asked for exceptions, leaving the
        // others waiting for ever.
        let sent = self
            .inner
            .report(token, Command::WorkWarning, &[message.as_bytes()], false)
            .await
            && self.inner.report(token, Command::WorkFail, &[], true).await;
        Ok(settled(sent, JobState::Failed))
    }

    fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    /// Sends `CAN_DO` for the functions not served before.
    async fn serve(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        let added: Vec<FunctionName> = {
            let mut served = self.inner.functions.locked();
            let added: Vec<FunctionName> = functions
                .iter()
                .filter(|f| !served.contains(f))
                .cloned()
                .collect();
            served.extend(added.iter().cloned());
            added
        };
        for function in added {
            for server in &self.inner.servers {
                server
                    .send(
                        None,
                        &request(Command::CanDo, &[function.as_str().as_bytes()]),
                    )
                    .await;
            }
        }
        Ok(())
    }

    /// A zero `ttl` (the worker is stopping) closes the connections: gearmand gives the jobs
    /// still assigned here to other workers.
    async fn advertise(
        &self,
        _ad: &WorkerAd,
        _functions: &[FunctionName],
        ttl: Duration,
    ) -> Result<(), SourceError> {
        if ttl.is_zero() {
            self.inner.stopped.store(true, Ordering::Relaxed);
            for server in &self.inner.servers {
                let live = server.live.locked().take();
                if let Some(live) = live {
                    let _ = live.writer.lock().await.shutdown().await;
                }
            }
        }
        Ok(())
    }

    /// Sends `CANT_DO` for functions no plugin serves any more.
    async fn leave(&self, functions: &[FunctionName]) -> Result<(), SourceError> {
        self.inner
            .functions
            .locked()
            .retain(|f| !functions.contains(f));
        for function in functions {
            for server in &self.inner.servers {
                server
                    .send(
                        None,
                        &request(Command::CantDo, &[function.as_str().as_bytes()]),
                    )
                    .await;
            }
        }
        Ok(())
    }

    /// Gearman cannot take a job back; the job stays assigned here until the connection
    /// closes at the end of the shutdown, when gearmand gives it to another worker.
    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        self.inner.held().remove(&lease.token);
        Ok(Completion::Accepted(JobState::Queued))
    }
}
