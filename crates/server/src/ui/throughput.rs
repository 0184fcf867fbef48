//! Finished jobs per function and minute, counted from the event stream since the server
//! started: the overview's "last hour".

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use futures_util::StreamExt;
use wasmgear_proto::event::Event;
use wasmgear_proto::sync::Locked;

use crate::AppState;

/// Finished jobs per function and minute, for the last [`MINUTES`] minutes.
#[derive(Debug, Default)]
pub(crate) struct Throughput {
    minutes: Mutex<HashMap<String, VecDeque<(u64, u64)>>>,
}

/// Minutes of throughput kept.
const MINUTES: u64 = 60;

impl Throughput {
    /// Counts one finished job of `function` in `minute` (minutes since the epoch).
    fn count(&self, function: &str, minute: u64) {
        let mut all = self.minutes.locked();
        let series = all.entry(function.to_string()).or_default();
        match series.back_mut() {
            Some((last, n)) if *last == minute => *n += 1,
            _ => series.push_back((minute, 1)),
        }
        while series.front().is_some_and(|(m, _)| *m + MINUTES <= minute) {
            series.pop_front();
        }
    }

    /// `function`'s finished jobs in each of the last [`MINUTES`] minutes, oldest first.
    pub(super) fn last_hour(&self, function: &str, now_minute: u64) -> Vec<u64> {
        let all = self.minutes.locked();
        let mut counts = vec![0; MINUTES as usize];
        for (minute, n) in all.get(function).into_iter().flatten() {
            let age = now_minute.saturating_sub(*minute);
            if age < MINUTES {
                counts[(MINUTES - 1 - age) as usize] = *n;
            }
        }
        counts
    }
}

/// Counts finished jobs from the event stream until the server stops. (The stream goes on
/// across reconnections; only listening the first time needs Redis to answer, and is
/// tried again until it does.)
pub(crate) async fn count_finished(state: AppState) {
    let events = loop {
        match state.client.events(None).await {
            Ok(events) => break events,
            Err(error) => {
                tracing::warn!(%error, "the dashboard's throughput is not counted yet: cannot listen to events; trying again");
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                    () = state.shutdown.cancelled() => return,
                }
            }
        }
    };
    let mut events = std::pin::pin!(events.take_until(state.shutdown.clone().cancelled_owned()));
    while let Some(published) = events.next().await {
        if let Event::Finish { .. } = published.event {
            let minute = wasmgear_proto::units::now_ms() / 60_000;
            state.throughput.count(published.function.as_str(), minute);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_keeps_the_last_hour_by_minute() {
        let throughput = Throughput::default();
        throughput.count("f", 100);
        throughput.count("f", 100);
        throughput.count("f", 159);
        let hour = throughput.last_hour("f", 159);
        assert_eq!(hour.len(), 60);
        assert_eq!((hour[0], hour[59]), (2, 1));
        // A minute later, minute 100 has left the hour.
        throughput.count("f", 160);
        let hour = throughput.last_hour("f", 160);
        assert_eq!(hour.iter().sum::<u64>(), 2);
        assert_eq!(throughput.last_hour("g", 160).iter().sum::<u64>(), 0);
    }
}
