//! A wait hears its job's end with the job: `watch` marks the job as waited on, and its
//! `finish` event then carries the record `get` answers and, when small printable text, the
//! output, so the waiting client needs no read after the event.

use std::time::Duration;

use wasmgear_client::connection::Endpoint;
use wasmgear_client::subscriber::{Delivery, Subscriber, Subscription, Topic};
use wasmgear_client::{Client, EnqueueOptions, FunctionName, JobId, JobState, JobStatus};
use wasmgear_proto::Event;
use wasmgear_proto::keys::FunctionKeys;
use wasmgear_proto::limits::MAX_EVENT_OUTPUT;

use wasmgear_testkit::{TestRedis, TestWorker, eventually, function};

const BOUND: Duration = Duration::from_secs(30);

/// Whether job `id`'s stored record carries the watch mark (which `get` leaves out).
async fn marked(redis: &TestRedis, id: &JobId) -> bool {
    let raw: Option<String> = redis::cmd("HGET")
        .arg(FunctionKeys::new(&id.function).jobs())
        .arg(id.seq)
        .query_async(&mut redis.raw().await)
        .await
        .unwrap();
    raw.is_some_and(|raw| raw.contains("\"watched\""))
}

/// A subscription of its own to `function`'s events (the subscriber lives as long).
async fn events_of(redis: &TestRedis, function: &FunctionName) -> (Subscriber, Subscription) {
    let subscriber = Subscriber::new(Endpoint::Direct(Box::new(
        redis::Client::open(redis.url()).unwrap(),
    )));
    let subscription = subscriber.open();
    subscription
        .subscribe(Topic::Channel(FunctionKeys::new(function).events()))
        .await
        .unwrap();
    (subscriber, subscription)
}

/// Waits on each of `ids` in a task of its own, once each wait has marked its job.
async fn start_waits(
    redis: &TestRedis,
    client: &Client,
    ids: &[JobId],
) -> Vec<tokio::task::JoinHandle<wasmgear_client::Result<JobStatus>>> {
    let waits = ids
        .iter()
        .map(|id| {
            let client = client.clone();
            let id = id.clone();
            tokio::spawn(async move { client.wait(&id, Some(BOUND), |_| {}).await })
        })
        .collect();
    for id in ids {
        eventually(BOUND, "the waits mark their jobs", || async {
            marked(redis, id).await.then_some(())
        })
        .await;
    }
    waits
}

/// The finish events published on `function`'s channel until one has come for each of
/// `ids`, by job.
async fn finishes(subscription: &mut Subscription, ids: &[JobId]) -> Vec<(JobId, Event)> {
    let mut found: Vec<(JobId, Event)> = Vec::new();
    while !ids.iter().all(|id| found.iter().any(|(f, _)| f == id)) {
        let delivery = tokio::time::timeout(BOUND, subscription.next())
            .await
            .expect("an event within the bound")
            .expect("the subscriber is alive");
        if let Delivery::Message(message) = delivery {
            for (event, _) in Event::parse_message(&message.payload) {
                if let Event::Finish { id, .. } = &event
                    && ids.contains(id)
                {
                    found.push((id.clone(), event));
                }
            }
        }
    }
    found
}

fn event_of<'a>(events: &'a [(JobId, Event)], id: &JobId) -> &'a Event {
    &events.iter().find(|(f, _)| f == id).unwrap().1
}

/// Waited jobs' finish events carry the record as `get` answers it and a small text output;
/// a large or binary output is left out (`output_omitted`) and the wait reads it; a job no
/// one waits on has the plain event. Each wait returns exactly what `status` reads after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waited_jobs_end_comes_with_its_record_and_small_output() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let echo = function("echo");
    let (_subscriber, mut raw) = events_of(&redis, &echo).await;

    let small = b"{\"words\": 3}\n\tdone".to_vec();
    let large = vec![b'a'; MAX_EVENT_OUTPUT as usize + 1];
    let binary = vec![0u8, 159, 146, 150, 10];
    let inputs = [
        small.clone(),
        large.clone(),
        binary.clone(),
        b"alone".to_vec(),
    ];
    let mut ids = Vec::new();
    for input in &inputs {
        ids.push(
            client
                .enqueue(&echo, input, &EnqueueOptions::default())
                .await
                .unwrap(),
        );
    }
    // Three are waited on (and marked so before any worker runs); the fourth is not.
    let waits = start_waits(&redis, &client, &ids[..3]).await;
    assert!(!marked(&redis, &ids[3]).await);
    let marked_status = client.status(&ids[0]).await.unwrap();
    assert_eq!(
        marked_status.record.state,
        JobState::Queued,
        "get leaves the mark out"
    );

    let worker = TestWorker::start(&redis, &["echo"]).await;
    let events = finishes(&mut raw, &ids).await;
    let mut waited: Vec<JobStatus> = Vec::new();
    for wait in waits {
        waited.push(wait.await.unwrap().unwrap());
    }
    for (id, status) in ids.iter().zip(&waited) {
        let read = client.status(id).await.unwrap();
        assert_eq!(status, &read, "{id}: the wait answers what get reads");
        assert_eq!(read.record.state, JobState::Succeeded);
    }
    assert_eq!(waited[0].output.as_deref(), Some(&small[..]));
    assert_eq!(waited[1].output.as_deref(), Some(&large[..]));
    assert_eq!(waited[2].output.as_deref(), Some(&binary[..]));

    match event_of(&events, &ids[0]) {
        Event::Finish {
            state: JobState::Succeeded,
            record: Some(record),
            output: Some(output),
            output_omitted: false,
            ..
        } => {
            assert_eq!(output.as_bytes(), &small[..]);
            assert_eq!(**record, waited[0].record, "the event's record is get's");
        }
        other => panic!("small output: {other:?}"),
    }
    for (id, what) in [(&ids[1], "large"), (&ids[2], "binary")] {
        match event_of(&events, id) {
            Event::Finish {
                record: Some(_),
                output: None,
                output_omitted: true,
                ..
            } => {}
            other => panic!("{what} output: {other:?}"),
        }
    }
    match event_of(&events, &ids[3]) {
        Event::Finish {
            record: None,
            output: None,
            output_omitted: false,
            ..
        } => {}
        other => panic!("a job no one waits on: {other:?}"),
    }
    worker.stop().await;
}

/// A waited job that fails, and one cancelled while queued: their events carry the final
/// record (the error, the history), and no output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waited_failure_or_cancel_comes_with_its_record() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let fail = function("fail");
    let (_subscriber, mut raw) = events_of(&redis, &fail).await;
    let one_attempt = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    let failing = client.enqueue(&fail, b"x", &one_attempt).await.unwrap();
    let cancelled = client.enqueue(&fail, b"y", &one_attempt).await.unwrap();
    let waits = start_waits(&redis, &client, &[failing.clone(), cancelled.clone()]).await;
    client.cancel(&cancelled).await.unwrap();
    let worker = TestWorker::start(&redis, &["fail"]).await;
    let ids = [failing.clone(), cancelled.clone()];
    let events = finishes(&mut raw, &ids).await;
    for (id, wait) in ids.iter().zip(waits) {
        let status = wait.await.unwrap().unwrap();
        assert_eq!(status, client.status(id).await.unwrap(), "{id}");
        match event_of(&events, id) {
            Event::Finish {
                state,
                record: Some(record),
                output: None,
                output_omitted: false,
                ..
            } => {
                assert_eq!(*state, status.record.state);
                assert_eq!(**record, status.record);
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    let failed = client.status(&failing).await.unwrap();
    assert_eq!(failed.record.state, JobState::Failed);
    assert!(failed.record.error.is_some() && !failed.record.history.is_empty());
    assert_eq!(
        client.status(&cancelled).await.unwrap().record.state,
        JobState::Cancelled
    );
    worker.stop().await;
}
