//! Hand-offs: jobs Redis leases to this worker while it is idle and publishes on its
//! channel (lib.lua, "Idle workers handed jobs directly"), and the slots the worker keeps
//! free for them.
//!
//! A `lease` call that finds nothing may register the worker for a hand-off of at most N
//! jobs of its function; until the worker knows the registration is over, N of its slots
//! stay free for it (the worker loop holds them, [`crate::WorkerQueue::reserved_slots`]), so
//! the jobs a worker can be handed, over all its functions, never exceed its free slots. A
//! registration is over when the next lease call on its function or a `withdraw` takes it
//! out unused (Redis says so), when its hand-off's messages have all come (each says how
//! many jobs the hand-off gave), or a while after it lapsed (a message later than that is
//! handed back, not started). This module is the bookkeeping only: no I/O, every time
//! passed in.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use wasmgear_proto::FunctionName;
use wasmgear_proto::recent::Recent;

/// How long after a registration lapses (by this worker's count) its hand-off's messages
/// are still waited for; its slots are free after that.
pub(crate) const LAPSE_GRACE: Duration = Duration::from_secs(1);

/// One leased job as a lease row holds it, with its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseRow {
    pub(crate) seq: u64,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) timeout_ms: u64,
    /// When the job was enqueued (ms, queue clock).
    pub(crate) created_ms: u64,
    pub(crate) token: String,
    /// The trace context the job was enqueued with, if any.
    pub(crate) trace: Option<wasmgear_proto::TraceContext>,
    pub(crate) input: Vec<u8>,
}

/// A registration this worker made (or whose hand-off may still be on its way).
#[derive(Debug, Clone)]
struct Registration {
    function: FunctionName,
    /// Slots kept for it: what it asked for, then, once its hand-off is heard, the jobs of
    /// that hand-off still to come.
    slots: usize,
    /// When the registering call was sent, and the lease time it asked for: a handed lease
    /// runs that long from then, at the latest.
    sent: Instant,
    ttl: Duration,
    /// When Redis lets it lapse at the latest, by this worker's clock.
    lapses: Instant,
    /// Whether its hand-off has been heard (then Redis holds it no more).
    heard: bool,
}

/// A job handed to this worker and not yet taken by a lease call.
#[derive(Debug)]
pub(crate) struct HandedJob {
    pub(crate) function: FunctionName,
    pub(crate) row: LeaseRow,
    /// When its registering call was sent, and its lease time.
    pub(crate) sent: Instant,
    pub(crate) ttl: Duration,
}

/// What became of a hand-off message.
#[derive(Debug)]
pub(crate) enum Arrival {
    /// Kept for the next lease call, in a slot kept for it.
    Queued,
    /// A copy of a message already heard (the worker re-subscribed while it was sent):
    /// dropped. Handing it back would hand back the lease the first copy started.
    Duplicate,
    /// No slot was kept for it (its registration is over or unknown): hand it back at
    /// once.
    Unexpected(FunctionName, LeaseRow),
}

/// The worker's hand-offs: its registrations by function and call id (one lease call may
/// register for several functions under its id), the jobs handed and not yet taken.
#[derive(Debug)]
pub(crate) struct HandOffs {
    registrations: HashMap<(FunctionName, String), Registration>,
    jobs: VecDeque<HandedJob>,
    /// Tokens heard, to drop a copy of a message (far more than a worker is handed in the
    /// time a copy can take to come).
    seen: Recent,
    stopping: bool,
}

impl Default for HandOffs {
    fn default() -> Self {
        HandOffs {
            registrations: HashMap::new(),
            jobs: VecDeque::new(),
            seen: Recent::new(4 * wasmgear_proto::limits::MAX_CONCURRENCY as usize),
            stopping: false,
        }
    }
}

/// The registering call's id of a handed lease's `token` (`CALL_ID:NUMBER:ATTEMPT`).
pub(crate) fn call_id_of(token: &str) -> Option<&str> {
    token.rsplitn(3, ':').nth(2)
}

impl HandOffs {
    /// Forgets registrations whose hand-off can no longer come.
    fn prune(&mut self, now: Instant) {
        self.registrations
            .retain(|_, r| now < r.lapses + LAPSE_GRACE);
    }

    /// The slots kept: for registrations (unheard, or heard with jobs still to come) and
    /// for the jobs handed and not yet taken.
    pub(crate) fn reserved(&mut self, now: Instant) -> usize {
        self.prune(now);
        self.registered_slots() + self.jobs.len()
    }

    /// When the next registration's slots come free by lapsing (its hand-off never heard):
    /// an idle worker asks again then, as the slots it kept may have held back its last
    /// lease call.
    pub(crate) fn next_lapse(&mut self, now: Instant) -> Option<Instant> {
        // Lapsed ones are gone first: a time already past would make the wait a spin.
        self.prune(now);
        self.registrations
            .values()
            .map(|r| r.lapses + LAPSE_GRACE)
            .min()
    }

    /// The slots kept for registrations alone.
    pub(crate) fn registered_slots(&self) -> usize {
        self.registrations.values().map(|r| r.slots).sum()
    }

    /// Whether the worker has stopped taking hand-offs.
    pub(crate) fn stopping(&self) -> bool {
        self.stopping
    }

    /// Notes registration `call_id` of `function` for `slots` jobs, made by a call sent at
    /// `sent` for leases of `ttl`, answered at `replied`, lasting `hold` from then at most.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn register(
        &mut self,
        call_id: &str,
        function: &FunctionName,
        slots: usize,
        sent: Instant,
        ttl: Duration,
        replied: Instant,
        hold: Duration,
    ) {
        self.registrations.insert(
            (function.clone(), call_id.to_string()),
            Registration {
                function: function.clone(),
                slots,
                sent,
                ttl,
                lapses: replied + hold,
                heard: false,
            },
        );
    }

    /// `function`'s registration that Redis may still hold (unheard): its call id and slots.
    pub(crate) fn unheard(&self, function: &FunctionName) -> Option<(String, usize)> {
        self.registrations
            .iter()
            .filter(|(_, r)| !r.heard && r.function == *function)
            .max_by_key(|(_, r)| r.sent)
            .map(|((_, id), r)| (id.clone(), r.slots))
    }

    /// The unheard registrations of functions other than `function`: function, call id,
    /// slots.
    pub(crate) fn unheard_others(
        &self,
        function: &FunctionName,
    ) -> Vec<(FunctionName, String, usize)> {
        self.registrations
            .iter()
            .filter(|(_, r)| !r.heard && r.function != *function)
            .map(|((_, id), r)| (r.function.clone(), id.clone(), r.slots))
            .collect()
    }

    /// Every unheard registration: function and call id (to withdraw when stopping).
    pub(crate) fn all_unheard(&self) -> Vec<(FunctionName, String)> {
        self.registrations
            .iter()
            .filter(|(_, r)| !r.heard)
            .map(|((_, id), r)| (r.function.clone(), id.clone()))
            .collect()
    }

    /// `function`'s registration `call_id` was taken out of Redis unused: its slots are free.
    pub(crate) fn withdrawn(&mut self, function: &FunctionName, call_id: &str) {
        self.registrations
            .remove(&(function.clone(), call_id.to_string()));
    }

    /// A hand-off message: `count` jobs of `function` were handed through one registration;
    /// this is one of them.
    pub(crate) fn arrived(
        &mut self,
        function: FunctionName,
        count: usize,
        row: LeaseRow,
        now: Instant,
    ) -> Arrival {
        // (A token is unique within its function only.)
        if !self.seen.insert(&format!("{function}\0{}", row.token)) {
            return Arrival::Duplicate;
        }
        self.prune(now);
        let Some(call_id) = call_id_of(&row.token).map(str::to_string) else {
            return Arrival::Unexpected(function, row);
        };
        let key = (function.clone(), call_id);
        // (Stopping, it is kept all the same, for the stop to hand back with the others
        // its registration gives: the stop waits for them.)
        let Some(registration) = self.registrations.get_mut(&key) else {
            return Arrival::Unexpected(function, row);
        };
        // Its first message: the hand-off gave `count` jobs; the slots beyond them are free.
        if !registration.heard {
            registration.heard = true;
            registration.slots = registration.slots.min(count);
        }
        if registration.slots == 0 {
            // More jobs than it said (or than the slots kept): no slot for this one.
            return Arrival::Unexpected(function, row);
        }
        registration.slots -= 1;
        let (sent, ttl) = (registration.sent, registration.ttl);
        if registration.slots == 0 {
            self.registrations.remove(&key);
        }
        self.jobs.push_back(HandedJob {
            function,
            row,
            sent,
            ttl,
        });
        Arrival::Queued
    }

    /// The handed jobs, taken: each either to start (it has at least half of its lease
    /// left by the count from its registering call, its function is asked for with room,
    /// and fewer than `max` are taken) or to hand back.
    pub(crate) fn take(
        &mut self,
        room: &mut HashMap<FunctionName, usize>,
        max: usize,
        now: Instant,
    ) -> (Vec<HandedJob>, Vec<HandedJob>) {
        let (mut taken, mut unwanted) = (Vec::new(), Vec::new());
        for job in std::mem::take(&mut self.jobs) {
            let left = (job.sent + job.ttl).saturating_duration_since(now);
            let fits = room.get_mut(&job.function).filter(|left| **left > 0);
            match fits {
                Some(room) if left >= job.ttl / 2 && taken.len() < max => {
                    *room -= 1;
                    taken.push(job);
                }
                _ => unwanted.push(job),
            }
        }
        (taken, unwanted)
    }

    /// Forgets every registration (the subscription to the hand-off channel was lost): their
    /// slots are free, and a job handed through one of them goes back.
    pub(crate) fn forget_registrations(&mut self) {
        self.registrations.clear();
    }

    /// Shutdown: no more hand-offs are taken. Returns the jobs handed and not taken (to hand
    /// back); the registrations Redis may still hold are left for the caller to withdraw
    /// ([`HandOffs::all_unheard`]), and the jobs those already gave, on their way, to wait
    /// for ([`HandOffs::next_lapse`] says until when) and collect with [`HandOffs::stop`]
    /// again.
    pub(crate) fn stop(&mut self) -> Vec<HandedJob> {
        self.stopping = true;
        self.jobs.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str) -> FunctionName {
        FunctionName::new(name).unwrap()
    }

    fn row(token: &str) -> LeaseRow {
        LeaseRow {
            seq: 1,
            attempt: 1,
            max_attempts: 3,
            timeout_ms: 1000,
            created_ms: 0,
            token: token.to_string(),
            trace: None,
            input: Vec::new(),
        }
    }

    const TTL: Duration = Duration::from_secs(4);
    const HOLD: Duration = Duration::from_secs(1);

    /// A registration keeps its slots until its hand-off is heard; then only the jobs still
    /// to come keep one, and the jobs here keep theirs until taken.
    #[test]
    fn a_registration_keeps_its_slots_until_its_hand_off_is_heard() {
        let mut handoffs = HandOffs::default();
        let now = Instant::now();
        let echo = function("echo");
        handoffs.register("w/a", &echo, 4, now, TTL, now, HOLD);
        assert_eq!(handoffs.reserved(now), 4);
        assert!(matches!(
            handoffs.arrived(echo.clone(), 2, row("w/a:7:1"), now),
            Arrival::Queued
        ));
        // The hand-off gave 2: one here, one to come; two slots are free again.
        assert_eq!(handoffs.reserved(now), 2);
        assert!(matches!(
            handoffs.arrived(echo.clone(), 2, row("w/a:8:1"), now),
            Arrival::Queued
        ));
        assert_eq!(handoffs.reserved(now), 2);
        assert_eq!(handoffs.unheard(&echo), None);
        // A third job through the same registration has no slot.
        assert!(matches!(
            handoffs.arrived(echo.clone(), 2, row("w/a:9:1"), now),
            Arrival::Unexpected(..)
        ));
        let mut room = HashMap::from([(echo.clone(), 8)]);
        let (taken, unwanted) = handoffs.take(&mut room, 8, now);
        assert_eq!((taken.len(), unwanted.len()), (2, 0));
        assert_eq!(handoffs.reserved(now), 0);
    }

    /// One lease call registers for several functions under its id: each keeps its own
    /// slots.
    #[test]
    fn one_call_registers_each_function_apart() {
        let mut handoffs = HandOffs::default();
        let now = Instant::now();
        let (echo, other) = (function("echo"), function("other"));
        handoffs.register("w/a", &echo, 1, now, TTL, now, HOLD);
        handoffs.register("w/a", &other, 1, now, TTL, now, HOLD);
        assert_eq!(handoffs.reserved(now), 2);
        assert!(matches!(
            handoffs.arrived(echo.clone(), 1, row("w/a:7:1"), now),
            Arrival::Queued
        ));
        assert_eq!(handoffs.unheard(&echo), None);
        assert_eq!(handoffs.unheard(&other), Some(("w/a".to_string(), 1)));
        handoffs.withdrawn(&other, "w/a");
        assert_eq!(handoffs.reserved(now), 1);
    }

    /// A copy of a message is dropped, not handed back.
    #[test]
    fn a_copy_of_a_message_is_dropped() {
        let mut handoffs = HandOffs::default();
        let now = Instant::now();
        let echo = function("echo");
        handoffs.register("w/a", &echo, 2, now, TTL, now, HOLD);
        assert!(matches!(
            handoffs.arrived(echo.clone(), 2, row("w/a:7:1"), now),
            Arrival::Queued
        ));
        assert!(matches!(
            handoffs.arrived(echo.clone(), 2, row("w/a:7:1"), now),
            Arrival::Duplicate
        ));
    }

    /// Jobs through a registration that is withdrawn, lapsed, unknown or of another
    /// function are handed back; a lapsed registration's slots are free after the grace.
    #[test]
    fn jobs_without_a_kept_slot_are_handed_back() {
        let mut handoffs = HandOffs::default();
        let now = Instant::now();
        let echo = function("echo");
        handoffs.register("w/a", &echo, 2, now, TTL, now, HOLD);
        handoffs.withdrawn(&echo, "w/a");
        assert_eq!(handoffs.reserved(now), 0);
        assert!(matches!(
            handoffs.arrived(echo.clone(), 1, row("w/a:7:1"), now),
            Arrival::Unexpected(..)
        ));
        handoffs.register("w/b", &echo, 2, now, TTL, now, HOLD);
        assert!(matches!(
            handoffs.arrived(function("other"), 1, row("w/b:8:1"), now),
            Arrival::Unexpected(..)
        ));
        let later = now + HOLD + LAPSE_GRACE;
        assert_eq!(handoffs.reserved(later), 0);
        assert!(matches!(
            handoffs.arrived(echo.clone(), 1, row("w/b:9:1"), later),
            Arrival::Unexpected(..)
        ));
    }

    /// Stopping, the jobs a registration already gave (it could not be withdrawn) are
    /// waited for until it would lapse and collected by the next stop, to hand back; once
    /// all of them came, nothing more is waited for.
    #[test]
    fn a_stop_collects_what_a_used_registration_gave() {
        let mut handoffs = HandOffs::default();
        let now = Instant::now();
        let echo = function("echo");
        handoffs.register("w/c", &echo, 2, now, TTL, now, HOLD);
        assert_eq!(handoffs.all_unheard().len(), 1);
        assert!(handoffs.stop().is_empty());
        assert_eq!(handoffs.next_lapse(now), Some(now + HOLD + LAPSE_GRACE));
        assert!(matches!(
            handoffs.arrived(echo.clone(), 2, row("w/c:10:1"), now),
            Arrival::Queued
        ));
        assert!(handoffs.next_lapse(now).is_some(), "one more is on its way");
        assert!(matches!(
            handoffs.arrived(echo, 2, row("w/c:11:1"), now),
            Arrival::Queued
        ));
        assert_eq!(handoffs.next_lapse(now), None);
        let tokens: Vec<String> = handoffs
            .stop()
            .into_iter()
            .map(|job| job.row.token)
            .collect();
        assert_eq!(tokens, ["w/c:10:1", "w/c:11:1"]);
    }

    /// A handed job starts only with at least half of its lease left by the count from its
    /// registering call, and only for a function asked for with room.
    #[test]
    fn a_handed_job_starts_only_with_half_its_lease_left() {
        let mut handoffs = HandOffs::default();
        let now = Instant::now();
        let echo = function("echo");
        handoffs.register("w/a", &echo, 3, now, TTL, now, HOLD);
        for token in ["w/a:1:1", "w/a:2:1", "w/a:3:1"] {
            handoffs.arrived(echo.clone(), 3, row(token), now);
        }
        let mut room = HashMap::from([(echo.clone(), 1)]);
        let (taken, unwanted) = handoffs.take(&mut room, 8, now + TTL / 2);
        assert_eq!((taken.len(), unwanted.len()), (1, 2));
        handoffs.register("w/b", &echo, 1, now, TTL, now, HOLD);
        handoffs.arrived(echo.clone(), 1, row("w/b:4:1"), now);
        let mut room = HashMap::from([(echo, 1)]);
        let late = now + TTL / 2 + Duration::from_millis(1);
        let (taken, unwanted) = handoffs.take(&mut room, 8, late);
        assert_eq!((taken.len(), unwanted.len()), (0, 1));
    }
}
