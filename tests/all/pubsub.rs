//! The one reconnecting pub/sub layer (`wasmgear_client::subscriber`) and its users (waits,
//! the event stream, a worker's wake-ups) while redis-server is killed and started again
//! under them.

use std::time::Duration;

use futures_util::StreamExt;
use wasmgear_client::connection::Endpoint;
use wasmgear_client::subscriber::{Delivery, Subscriber, Subscription, Topic};
use wasmgear_client::{EnqueueOptions, JobState};
use wasmgear_proto::Event;
use wasmgear_proto::keys::FunctionKeys;

use wasmgear_testkit::{TestRedis, TestWorker, TestWorkerOptions, eventually, function};

const BOUND: Duration = Duration::from_secs(30);

/// The next delivery, failing the test if none comes within [`BOUND`].
async fn next(subscription: &mut Subscription) -> Delivery {
    tokio::time::timeout(BOUND, subscription.next())
        .await
        .expect("a delivery within the bound")
        .expect("the subscriber is alive")
}

/// The next delivery must be a message on `channel` with `payload`.
async fn expect_message(subscription: &mut Subscription, channel: &str, payload: &str) {
    match next(subscription).await {
        Delivery::Message(message) => {
            assert_eq!(message.channel, channel);
            assert_eq!(message.payload, payload.as_bytes());
        }
        other => panic!("expected a message on {channel}, got {other:?}"),
    }
}

/// How many subscribers the server counts on `channel` (`PUBSUB NUMSUB`), and how many
/// patterns are subscribed (`PUBSUB NUMPAT`).
async fn counts(redis: &TestRedis, channel: &str) -> Option<(u64, u64)> {
    let mut conn = redis.raw_try().await?;
    let (_, numsub): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async::<(String, u64)>(&mut conn)
        .await
        .ok()?;
    let numpat: u64 = redis::cmd("PUBSUB")
        .arg("NUMPAT")
        .query_async(&mut conn)
        .await
        .ok()?;
    Some((numsub, numpat))
}

async fn publish(redis: &TestRedis, channel: &str, payload: &str) {
    let mut conn = redis.raw().await;
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel)
        .arg(payload)
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// Channels and patterns are shared by subscriptions (one connection, refcounted), are
/// let go by the last holder, and come back by themselves after redis-server is killed
/// and started again: every subscription hears `Lost`, then `Resubscribed`, then messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscriber_resubscribes_after_a_redis_restart() {
    let redis = TestRedis::start();
    let subscriber = Subscriber::new(Endpoint::Direct(Box::new(
        redis::Client::open(redis.url()).unwrap(),
    )));
    let mut one = subscriber.open();
    let mut two = subscriber.open();
    one.subscribe(Topic::Channel("a".into())).await.unwrap();
    two.subscribe(Topic::Channel("a".into())).await.unwrap();
    two.subscribe(Topic::Pattern("b.*".into())).await.unwrap();
    // One connection holds both subscriptions' channel.
    assert_eq!(counts(&redis, "a").await, Some((1, 1)));

    publish(&redis, "a", "first").await;
    publish(&redis, "b.x", "second").await;
    expect_message(&mut one, "a", "first").await;
    expect_message(&mut two, "a", "first").await;
    expect_message(&mut two, "b.x", "second").await;

    redis.kill();
    assert!(matches!(next(&mut one).await, Delivery::Lost));
    assert!(matches!(next(&mut two).await, Delivery::Lost));
    tokio::task::block_in_place(|| redis.restart());
    assert!(matches!(next(&mut one).await, Delivery::Resubscribed));
    assert!(matches!(next(&mut two).await, Delivery::Resubscribed));
    assert_eq!(counts(&redis, "a").await, Some((1, 1)));
    publish(&redis, "a", "after").await;
    publish(&redis, "b.y", "again").await;
    expect_message(&mut one, "a", "after").await;
    expect_message(&mut two, "a", "after").await;
    expect_message(&mut two, "b.y", "again").await;

    // The channel stays while one holder is left, and goes with the last.
    drop(one);
    two.unsubscribe(Topic::Pattern("b.*".into()));
    eventually(BOUND, "the pattern let go", || async {
        (counts(&redis, "a").await == Some((1, 0))).then_some(())
    })
    .await;
    two.unsubscribe(Topic::Channel("a".into()));
    eventually(BOUND, "the channel let go", || async {
        (counts(&redis, "a").await == Some((0, 0))).then_some(())
    })
    .await;
    publish(&redis, "a", "unheard").await;
    two.subscribe(Topic::Channel("c".into())).await.unwrap();
    publish(&redis, "c", "heard").await;
    expect_message(&mut two, "c", "heard").await;
}

/// Adding a topic while Redis is down says so, and the topic is subscribed once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_added_while_redis_is_down_is_subscribed_when_it_is_back() {
    let redis = TestRedis::start();
    let subscriber = Subscriber::new(Endpoint::Direct(Box::new(
        redis::Client::open(redis.url()).unwrap(),
    )));
    let mut subscription = subscriber.open();
    redis.kill();
    let error = subscription
        .subscribe(Topic::Channel("late".into()))
        .await
        .expect_err("Redis is down");
    assert!(error.to_string().contains("cannot subscribe"), "{error}");
    assert!(matches!(next(&mut subscription).await, Delivery::Lost));
    tokio::task::block_in_place(|| redis.restart());
    assert!(matches!(
        next(&mut subscription).await,
        Delivery::Resubscribed
    ));
    publish(&redis, "late", "news").await;
    expect_message(&mut subscription, "late", "news").await;
}

/// `Client::events` goes on after a restart of Redis: a job created afterwards shows up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_goes_on_after_a_redis_restart() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let mut events = Box::pin(client.events(None).await.unwrap());
    redis.kill();
    tokio::task::block_in_place(|| redis.restart());
    // The stream is listening again once the server counts its pattern.
    eventually(BOUND, "the events pattern subscribed again", || async {
        (counts(&redis, "-")
            .await
            .is_some_and(|(_, numpat)| numpat == 1))
        .then_some(())
    })
    .await;
    let id = client
        .enqueue(&function("echo"), b"x", &EnqueueOptions::default())
        .await
        .unwrap();
    let seen = tokio::time::timeout(BOUND, events.next())
        .await
        .expect("an event within the bound")
        .expect("the stream goes on");
    assert_eq!(seen.function, function("echo"));
    assert!(
        matches!(&seen.event, Event::Create { id: created, .. } if *created == id),
        "{seen:?}"
    );
}

/// A worker whose safety poll is an hour still hears of new work after a restart of Redis:
/// only its resubscribed work channel can wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_hears_new_work_after_a_redis_restart() {
    let redis = TestRedis::start();
    let mut options = TestWorkerOptions::default();
    options.config.idle_poll = Duration::from_secs(3600);
    let worker = TestWorker::start_with(&redis, &["echo"], options).await;
    let client = redis.client().await;
    let work = FunctionKeys::new(&function("echo")).work();
    // The worker is idle and listening before Redis goes away.
    let id = client
        .enqueue(&function("echo"), b"before", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, Some(BOUND), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);

    redis.kill();
    tokio::task::block_in_place(|| redis.restart());
    eventually(BOUND, "the work channel subscribed again", || async {
        (counts(&redis, &work)
            .await
            .is_some_and(|(numsub, _)| numsub == 1))
        .then_some(())
    })
    .await;
    let id = client
        .enqueue(&function("echo"), b"after", &EnqueueOptions::default())
        .await
        .unwrap();
    let status = client.wait(&id, Some(BOUND), |_| {}).await.unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&b"after"[..]));
    worker.stop().await;
}

/// A wait outlasts a restart of Redis (kept in its append-only file): it neither fails
/// while the server is down nor misses the end that comes after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_outlasts_a_redis_restart() {
    let redis = TestRedis::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = redis.client().await;
    let id = client
        .enqueue(&function("echo"), b"patient", &EnqueueOptions::default())
        .await
        .unwrap();
    let events = FunctionKeys::new(&function("echo")).events();
    let waiting = {
        let (client, id) = (client.clone(), id.clone());
        tokio::spawn(async move { client.wait(&id, Some(BOUND), |_| {}).await })
    };
    eventually(BOUND, "the wait subscribed", || async {
        (counts(&redis, &events)
            .await
            .is_some_and(|(numsub, _)| numsub == 1))
        .then_some(())
    })
    .await;
    redis.kill();
    // The wait re-reads the job twice a second while it hears nothing: still waiting after
    // four such rounds, it did not give up on the first unanswered read.
    let mut waiting = waiting;
    assert!(
        tokio::time::timeout(Duration::from_secs(2), &mut waiting)
            .await
            .is_err(),
        "the wait ended while Redis was down"
    );
    tokio::task::block_in_place(|| redis.restart());
    let worker = TestWorker::start(&redis, &["echo"]).await;
    let status = waiting.await.unwrap().unwrap();
    assert_eq!(status.record.state, JobState::Succeeded);
    assert_eq!(status.output.as_deref(), Some(&b"patient"[..]));
    worker.stop().await;
}

/// A call that creates, starts or finishes many jobs publishes their events together, in
/// order, at most 1000 to a message; waits and the event stream read each of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_of_one_call_come_together_and_each_is_read() {
    let redis = TestRedis::start();
    let client = redis.client().await;
    let echo = function("echo");
    let channel = FunctionKeys::new(&echo).events();
    let subscriber = Subscriber::new(Endpoint::Direct(Box::new(
        redis::Client::open(redis.url()).unwrap(),
    )));
    let mut raw = subscriber.open();
    raw.subscribe(Topic::Channel(channel.clone()))
        .await
        .unwrap();
    let mut stream = Box::pin(client.events(Some(&echo)).await.unwrap());

    let jobs = 2500;
    let batch: Vec<(&[u8], EnqueueOptions)> = (0..jobs)
        .map(|_| (&b"x"[..], EnqueueOptions::default()))
        .collect();
    let ids = client.enqueue_many(&echo, &batch).await.unwrap();
    let mut sizes = Vec::new();
    let mut created = Vec::new();
    while created.len() < jobs {
        match next(&mut raw).await {
            Delivery::Message(message) => {
                let events = Event::parse_message(&message.payload);
                sizes.push(events.len());
                created.extend(events.into_iter().map(|(event, _)| match event {
                    Event::Create { id } => id,
                    other => panic!("expected create events, got {other:?}"),
                }));
            }
            other => panic!("expected a message, got {other:?}"),
        }
    }
    assert_eq!(sizes, [1000, 1000, 500], "events per message");
    assert_eq!(created, ids, "one create event per job, in order");
    for id in &ids {
        let event = tokio::time::timeout(BOUND, stream.next())
            .await
            .expect("an event within the bound")
            .expect("the stream goes on");
        assert_eq!(event.event, Event::Create { id: id.clone() });
        assert_eq!(event.json, format!(r#"{{"event":"create","id":"{id}"}}"#));
    }

    // A worker finishing and starting jobs several at a time: every wait hears its job's end.
    let mut options = TestWorkerOptions::default();
    options.config.concurrency = 8;
    let worker = TestWorker::start_with(&redis, &["echo"], options).await;
    let waits = ids.iter().map(|id| client.wait(id, Some(BOUND), |_| {}));
    for status in futures_util::future::join_all(waits).await {
        assert_eq!(status.unwrap().record.state, JobState::Succeeded);
    }
    worker.stop().await;
}
