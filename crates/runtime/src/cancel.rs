//! Asking a running job to stop: why, and by when.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Why a running job was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// A client cancelled the job.
    Requested,
    /// The worker no longer holds the job's lease.
    LeaseLost,
    /// The worker is shutting down and hands the job back.
    Shutdown,
}

/// A one-shot, shareable request for a running job to stop. The first `cancel` wins.
///
/// The job gets a grace period to stop by itself (the runtime's `cancel_grace`), then it
/// is stopped hard; [`CancelSignal::cancel_by`] can bring the hard stop forward (a lease
/// that runs out must not be outlived).
#[derive(Debug, Clone, Default)]
pub struct CancelSignal(Arc<CancelInner>);

#[derive(Debug, Default)]
struct CancelInner {
    fired: OnceLock<Fired>,
    notify: tokio::sync::Notify,
}

/// Why and when a [`CancelSignal`] fired, and the latest moment the job may still run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fired {
    reason: CancelReason,
    at: Instant,
    stop_by: Option<Instant>,
}

impl CancelSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the signal (if it has not fired yet) for `reason`.
    pub fn cancel(&self, reason: CancelReason) {
        self.fire(reason, None);
    }

    /// Fires the signal (if it has not fired yet) for `reason`, and stops the job hard at
    /// `stop_by` at the latest, even if its grace period lasts longer.
    pub fn cancel_by(&self, reason: CancelReason, stop_by: Instant) {
        self.fire(reason, Some(stop_by));
    }

    fn fire(&self, reason: CancelReason, stop_by: Option<Instant>) {
        let fired = Fired {
            reason,
            // Tokio's clock, which the timers that act on it use (and tests can pause).
            at: tokio::time::Instant::now().into_std(),
            stop_by,
        };
        if self.0.fired.set(fired).is_ok() {
            self.0.notify.notify_waiters();
        }
    }

    /// Whether the signal has fired.
    pub fn is_cancelled(&self) -> bool {
        self.0.fired.get().is_some()
    }

    /// Why and when the signal fired, if it has.
    pub fn fired(&self) -> Option<(CancelReason, Instant)> {
        self.0.fired.get().map(|f| (f.reason, f.at))
    }

    /// When a job given `grace` to stop after this signal must be stopped hard: `None`
    /// while the signal has not fired.
    pub fn stop_at(&self, grace: Duration) -> Option<Instant> {
        self.0.fired.get().map(|f| {
            let end = f.at + grace;
            f.stop_by.map_or(end, |by| by.min(end))
        })
    }

    /// Returns once the signal has fired.
    pub async fn fired_wait(&self) {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_signal_keeps_the_first_reason() {
        let signal = CancelSignal::new();
        assert!(!signal.is_cancelled());
        signal.cancel(CancelReason::Shutdown);
        signal.clone().cancel(CancelReason::Requested);
        assert_eq!(signal.fired().unwrap().0, CancelReason::Shutdown);
    }
}
