//! What the worker hears on its channels: wake-ups become hints of which functions have
//! work, cancels are noted and passed on, hand-offs are taken into the ledger.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, broadcast};
use wasmgear_proto::{CancelRequest, FunctionName, JobId};

use super::*;
use crate::connection::Connection;
use crate::handoff::{Arrival, HandOffs, LeaseRow};
use crate::subscriber::{Delivery, Subscription};
use wasmgear_proto::sync::Locked;

/// A job handed to this idle worker, as published on the worker's channel (`lease FUNCTION
/// COUNT ROW` + '\n' + input, COUNT the jobs of that hand-off): its function, the count, its
/// lease row and input. `None` for anything else.
pub(super) fn handed_job(payload: &[u8]) -> Option<(FunctionName, usize, LeaseRow)> {
    let rest = payload.strip_prefix(b"lease ")?;
    let line_end = rest.iter().position(|b| *b == b'\n')?;
    let (head, input) = (&rest[..line_end], &rest[line_end + 1..]);
    let head = std::str::from_utf8(head).ok()?;
    let mut parts = head.splitn(3, ' ');
    let function = FunctionName::new(parts.next()?).ok()?;
    let count = parts.next()?.parse::<usize>().ok().filter(|c| *c > 0)?;
    let row = lease_row(parts.next()?.as_bytes(), input.to_vec())?;
    Some((function, count, row))
}

/// What a worker knows of one served function's ready jobs, so that it skips lease calls
/// that would find nothing (a worker serving many functions would otherwise make a round
/// trip per function for every job it picks up).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Hint {
    /// Wake-up events seen for the function (create, retry, ready, config, a finish that
    /// frees a capped slot).
    pub(super) events: u64,
    /// The last lease found fewer jobs than it asked for, and no event came since the
    /// `events` count it started at.
    pub(super) empty_as_of: Option<u64>,
    /// When something of the function falls due (a scheduled job, an expiring lease, a
    /// rate-limit slot), as that lease said.
    pub(super) due: Option<tokio::time::Instant>,
    /// A hand-off used its registration: ask again (to register anew), though that is no
    /// news of more work.
    pub(super) renew: bool,
    /// A wait for work ran out: ask again in case an event was missed, though that is no
    /// news of more work either (an event heard before stays news: it may be what the
    /// wait missed the wake-up of).
    pub(super) recheck: bool,
}

impl Hint {
    pub(super) fn worth_asking(&self, now: tokio::time::Instant) -> bool {
        self.renew || self.recheck || self.has_news(now)
    }

    /// Whether the function is known to have had work since its last lease: that lease got
    /// all it asked for, or a wake-up event came since, or something of it fell due (a hint
    /// cleared for want of news says nothing).
    pub(super) fn has_news(&self, now: tokio::time::Instant) -> bool {
        self.empty_as_of != Some(self.events) || self.due.is_some_and(|due| due <= now)
    }
}

/// Cancels heard lately: job ids with when, the oldest forgotten first (past
/// [`HeardCancels::KEEP`] or [`HeardCancels::MAX`]).
#[derive(Default)]
pub(super) struct HeardCancels(VecDeque<(JobId, std::time::Instant)>);

impl HeardCancels {
    /// How long a cancel is remembered: longer than any job waits between its lease and its
    /// start.
    pub(super) const KEEP: Duration = Duration::from_secs(120);
    /// The most remembered.
    pub(super) const MAX: usize = 4096;

    pub(super) fn forget_old(&mut self, now: std::time::Instant) {
        while self
            .0
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > Self::KEEP)
        {
            self.0.pop_front();
        }
    }

    pub(super) fn note(&mut self, job: JobId, now: std::time::Instant) {
        self.forget_old(now);
        if self.0.len() >= Self::MAX {
            self.0.pop_front();
        }
        self.0.push_back((job, now));
    }

    /// Whether a cancel of `job` was heard at `since` or later.
    pub(super) fn heard(
        &mut self,
        job: &JobId,
        since: std::time::Instant,
        now: std::time::Instant,
    ) -> bool {
        self.forget_old(now);
        self.0
            .iter()
            .any(|(heard, at)| heard == job && *at >= since)
    }
}

pub(super) type Hints = Arc<std::sync::Mutex<std::collections::HashMap<FunctionName, Hint>>>;

/// Updates `function`'s hint after a call that asked for `want` jobs and got `got`: a call
/// that found fewer, not held back by the cap, says the function has no more ready jobs as
/// of `events` (the count when the call was sent), and when something falls due (`wait_ms`,
/// from `now`).
#[allow(clippy::too_many_arguments)]
pub(super) fn record_lease(
    hints: &Hints,
    function: &FunctionName,
    events: u64,
    want: usize,
    got: usize,
    wait_ms: i64,
    capped: i64,
    now: tokio::time::Instant,
) {
    let mut hints = lock_hints(hints);
    let entry = hints.entry(function.clone()).or_default();
    if want == 0 {
        // A call that could ask for nothing (its slots all kept for hand-offs; it came to
        // take back its own registration) learnt only when something falls due, not that
        // nothing is ready: what the hint knew stands, and the function is still asked
        // when it was to be.
        if let Ok(ms) = u64::try_from(wait_ms) {
            let at = now + Duration::from_millis(ms);
            entry.due = Some(entry.due.map_or(at, |due| due.min(at)));
        }
        return;
    }
    entry.renew = false;
    entry.recheck = false;
    if got < want && capped == 0 {
        entry.empty_as_of = Some(events);
        entry.due = u64::try_from(wait_ms)
            .ok()
            .map(|ms| now + Duration::from_millis(ms));
    } else {
        entry.empty_as_of = None;
    }
}

pub(super) fn lock_hints(
    hints: &Hints,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<FunctionName, Hint>> {
    hints.locked()
}

/// Turns what arrives on the work channels into wake-ups and cancel requests; while the
/// subscription is lost, hints are not trusted (every function is asked), and once it is
/// back they are cleared (events may have been missed).
pub(super) async fn forward_notifications(
    mut subscription: Subscription,
    channels: std::collections::HashMap<String, FunctionName>,
    work_arrived: Arc<Notify>,
    cancels: (
        broadcast::Sender<CancelRequest>,
        Arc<std::sync::Mutex<HeardCancels>>,
    ),
    hints: Hints,
    listening: Arc<AtomicBool>,
    handed: (String, Arc<std::sync::Mutex<HandOffs>>, Connection),
) {
    let (cancels, heard) = cancels;
    let (handoff_channel, handoffs, conn) = handed;
    while let Some(delivery) = subscription.next().await {
        match delivery {
            Delivery::Message(message) => {
                if message.channel == handoff_channel {
                    match handed_job(&message.payload) {
                        Some((function, count, row)) => {
                            let now = std::time::Instant::now();
                            let arrival =
                                lock_handoffs(&handoffs).arrived(function, count, row, now);
                            match arrival {
                                Arrival::Queued => work_arrived.notify_one(),
                                Arrival::Duplicate => {
                                    tracing::debug!("dropped a copy of a hand-off message");
                                }
                                Arrival::Unexpected(function, row) => {
                                    // No slot is kept for it: handed back at once, unrun.
                                    let lease = lease_of(&function, row, now, Duration::ZERO);
                                    let conn = conn.clone();
                                    tokio::spawn(async move {
                                        release_lease(&conn, &lease).await;
                                    });
                                }
                            }
                        }
                        None => tracing::warn!(
                            channel = %handoff_channel,
                            "ignoring a message on this worker's hand-off channel that is not a lease"
                        ),
                    }
                } else if message.payload == b"work" {
                    if let Some(function) = channels.get(&message.channel) {
                        lock_hints(&hints)
                            .entry(function.clone())
                            .or_default()
                            .events += 1;
                    }
                    work_arrived.notify_one();
                } else if let Some(id) = message.payload.strip_prefix(b"cancel ")
                    && let Ok(id) = std::str::from_utf8(id).unwrap_or("").parse::<JobId>()
                {
                    // Noted before it is passed on: a job that starts once the worker has
                    // heard it finds it ([`WorkerQueue::cancel_heard`]).
                    heard.locked().note(id.clone(), std::time::Instant::now());
                    let _ = cancels.send(CancelRequest::any(id));
                }
            }
            Delivery::Lost => {
                listening.store(false, Ordering::SeqCst);
                // What Redis holds of this worker's registrations is unknown now (a restart
                // loses them, and what they hand is not heard while the connection is down):
                // their slots are free; a hand-off heard through one later goes back.
                lock_handoffs(&handoffs).forget_registrations();
            }
            Delivery::Resubscribed => {
                lock_hints(&hints).clear();
                listening.store(true, Ordering::SeqCst);
                work_arrived.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Hint, Hints, lock_hints, record_lease};
    use wasmgear_proto::FunctionName;

    fn hint(hints: &Hints, function: &FunctionName) -> Hint {
        lock_hints(hints).get(function).copied().unwrap_or_default()
    }

    /// A call that got fewer jobs than it asked for says the function has none ready
    /// until news comes; one that got all it asked for, that it may have more.
    #[test]
    fn a_call_that_found_fewer_jobs_than_it_asked_for_says_none_are_ready() {
        let (hints, f) = (Hints::default(), FunctionName::new("f").unwrap());
        let now = tokio::time::Instant::now();
        record_lease(&hints, &f, 0, 10, 10, 0, 0, now);
        assert!(hint(&hints, &f).worth_asking(now));
        record_lease(&hints, &f, 0, 10, 3, -1, 0, now);
        assert!(!hint(&hints, &f).worth_asking(now));
        // A `work` message is news.
        lock_hints(&hints).get_mut(&f).unwrap().events += 1;
        assert!(hint(&hints, &f).worth_asking(now));
        // Held back by the cap, a call says nothing of what is ready.
        record_lease(&hints, &f, 1, 10, 0, -1, 1, now);
        assert!(hint(&hints, &f).worth_asking(now));
    }

    /// A call that could ask for no job (its slots were kept for hand-offs; it came to take
    /// back its registration) found nothing because it asked for nothing: a function with
    /// ready jobs is still asked next time, and one to re-check is still re-checked.
    #[test]
    fn a_call_that_asked_for_nothing_hides_no_ready_jobs() {
        let (hints, f) = (Hints::default(), FunctionName::new("f").unwrap());
        let now = tokio::time::Instant::now();
        record_lease(&hints, &f, 0, 100, 100, 0, 0, now);
        record_lease(&hints, &f, 0, 0, 0, 30_000, 0, now);
        let after = hint(&hints, &f);
        assert!(after.worth_asking(now), "{after:?}");
        assert_eq!(after.due, Some(now + Duration::from_secs(30)));

        // Nothing was ready, then a wait ran out: the re-check it asked for stands.
        record_lease(&hints, &f, 0, 10, 0, -1, 0, now);
        lock_hints(&hints).get_mut(&f).unwrap().recheck = true;
        record_lease(&hints, &f, 0, 0, 0, -1, 0, now);
        assert!(hint(&hints, &f).worth_asking(now));
    }
}
