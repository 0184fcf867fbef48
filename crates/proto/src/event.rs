//! The events published on each function's `events` channel, typed.

use serde::{Deserialize, Serialize};

use crate::job::{FunctionName, JobId, whole_number};
use crate::model::{JobRecord, JobState};

/// One event of a function's `events` channel (`PROTOCOL.md`, "Events").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    /// A job was enqueued.
    Create {
        /// The job.
        id: JobId,
    },
    /// A worker leased the job and runs this attempt.
    Start {
        /// The job.
        id: JobId,
        /// Which attempt (1-based).
        attempt: u32,
    },
    /// The running job reported progress.
    Progress {
        /// The job.
        id: JobId,
        /// Counts the job's reports over all attempts, so readers can order them.
        seq: u64,
        /// Units of work finished.
        #[serde(deserialize_with = "whole_number", serialize_with = "as_text")]
        done: u64,
        /// Units of work in all; 0 when unknown.
        #[serde(deserialize_with = "whole_number", serialize_with = "as_text")]
        total: u64,
        /// A short note, if the job gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The running job saved a checkpoint, for its next attempt to resume from.
    Checkpoint {
        /// The job.
        id: JobId,
        /// The checkpoint's size in bytes.
        bytes: u64,
    },
    /// An attempt failed and the job runs again at `at_ms`.
    Retry {
        /// The job.
        id: JobId,
        /// The attempt that failed.
        attempt: u32,
        /// When the next attempt may start, ms since the epoch (Redis' clock).
        at_ms: u64,
    },
    /// The job ended.
    Finish {
        /// The job.
        id: JobId,
        /// How: succeeded, failed or cancelled.
        state: JobState,
        /// The job's record as `get` answers it, when a client waits on the job (`watch`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        record: Option<Box<JobRecord>>,
        /// Its output, with the record, when small printable text (`MAX_EVENT_OUTPUT`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<String>,
        /// With the record: the job has an output the event does not carry (read it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        output_omitted: bool,
    },
    /// A waiting job's dependencies succeeded, or a job was handed back: it can be leased.
    Ready {
        /// The job.
        id: JobId,
    },
    /// The function's settings changed.
    Config,
    /// A running job's worker should stop it.
    Cancel {
        /// The job.
        id: JobId,
    },
    /// An event this version does not know (written by a newer one).
    #[serde(other)]
    Other,
}

impl Event {
    /// The job the event is about (none for `config` and unknown events).
    pub fn job(&self) -> Option<&JobId> {
        match self {
            Event::Create { id }
            | Event::Start { id, .. }
            | Event::Progress { id, .. }
            | Event::Checkpoint { id, .. }
            | Event::Retry { id, .. }
            | Event::Finish { id, .. }
            | Event::Ready { id }
            | Event::Cancel { id } => Some(id),
            Event::Config | Event::Other => None,
        }
    }

    /// The event's name as published (`create`, `start`, ...; `other` when unknown).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Create { .. } => "create",
            Event::Start { .. } => "start",
            Event::Progress { .. } => "progress",
            Event::Checkpoint { .. } => "checkpoint",
            Event::Retry { .. } => "retry",
            Event::Finish { .. } => "finish",
            Event::Ready { .. } => "ready",
            Event::Config => "config",
            Event::Cancel { .. } => "cancel",
            Event::Other => "other",
        }
    }

    /// Reads one published event; `None` when it is not an event's JSON.
    pub fn parse(payload: &[u8]) -> Option<Event> {
        serde_json::from_slice(payload).ok()
    }

    /// Reads one published message: an event's JSON object, or a JSON array of events (a
    /// call that creates, starts or finishes several jobs publishes their events together,
    /// in order). Each event comes with its JSON as published; what is not an event is
    /// left out.
    pub fn parse_message(payload: &[u8]) -> Vec<(Event, &str)> {
        let Ok(text) = std::str::from_utf8(payload) else {
            return Vec::new();
        };
        if !text.trim_start().starts_with('[') {
            return Event::parse(payload)
                .map(|event| (event, text))
                .into_iter()
                .collect();
        }
        let Ok(items) = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text) else {
            return Vec::new();
        };
        items
            .into_iter()
            .filter_map(|raw| Some((Event::parse(raw.get().as_bytes())?, raw.get())))
            .collect()
    }
}

/// An event and the function on whose channel it came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionEvent {
    /// The function whose `events` channel carried it.
    pub function: FunctionName,
    /// The event.
    pub event: Event,
    /// The JSON as published.
    pub json: String,
}

/// Writes a count as the decimal string the scripts publish.
fn as_text<S: serde::Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_scripts_publish() {
        let id: JobId = "echo:7".parse().unwrap();
        let cases = [
            (
                r#"{"event":"create","id":"echo:7"}"#,
                Event::Create { id: id.clone() },
            ),
            (
                r#"{"event":"start","id":"echo:7","attempt":2}"#,
                Event::Start {
                    id: id.clone(),
                    attempt: 2,
                },
            ),
            (
                r#"{"event":"progress","id":"echo:7","seq":3,"done":"18446744073709551614","total":"0","message":"m"}"#,
                Event::Progress {
                    id: id.clone(),
                    seq: 3,
                    done: u64::MAX - 1,
                    total: 0,
                    message: Some("m".into()),
                },
            ),
            (
                r#"{"event":"finish","id":"echo:7","state":"succeeded"}"#,
                Event::Finish {
                    id: id.clone(),
                    state: JobState::Succeeded,
                    record: None,
                    output: None,
                    output_omitted: false,
                },
            ),
            (r#"{"event":"config","id":""}"#, Event::Config),
            (
                r#"{"event":"cancel","id":"echo:7"}"#,
                Event::Cancel { id: id.clone() },
            ),
            (r#"{"event":"later","id":"echo:7"}"#, Event::Other),
        ];
        for (json, want) in cases {
            assert_eq!(
                Event::parse(json.as_bytes()).as_ref(),
                Some(&want),
                "{json}"
            );
        }
        assert_eq!(Event::parse(b"not json"), None);
        assert!(Event::parse_message(b"not json").is_empty());
        assert_eq!(Event::parse(br#"{"event":"start","id":"nocolon"}"#), None);
    }

    #[test]
    fn a_message_carries_one_event_or_an_array_of_them_in_order() {
        let one = r#"{"event":"create","id":"echo:7"}"#;
        let got = Event::parse_message(one.as_bytes());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, one);
        let many = r#"[{"event":"finish","id":"echo:7","state":"succeeded"}, {"event":"start","id":"echo:8","attempt":1},"junk",{"event":"create","id":"echo:9"}]"#;
        let got = Event::parse_message(many.as_bytes());
        let kinds: Vec<_> = got.iter().map(|(e, _)| e.kind()).collect();
        assert_eq!(kinds, ["finish", "start", "create"]);
        assert_eq!(got[1].1, r#"{"event":"start","id":"echo:8","attempt":1}"#);
        assert!(Event::parse_message(b"[{\"event\":").is_empty());
        assert!(Event::parse_message(b"[]").is_empty());
    }

    #[test]
    fn a_watched_jobs_finish_carries_its_record_and_small_output() {
        let json = r#"{"event":"finish","id":"echo:7","state":"succeeded","output":"{\"n\":1}\n","record":{"state":"succeeded","priority":0,"attempt":1,"max_attempts":3,"timeout_ms":1000,"retention_ms":5000,"created_ms":1,"finished_ms":9,"history":{}}}"#;
        let Some(Event::Finish {
            state,
            record: Some(record),
            output,
            output_omitted,
            ..
        }) = Event::parse(json.as_bytes())
        else {
            panic!("not a finish with a record: {json}");
        };
        assert_eq!(state, JobState::Succeeded);
        assert_eq!(record.finished_ms, Some(9));
        assert_eq!(output.as_deref(), Some("{\"n\":1}\n"));
        assert!(!output_omitted);
        let omitted = r#"{"event":"finish","id":"echo:7","state":"succeeded","output_omitted":true,"record":{"state":"succeeded","priority":0,"attempt":1,"max_attempts":3,"timeout_ms":1000,"retention_ms":5000,"created_ms":1}}"#;
        assert!(matches!(
            Event::parse(omitted.as_bytes()),
            Some(Event::Finish {
                output: None,
                output_omitted: true,
                record: Some(_),
                ..
            })
        ));
    }

    #[test]
    fn progress_round_trips_exactly() {
        let event = Event::Progress {
            id: "f:1".parse().unwrap(),
            seq: 1,
            done: u64::MAX,
            total: u64::MAX,
            message: None,
        };
        let json = serde_json::to_string(&event).unwrap();
        assert!(json.contains(r#""done":"18446744073709551615""#), "{json}");
        assert_eq!(Event::parse(json.as_bytes()), Some(event));
    }
}
