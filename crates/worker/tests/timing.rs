//! The worker loop's timing, on tokio's paused clock: heartbeats, the pause after a failed
//! lease call, the idle poll, self-fencing and the shutdown grace. The job source is an
//! in-memory fake that records when each call came (a fake is fine here: what is tested is
//! the node's timing, not a queue); the jobs are real components (`hostile sleep N` waits N
//! seconds in one host call, which the paused clock skips through).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, broadcast, oneshot};
use tokio::time::Instant;

use wasmgear_proto::{
    AttemptNotes, CancelRequest, Completion, FunctionName, JobFailure, JobId, JobInfo, JobState,
    Lease, LeaseRequest, LeaseStatus, Progress, WorkerAd,
};
use wasmgear_runtime::{Runtime, RuntimeConfig};
use wasmgear_worker::plugins::PluginRegistry;
use wasmgear_worker::{JobSource, SourceError, WorkerConfig};

/// What the node did to the fake, and when (paused-clock time since the test began).
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Lease,
    Heartbeat(u64),
    Complete(u64),
    /// A completion that asked for up to this many jobs with its result.
    CompleteAndLease(u64, usize),
    /// A completion the fake refused as if the queue were out of reach.
    CompleteRefused(u64),
    Fail(u64, String),
    Release(u64),
}

#[derive(Default)]
struct State {
    ready: VecDeque<(u64, Vec<u8>)>,
    calls: Vec<(Duration, Call)>,
    /// Lease calls that fail before one succeeds.
    failing_leases: usize,
    /// Whether heartbeats fail (the queue cut off).
    heartbeats_fail: bool,
    /// Completions that fail before one succeeds.
    failing_completions: usize,
    /// Whether completions hand out jobs with their results.
    lease_with_results: bool,
    /// How much of each lease has gone by when the node gets it (a handed lease counts from
    /// its registering call).
    lease_age: Duration,
}

struct Fake {
    start: Instant,
    state: Mutex<State>,
    work: Notify,
    /// Woken on every recorded call, for the test waiting on them.
    called: Notify,
    cancels: broadcast::Sender<CancelRequest>,
}

impl Fake {
    fn new() -> Arc<Self> {
        Arc::new(Fake {
            start: Instant::now(),
            state: Mutex::default(),
            work: Notify::new(),
            called: Notify::new(),
            cancels: broadcast::channel(16).0,
        })
    }

    fn record(&self, call: Call) {
        let at = self.start.elapsed();
        self.state.lock().unwrap().calls.push((at, call));
        self.called.notify_waiters();
    }

    fn push(&self, seq: u64, input: &str) {
        self.state
            .lock()
            .unwrap()
            .ready
            .push_back((seq, input.as_bytes().to_vec()));
        self.work.notify_one();
    }

    fn calls(&self) -> Vec<(Duration, Call)> {
        self.state.lock().unwrap().calls.clone()
    }

    fn times_of(&self, wanted: impl Fn(&Call) -> bool) -> Vec<Duration> {
        self.calls()
            .into_iter()
            .filter(|(_, call)| wanted(call))
            .map(|(at, _)| at)
            .collect()
    }
}

fn function() -> FunctionName {
    FunctionName::new("hostile").unwrap()
}

/// Leases up to `max` of the fake's ready jobs for `ttl`.
fn take(state: &mut State, max: usize, ttl: Duration) -> Vec<Lease> {
    let mut leases = Vec::new();
    while leases.len() < max {
        let Some((seq, input)) = state.ready.pop_front() else {
            break;
        };
        leases.push(Lease {
            info: JobInfo {
                id: JobId {
                    function: function(),
                    seq,
                },
                attempt: 1,
                max_attempts: 1,
                enqueued_at_ms: 0,
                timeout_ms: 3_600_000,
                trace: None,
            },
            input,
            token: format!("token-{seq}"),
            expires: (Instant::now() + ttl - state.lease_age.min(ttl)).into_std(),
            ttl,
        });
    }
    leases
}

/// The fake is shared with the test through an `Arc`.
struct Shared(Arc<Fake>);

impl JobSource for Shared {
    async fn lease(
        &self,
        _requests: &[LeaseRequest],
        max: usize,
        ttl: Duration,
    ) -> Result<Vec<Lease>, SourceError> {
        self.0.record(Call::Lease);
        let mut state = self.0.state.lock().unwrap();
        if state.failing_leases > 0 {
            state.failing_leases -= 1;
            return Err("the fake queue is down".into());
        }
        Ok(take(&mut state, max, ttl))
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.0.work.notified()).await;
    }

    async fn heartbeat(&self, lease: &Lease, _ttl: Duration) -> Result<LeaseStatus, SourceError> {
        self.0.record(Call::Heartbeat(lease.info.id.seq));
        if self.0.state.lock().unwrap().heartbeats_fail {
            return Err("the fake queue is cut off".into());
        }
        Ok(LeaseStatus::Held)
    }

    fn cancel_requests(&self) -> broadcast::Receiver<CancelRequest> {
        self.0.cancels.subscribe()
    }

    async fn progress(&self, _lease: &Lease, _progress: &Progress) -> Result<bool, SourceError> {
        Ok(true)
    }

    async fn complete(
        &self,
        lease: &Lease,
        _output: &[u8],
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        let refuse = {
            let mut state = self.0.state.lock().unwrap();
            let refuse = state.failing_completions > 0;
            state.failing_completions = state.failing_completions.saturating_sub(1);
            refuse
        };
        if refuse {
            self.0.record(Call::CompleteRefused(lease.info.id.seq));
            return Err("the queue is out of reach".into());
        }
        self.0.record(Call::Complete(lease.info.id.seq));
        Ok(Completion::Accepted(JobState::Succeeded))
    }

    async fn complete_and_lease(
        &self,
        lease: &Lease,
        output: &[u8],
        notes: &AttemptNotes,
        next: &LeaseRequest,
        ttl: Duration,
    ) -> Result<(Completion, Vec<Lease>), SourceError> {
        if !self.0.state.lock().unwrap().lease_with_results {
            return Ok((self.complete(lease, output, notes).await?, Vec::new()));
        }
        self.0
            .record(Call::CompleteAndLease(lease.info.id.seq, next.max));
        let leases = take(&mut self.0.state.lock().unwrap(), next.max, ttl);
        Ok((Completion::Accepted(JobState::Succeeded), leases))
    }

    async fn fail(
        &self,
        lease: &Lease,
        failure: &JobFailure,
        _notes: &AttemptNotes,
    ) -> Result<Completion, SourceError> {
        self.0.record(Call::Fail(
            lease.info.id.seq,
            format!("{:?}", failure.class),
        ));
        Ok(Completion::Accepted(JobState::Failed))
    }

    fn worker_id(&self) -> &str {
        "fake"
    }

    async fn serve(&self, _functions: &[FunctionName]) -> Result<(), SourceError> {
        Ok(())
    }

    async fn advertise(
        &self,
        _ad: &WorkerAd,
        _functions: &[FunctionName],
        _ttl: Duration,
    ) -> Result<(), SourceError> {
        Ok(())
    }

    async fn leave(&self, _functions: &[FunctionName]) -> Result<(), SourceError> {
        Ok(())
    }

    async fn release(&self, lease: &Lease) -> Result<Completion, SourceError> {
        self.0.record(Call::Release(lease.info.id.seq));
        Ok(Completion::Accepted(JobState::Queued))
    }

    async fn maintain(&self, _functions: &[FunctionName]) -> Result<(), SourceError> {
        Ok(())
    }
}

/// A node on the fake with the `hostile` plugin; returns the fake, a shutdown trigger and
/// the node's task.
fn start(
    config: WorkerConfig,
    setup: impl FnOnce(&Fake),
) -> (
    Arc<Fake>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        wasmgear_test_artifacts::HOSTILE,
        dir.path().join("hostile.wasm"),
    )
    .unwrap();
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            max_instances: 4,
            ..RuntimeConfig::default()
        })
        .unwrap(),
    );
    let (registry, problems) = PluginRegistry::load_dir(&runtime, dir.path()).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    let fake = Fake::new();
    setup(&fake);
    let (stop, stopped) = oneshot::channel::<()>();
    let node = tokio::spawn(wasmgear_worker::run(
        Shared(fake.clone()),
        runtime,
        Arc::new(registry),
        config,
        async {
            let _ = stopped.await;
        },
    ));
    (fake, stop, node, dir)
}

/// Waits until the calls recorded satisfy `check`, re-checking on every new call; fails
/// after an hour of the paused clock (instant in real time).
async fn until(what: &str, fake: &Fake, check: impl Fn(&[(Duration, Call)]) -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(3600), async {
        loop {
            let called = fake.called.notified();
            tokio::pin!(called);
            called.as_mut().enable();
            if check(&fake.calls()) {
                return;
            }
            called.await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "never saw {what}; calls: {:?}",
        fake.calls()
    );
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A job running 65 s with a 30 s lease is renewed a second after it starts (which confirms
/// its lease), then every 10 s: 7 heartbeats, then done.
#[tokio::test(start_paused = true)]
async fn heartbeats_come_every_third_of_the_lease() {
    let config = WorkerConfig {
        lease_ttl: Duration::from_secs(30),
        ..WorkerConfig::default()
    };
    let (fake, stop, node, _dir) = start(config, |fake| fake.push(1, "sleep 65"));
    until("the job completed", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Complete(1))
    })
    .await;
    let started = fake.times_of(|c| *c == Call::Lease)[0];
    let beats = fake.times_of(|c| *c == Call::Heartbeat(1));
    assert_eq!(beats.len(), 7, "{beats:?}");
    for (i, beat) in beats.iter().enumerate() {
        let expected = 1.0 + 10.0 * i as f64;
        let actual = secs(*beat - started);
        assert!((actual - expected).abs() < 0.1, "beat {i} at {actual} s");
    }
    let done = fake.times_of(|c| *c == Call::Complete(1))[0];
    assert!(
        (secs(done - started) - 65.0).abs() < 0.1,
        "done at {done:?}"
    );
    stop.send(()).unwrap();
    node.await.unwrap();
}

/// A failed lease call is tried again a second later, each time, and the job then runs.
#[tokio::test(start_paused = true)]
async fn a_failed_lease_is_tried_again_a_second_later() {
    let (fake, stop, node, _dir) = start(WorkerConfig::default(), |fake| {
        fake.state.lock().unwrap().failing_leases = 3;
        fake.push(1, "sleep 0");
    });
    until("the job completed", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Complete(1))
    })
    .await;
    let leases = fake.times_of(|c| *c == Call::Lease);
    assert!(leases.len() >= 4, "{leases:?}");
    for pair in leases[..4].windows(2) {
        let gap = secs(pair[1] - pair[0]);
        assert!(
            (gap - 1.0).abs() < 0.05,
            "lease retried after {gap} s: {leases:?}"
        );
    }
    stop.send(()).unwrap();
    node.await.unwrap();
}

/// A result the queue does not take is sent again after a wait that doubles with jitter
/// (0.4 s, then 0.8 s, each up to twice as long), five tries in all; then the worker gives
/// up on it (the lease will expire) and goes on with the next job.
#[tokio::test(start_paused = true)]
async fn a_result_is_sent_again_with_backoff_then_given_up() {
    let (fake, stop, node, _dir) = start(WorkerConfig::default(), |fake| {
        fake.state.lock().unwrap().failing_completions = 2;
        fake.push(1, "sleep 0");
    });
    until("job 1 completed", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Complete(1))
    })
    .await;
    let tries = fake.times_of(|c| matches!(c, Call::Complete(1) | Call::CompleteRefused(1)));
    assert_eq!(tries.len(), 3, "{tries:?}");
    let gaps: Vec<f64> = tries.windows(2).map(|p| secs(p[1] - p[0])).collect();
    assert!((0.4..0.8).contains(&gaps[0]), "{gaps:?}");
    assert!((0.8..1.6).contains(&gaps[1]), "{gaps:?}");

    fake.state.lock().unwrap().failing_completions = usize::MAX;
    fake.push(2, "sleep 0");
    until("job 2 given up", &fake, |calls| {
        calls
            .iter()
            .filter(|(_, c)| *c == Call::CompleteRefused(2))
            .count()
            == 5
    })
    .await;
    fake.state.lock().unwrap().failing_completions = 0;
    fake.push(3, "sleep 0");
    until("job 3 completed", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Complete(3))
    })
    .await;
    let refused = fake.times_of(|c| *c == Call::CompleteRefused(2));
    assert_eq!(refused.len(), 5, "no sixth try: {refused:?}");
    stop.send(()).unwrap();
    node.await.unwrap();
}

/// An idle worker asks again every `idle_poll` (the safety net for missed wake-ups) and no
/// more often; a wake-up brings the job in at once.
#[tokio::test(start_paused = true)]
async fn an_idle_worker_polls_at_its_interval_and_wakes_at_once() {
    let config = WorkerConfig {
        idle_poll: Duration::from_secs(5),
        ..WorkerConfig::default()
    };
    let (fake, stop, node, _dir) = start(config, |_| {});
    until("four lease calls", &fake, |calls| calls.len() >= 4).await;
    let leases = fake.times_of(|c| *c == Call::Lease);
    for pair in leases[..4].windows(2) {
        let gap = secs(pair[1] - pair[0]);
        assert!((gap - 5.0).abs() < 0.05, "polled after {gap} s: {leases:?}");
    }
    // Right after a poll, with the next one 5 s away, work arrives and is leased at once.
    let pushed = fake.start.elapsed();
    fake.push(1, "sleep 0");
    until("the job completed", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Complete(1))
    })
    .await;
    let leased = *fake.times_of(|c| *c == Call::Lease).last().unwrap();
    assert!(
        secs(leased - pushed) < 0.05,
        "leased {:?} after the push",
        leased - pushed
    );
    stop.send(()).unwrap();
    node.await.unwrap();
}

/// Cut off from the queue (every heartbeat fails), a worker stops its job by its own clock
/// before the lease runs out, so that no other worker's run of the job overlaps it.
#[tokio::test(start_paused = true)]
async fn a_worker_cut_off_stops_its_job_before_the_lease_ends() {
    let config = WorkerConfig {
        lease_ttl: Duration::from_secs(12),
        ..WorkerConfig::default()
    };
    let (fake, stop, node, _dir) = start(config, |fake| {
        fake.state.lock().unwrap().heartbeats_fail = true;
        fake.push(1, "sleep 3600");
    });
    until("the job ended", &fake, |calls| {
        calls
            .iter()
            .any(|(_, c)| matches!(c, Call::Fail(1, _) | Call::Complete(1) | Call::Release(1)))
    })
    .await;
    let leased = fake.times_of(|c| *c == Call::Lease)[0];
    let (ended, call) = fake
        .calls()
        .into_iter()
        .find(|(_, c)| matches!(c, Call::Fail(1, _) | Call::Complete(1) | Call::Release(1)))
        .unwrap();
    // Asked to stop a quarter of the TTL before the end (at 9 s), stopped hard at 12 s at
    // the latest: the guest sleeping in a host call ends at the hard stop.
    let ended = secs(ended - leased);
    assert!(
        (9.0..=12.0).contains(&ended),
        "ended at {ended} s with {call:?}"
    );
    assert!(!fake.calls().iter().any(|(_, c)| *c == Call::Complete(1)));
    // Heartbeats were tried again and again meanwhile (a twelfth of the TTL apart).
    let beats = fake.times_of(|c| *c == Call::Heartbeat(1));
    assert!(beats.len() >= 5, "{beats:?}");
    stop.send(()).unwrap();
    node.await.unwrap();
}

/// On shutdown, a running job gets the grace period, then is cancelled and handed back;
/// the node returns once it has been.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_the_grace_then_hands_the_job_back() {
    let config = WorkerConfig {
        lease_ttl: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(20),
        ..WorkerConfig::default()
    };
    let (fake, stop, node, _dir) = start(config, |fake| fake.push(1, "sleep 3600"));
    until("the first heartbeat", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Heartbeat(1))
    })
    .await;
    let asked = fake.start.elapsed();
    stop.send(()).unwrap();
    node.await.unwrap();
    let released = fake.times_of(|c| *c == Call::Release(1));
    assert_eq!(released.len(), 1, "{:?}", fake.calls());
    let after = secs(released[0] - asked);
    // The grace (20 s), then the job's own cancel grace (5 s by default) at most.
    assert!(
        (20.0..=25.1).contains(&after),
        "handed back {after} s after shutdown"
    );
    // Heartbeats kept the lease during the grace.
    let beats_during = fake
        .times_of(|c| *c == Call::Heartbeat(1))
        .into_iter()
        .filter(|at| *at > asked)
        .count();
    assert!(beats_during >= 2, "{:?}", fake.calls());
}

/// A node with one slot and a 30 s lease on a fake that leases with results, holding `jobs`.
fn one_slot_leasing_with_results(
    jobs: &[(u64, &str)],
) -> (
    Arc<Fake>,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
    tempfile::TempDir,
) {
    let config = WorkerConfig {
        concurrency: 1,
        lease_ttl: Duration::from_secs(30),
        ..WorkerConfig::default()
    };
    start(config, |fake| {
        fake.state.lock().unwrap().lease_with_results = true;
        for (seq, input) in jobs {
            fake.push(*seq, input);
        }
    })
}

/// A short job leases several with its result: the next, and more that wait their turn (as
/// many as AHEAD_MAX for a job that took no time). When the job before them runs long, those
/// waiting are handed back after 100 ms (they must not wait behind a long job, their
/// leases running out), and a job that ran long asks for one only.
#[tokio::test(start_paused = true)]
async fn short_jobs_lease_one_ahead_which_is_handed_back_behind_a_long_one() {
    let (fake, stop, node, _dir) =
        one_slot_leasing_with_results(&[(1, "sleep 0"), (2, "sleep 25"), (3, "sleep 0")]);
    until("job 2 completed", &fake, |calls| {
        calls
            .iter()
            .any(|(_, c)| matches!(c, Call::CompleteAndLease(2, _)))
    })
    .await;
    let calls: Vec<Call> = fake.calls().into_iter().map(|(_, c)| c).collect();
    assert!(
        calls.contains(&Call::CompleteAndLease(1, wasmgear_worker::AHEAD_MAX)),
        "{calls:?}"
    );
    assert!(
        calls.contains(&Call::CompleteAndLease(2, 1)),
        "job 2 ran 25 s: nothing ahead: {calls:?}"
    );
    let released = fake.times_of(|c| *c == Call::Release(3));
    assert_eq!(released.len(), 1, "{calls:?}");
    assert!((secs(released[0]) - 0.1).abs() < 0.05, "{released:?}");
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, Call::CompleteAndLease(3, _) | Call::Complete(3))),
        "{calls:?}"
    );
    stop.send(()).unwrap();
    node.await.unwrap();
}

/// Once shutdown has begun, a result leases nothing more with it: the running job finishes
/// and reports alone, and the job held ahead is handed back, never started.
#[tokio::test(start_paused = true)]
async fn shutdown_hands_back_a_job_leased_ahead() {
    let config = WorkerConfig {
        concurrency: 1,
        ..WorkerConfig::default()
    };
    let (fake, stop, node, _dir) = start(config, |fake| {
        fake.state.lock().unwrap().lease_with_results = true;
        fake.push(1, "sleep 0");
        fake.push(2, "sleep 5");
        fake.push(3, "sleep 0");
    });
    until("jobs 2 and 3 leased with job 1's result", &fake, |calls| {
        calls
            .iter()
            .any(|(_, c)| *c == Call::CompleteAndLease(1, wasmgear_worker::AHEAD_MAX))
    })
    .await;
    stop.send(()).unwrap();
    node.await.unwrap();
    let calls: Vec<Call> = fake.calls().into_iter().map(|(_, c)| c).collect();
    assert!(calls.contains(&Call::Complete(2)), "{calls:?}");
    assert!(calls.contains(&Call::Release(3)), "{calls:?}");
    assert!(
        !calls
            .iter()
            .any(|c| matches!(c, Call::CompleteAndLease(3, _) | Call::Complete(3))),
        "{calls:?}"
    );
}

/// Jobs held ahead wait at most 100 ms in all, however short each job before them: jobs of
/// 40 ms each lease nothing more while three wait, and the fourth, still waiting 100 ms
/// after it came, is handed back (not run at 120 ms, its lease running all the while).
#[tokio::test(start_paused = true)]
async fn jobs_held_ahead_are_handed_back_once_they_have_waited_100_ms() {
    let (fake, stop, node, _dir) = one_slot_leasing_with_results(&[
        (1, "sleep 0"),
        (2, "sleepms 40"),
        (3, "sleepms 40"),
        (4, "sleepms 40"),
        (5, "sleepms 40"),
    ]);
    until("job 5 handed back", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Release(5))
    })
    .await;
    let calls: Vec<Call> = fake.calls().into_iter().map(|(_, c)| c).collect();
    assert!(
        calls.contains(&Call::CompleteAndLease(1, wasmgear_worker::AHEAD_MAX)),
        "{calls:?}"
    );
    let released = fake.times_of(|c| *c == Call::Release(5));
    assert!((secs(released[0]) - 0.1).abs() < 0.03, "{released:?}");
    for seq in 2..=3 {
        assert!(
            calls.contains(&Call::Complete(seq)),
            "job {seq} ran: {calls:?}"
        );
    }
    stop.send(()).unwrap();
    node.await.unwrap();
}

/// A lease that arrives with a little over half of it left (a handed job counted from its
/// registering call) starts, and is renewed by the time half of it is left: the worker's own
/// fence (a quarter before the end without a renewal) never stops it.
#[tokio::test(start_paused = true)]
async fn a_late_lease_is_renewed_before_the_fence() {
    let ttl = Duration::from_secs(30);
    let config = WorkerConfig {
        lease_ttl: ttl,
        ..WorkerConfig::default()
    };
    let (fake, stop, node, _dir) = start(config, |fake| {
        fake.state.lock().unwrap().lease_age = ttl * 45 / 100;
        fake.push(1, "sleep 20");
    });
    until("the job completed", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Complete(1))
    })
    .await;
    let started = fake.times_of(|c| *c == Call::Lease)[0];
    let first = fake.times_of(|c| *c == Call::Heartbeat(1))[0];
    // Half of it was left at 0.05 of the lease after the start.
    assert!(
        secs(first - started) <= 0.05 * 30.0 + 0.01,
        "first heartbeat {} s after the start",
        secs(first - started)
    );
    assert!(fake.times_of(|c| matches!(c, Call::Fail(..))).is_empty());
    let _ = stop.send(());
    node.await.unwrap();
}

/// A lease that arrives with less than half of it left is not started: it goes back unrun.
#[tokio::test(start_paused = true)]
async fn a_lease_with_less_than_half_left_is_handed_back() {
    let ttl = Duration::from_secs(30);
    let config = WorkerConfig {
        lease_ttl: ttl,
        ..WorkerConfig::default()
    };
    let (fake, stop, node, _dir) = start(config, |fake| {
        fake.state.lock().unwrap().lease_age = ttl * 6 / 10;
        fake.push(1, "sleep 20");
    });
    until("the job handed back", &fake, |calls| {
        calls.iter().any(|(_, c)| *c == Call::Release(1))
    })
    .await;
    assert!(fake.times_of(|c| *c == Call::Heartbeat(1)).is_empty());
    assert!(fake.times_of(|c| *c == Call::Complete(1)).is_empty());
    let _ = stop.send(());
    node.await.unwrap();
}
