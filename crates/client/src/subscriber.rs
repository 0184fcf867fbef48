//! One reconnecting pub/sub connection for everything a process listens to.
//!
//! A [`Subscriber`] owns one task and (while anything is subscribed) one Redis connection
//! in subscriber mode. Each part of the program that listens [`open`](Subscriber::open)s a
//! [`Subscription`] and adds the channels and patterns it needs; a channel wanted by several
//! subscriptions is subscribed once, and unsubscribed when the last one lets it go.
//!
//! When the connection drops (Redis restarted, the network cut, a ping unanswered), every
//! subscription gets [`Delivery::Lost`]; the task reconnects with a growing, jittered pause,
//! subscribes everything again and then sends [`Delivery::Resubscribed`]: whatever was
//! published in between was missed, so a listener re-reads the state it follows. Waits
//! ([`Client::wait`](crate::Client::wait)), the event stream ([`Client::events`](crate::Client::events))
//! and a worker's work and cancel notifications all go through it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};

use crate::connection::{CONNECT_TIMEOUT, Endpoint};

/// How often an idle subscriber connection is pinged, to notice a connection that died
/// without closing (a cut network, a host gone) rather than wait for TCP to give up.
const PING_EVERY: Duration = Duration::from_secs(15);

/// The first pause before reconnecting; it doubles (with jitter) up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(50);

/// The longest pause between two reconnection attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// What a subscription listens to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Topic {
    /// One channel, by name (`SUBSCRIBE`).
    Channel(String),
    /// Every channel matching a glob-style pattern (`PSUBSCRIBE`).
    Pattern(String),
}

/// One published message.
#[derive(Clone, Debug)]
pub struct Message {
    /// The channel it was published on.
    pub channel: String,
    /// What was published.
    pub payload: Vec<u8>,
}

/// What a [`Subscription`] receives.
#[derive(Clone, Debug)]
pub enum Delivery {
    /// A message on one of the subscription's topics.
    Message(Message),
    /// The connection dropped, or could not be made when a topic was added: messages are
    /// missed until [`Delivery::Resubscribed`].
    Lost,
    /// Every topic of the subscription is subscribed again after [`Delivery::Lost`]; what
    /// was published in between was missed.
    Resubscribed,
}

/// What a [`Subscription`] asks of the subscriber task.
enum Command {
    Open {
        id: u64,
        deliveries: mpsc::UnboundedSender<Delivery>,
    },
    Subscribe {
        id: u64,
        topic: Topic,
        done: oneshot::Sender<Result<(), String>>,
    },
    Unsubscribe {
        id: u64,
        topic: Topic,
    },
    Close {
        id: u64,
    },
}

/// The handle of one reconnecting pub/sub connection; cheap to clone. Its task ends once
/// every handle and every [`Subscription`] is dropped.
#[derive(Clone)]
pub struct Subscriber {
    commands: mpsc::UnboundedSender<Command>,
    next_id: Arc<AtomicU64>,
    reconnects: Arc<AtomicU64>,
}

impl Subscriber {
    /// Starts the subscriber task for the server of `redis` (in a cluster, any node: a
    /// `PUBLISH` reaches the subscribers of every node; behind sentinels, the primary in
    /// use, subscribed again when it moves). It connects when the first topic is added.
    /// Must be called inside a tokio runtime.
    pub fn new(redis: Endpoint) -> Self {
        let (commands, requests) = mpsc::unbounded_channel();
        let reconnects = Arc::new(AtomicU64::new(0));
        tokio::spawn(run(redis, requests, reconnects.clone()));
        Subscriber {
            commands,
            next_id: Arc::new(AtomicU64::new(0)),
            reconnects,
        }
    }

    /// How often the connection came back after it was lost (a restart of Redis, a cut
    /// network): each time, messages may have been missed.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::Relaxed)
    }

    /// A new subscription, listening to nothing yet.
    pub fn open(&self) -> Subscription {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (deliveries, received) = mpsc::unbounded_channel();
        // The task outlives every handle and subscription, so the send cannot fail while
        // `self` exists; if it did, the subscription would simply receive nothing.
        let _ = self.commands.send(Command::Open { id, deliveries });
        Subscription {
            id,
            commands: self.commands.clone(),
            deliveries: received,
        }
    }
}

/// One listener's share of a [`Subscriber`]: the topics it added, and what arrives on them.
/// Dropping it lets its topics go.
pub struct Subscription {
    id: u64,
    commands: mpsc::UnboundedSender<Command>,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
}

impl Subscription {
    /// Adds `topic`. Returns once Redis confirmed it, so nothing published on it afterwards
    /// is missed. An error means the connection is down: the topic stays added and is
    /// subscribed as soon as the connection is back, which [`Delivery::Resubscribed`] tells.
    pub async fn subscribe(&self, topic: Topic) -> redis::RedisResult<()> {
        let (done, answer) = oneshot::channel();
        let sent = self.commands.send(Command::Subscribe {
            id: self.id,
            topic,
            done,
        });
        let result = match sent {
            Ok(()) => answer.await.unwrap_or_else(|_| Err(ENDED.into())),
            Err(_) => Err(ENDED.into()),
        };
        result.map_err(|reason| {
            redis::RedisError::from((
                redis::ErrorKind::Io,
                "cannot subscribe; will again once Redis answers",
                reason,
            ))
        })
    }

    /// Lets `topic` go (once for each time it was added).
    pub fn unsubscribe(&self, topic: Topic) {
        let _ = self
            .commands
            .send(Command::Unsubscribe { id: self.id, topic });
    }

    /// The next delivery, in the order they happened.
    pub async fn next(&mut self) -> Option<Delivery> {
        self.deliveries.recv().await
    }

    /// The deliveries as a stream.
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Delivery> + Send {
        futures_util::stream::unfold(self, |mut subscription| async move {
            let delivery = subscription.next().await?;
            Some((delivery, subscription))
        })
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Close { id: self.id });
    }
}

const ENDED: &str = "the subscriber task has ended";

/// One subscription as the task sees it.
struct Listener {
    deliveries: mpsc::UnboundedSender<Delivery>,
    /// How many times it added each topic.
    topics: HashMap<Topic, usize>,
    /// Whether it was told [`Delivery::Lost`] and waits for [`Delivery::Resubscribed`].
    missed: bool,
}

/// The live connection.
struct Live {
    sink: PubSubSink,
    stream: PubSubStream,
}

/// The subscriber task's state.
struct State {
    redis: Endpoint,
    listeners: HashMap<u64, Listener>,
    /// Each topic subscribed, and how many additions hold it.
    topics: HashMap<Topic, usize>,
    live: Option<Live>,
    /// When the next reconnection attempt is due.
    retry_at: Instant,
    backoff: backon::ExponentialBackoff,
    /// Why the last attempt failed (said to callers while disconnected).
    last_error: String,
    /// Whether the current outage was logged as a warning already (the attempts after that
    /// are logged at debug level).
    outage_reported: bool,
    /// Whether a connection was ever made (the next one is a reconnection).
    connected_before: bool,
    /// Reconnections so far (see [`Subscriber::reconnects`]).
    reconnects: Arc<AtomicU64>,
}

enum Step {
    Message(Option<redis::Msg>),
    Command(Option<Command>),
    Ping,
    Reconnect,
    Moved,
}

async fn run(
    redis: Endpoint,
    mut commands: mpsc::UnboundedReceiver<Command>,
    reconnects: Arc<AtomicU64>,
) {
    let mut state = State {
        redis,
        listeners: HashMap::new(),
        topics: HashMap::new(),
        live: None,
        retry_at: Instant::now(),
        backoff: new_backoff(),
        last_error: "not connected yet".into(),
        outage_reported: false,
        connected_before: false,
        reconnects,
    };
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Behind sentinels: the primary moved, and the connection to the old one goes.
    let mut moves = state.redis.moves();
    loop {
        let wanted = !state.topics.is_empty();
        let step = match &mut state.live {
            Some(live) => tokio::select! {
                message = live.stream.next() => Step::Message(message),
                command = commands.recv() => Step::Command(command),
                _ = ping.tick() => Step::Ping,
                Ok(()) = async { match &mut moves { Some(moves) => moves.changed().await, None => std::future::pending().await } } => Step::Moved,
            },
            None => tokio::select! {
                _ = tokio::time::sleep_until(state.retry_at), if wanted => Step::Reconnect,
                command = commands.recv() => Step::Command(command),
            },
        };
        match step {
            Step::Message(Some(message)) => state.route(&message),
            Step::Message(None) => state.lost("the connection closed".into()),
            Step::Command(None) => return,
            Step::Command(Some(command)) => state.handle(command).await,
            Step::Ping => {
                if let Some(live) = &mut state.live {
                    let answered = tokio::time::timeout(CONNECT_TIMEOUT, live.sink.ping::<()>());
                    match answered.await {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => state.lost(error.to_string()),
                        Err(_) => {
                            state.lost(format!("no answer to PING within {CONNECT_TIMEOUT:?}"))
                        }
                    }
                }
            }
            Step::Reconnect => {
                if state.reconnect().await {
                    ping.reset();
                }
            }
            Step::Moved => state.lost("the Redis primary moved".into()),
        }
    }
}

fn new_backoff() -> backon::ExponentialBackoff {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(RECONNECT_MIN)
        .with_max_delay(RECONNECT_MAX)
        .with_jitter()
        .without_max_times()
        .build()
}

impl State {
    /// Hands `message` to the listeners of its channel or pattern.
    fn route(&mut self, message: &redis::Msg) {
        let topic = match message.get_pattern::<Option<String>>() {
            Ok(Some(pattern)) => Topic::Pattern(pattern),
            _ => Topic::Channel(message.get_channel_name().to_string()),
        };
        let mut delivery = None;
        for listener in self.listeners.values() {
            if listener.topics.contains_key(&topic) {
                let delivery = delivery.get_or_insert_with(|| {
                    Delivery::Message(Message {
                        channel: message.get_channel_name().to_string(),
                        payload: message.get_payload_bytes().to_vec(),
                    })
                });
                let _ = listener.deliveries.send(delivery.clone());
            }
        }
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::Open { id, deliveries } => {
                self.listeners.insert(
                    id,
                    Listener {
                        deliveries,
                        topics: HashMap::new(),
                        missed: false,
                    },
                );
            }
            Command::Subscribe { id, topic, done } => {
                let Some(listener) = self.listeners.get_mut(&id) else {
                    let _ = done.send(Err(ENDED.into()));
                    return;
                };
                *listener.topics.entry(topic.clone()).or_default() += 1;
                let count = self.topics.entry(topic.clone()).or_default();
                *count += 1;
                let first = *count == 1;
                if self.live.is_none() && Instant::now() >= self.retry_at {
                    // Someone wants a topic now: a good moment to try (this subscribes it).
                    self.reconnect().await;
                } else if first && let Some(live) = &mut self.live {
                    // A topic already subscribed needs no round trip: Redis confirmed it
                    // before, and every message from now on reaches this listener.
                    if let Err(reason) = send(&mut live.sink, &topic, true).await {
                        self.lost(reason);
                    }
                }
                let result = if self.live.is_some() {
                    Ok(())
                } else {
                    if let Some(listener) = self.listeners.get_mut(&id)
                        && !listener.missed
                    {
                        listener.missed = true;
                        let _ = listener.deliveries.send(Delivery::Lost);
                    }
                    Err(self.last_error.clone())
                };
                let _ = done.send(result);
            }
            Command::Unsubscribe { id, topic } => {
                let Some(listener) = self.listeners.get_mut(&id) else {
                    return;
                };
                if let Some(count) = listener.topics.get_mut(&topic) {
                    *count -= 1;
                    if *count == 0 {
                        listener.topics.remove(&topic);
                    }
                    self.release(topic).await;
                }
            }
            Command::Close { id } => {
                if let Some(listener) = self.listeners.remove(&id) {
                    for (topic, count) in listener.topics {
                        for _ in 0..count {
                            self.release(topic.clone()).await;
                        }
                    }
                }
            }
        }
    }

    /// One addition of `topic` is let go; unsubscribes it when it was the last.
    async fn release(&mut self, topic: Topic) {
        let Some(count) = self.topics.get_mut(&topic) else {
            return;
        };
        *count -= 1;
        if *count > 0 {
            return;
        }
        self.topics.remove(&topic);
        if let Some(live) = &mut self.live
            && let Err(reason) = send(&mut live.sink, &topic, false).await
        {
            self.lost(reason);
        }
    }

    /// The connection is gone: tells the listeners and reconnects at once (then with
    /// growing pauses).
    fn lost(&mut self, reason: String) {
        if self.live.take().is_none() {
            return;
        }
        tracing::warn!(%reason, "lost the pub/sub connection to Redis; reconnecting");
        self.outage_reported = true;
        self.last_error = reason;
        self.backoff = new_backoff();
        self.retry_at = Instant::now();
        for listener in self.listeners.values_mut() {
            if !listener.topics.is_empty() && !listener.missed {
                listener.missed = true;
                let _ = listener.deliveries.send(Delivery::Lost);
            }
        }
    }

    /// Connects and subscribes every topic; tells the listeners that missed messages.
    /// Returns whether it worked; if not, schedules the next attempt.
    async fn reconnect(&mut self) -> bool {
        let topics: Vec<Topic> = self.topics.keys().cloned().collect();
        let attempt = async {
            let (mut sink, stream) = self
                .redis
                .pubsub()
                .await
                .map_err(|e| e.to_string())?
                .split();
            for topic in &topics {
                send(&mut sink, topic, true).await?;
            }
            Ok::<_, String>(Live { sink, stream })
        };
        let result = match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
        };
        match result {
            Ok(live) => {
                if self.outage_reported {
                    tracing::info!(topics = topics.len(), "pub/sub connection to Redis is back");
                }
                self.live = Some(live);
                if std::mem::replace(&mut self.connected_before, true) {
                    self.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                self.outage_reported = false;
                self.backoff = new_backoff();
                for listener in self.listeners.values_mut() {
                    if listener.missed {
                        listener.missed = false;
                        let _ = listener.deliveries.send(Delivery::Resubscribed);
                    }
                }
                true
            }
            Err(reason) => {
                if !self.outage_reported {
                    tracing::warn!(%reason, "cannot open a pub/sub connection to Redis; retrying");
                    self.outage_reported = true;
                } else {
                    tracing::debug!(%reason, "pub/sub reconnection failed");
                }
                self.last_error = reason;
                let pause = self.backoff.next().unwrap_or(RECONNECT_MAX);
                self.retry_at = Instant::now() + pause;
                false
            }
        }
    }
}

/// Subscribes (or with `subscribe` false, unsubscribes) `topic` on `sink`, bounded in time.
async fn send(sink: &mut PubSubSink, topic: &Topic, subscribe: bool) -> Result<(), String> {
    let sent = async {
        match (topic, subscribe) {
            (Topic::Channel(channel), true) => sink.subscribe(channel).await,
            (Topic::Pattern(pattern), true) => sink.psubscribe(pattern).await,
            (Topic::Channel(channel), false) => sink.unsubscribe(channel).await,
            (Topic::Pattern(pattern), false) => sink.punsubscribe(pattern).await,
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, sent).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
    }
}
