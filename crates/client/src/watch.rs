//! One subscription per [`Client`](super::Client) for all its waits.
//!
//! A wait registers the job it waits for; the events channel of the job's function is
//! subscribed while any wait needs it, and one task hands each event to the waits of its
//! job. So a wait costs a `SUBSCRIBE` round trip on a connection that is already open,
//! not a new connection, and many waits share one connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{mpsc, oneshot};

use wasmgear_proto::{Event, JobId};

use super::Result;

/// What a wait asks of the subscription task.
enum Command {
    /// Route the events of job `id` on `channel` to `events`; answer on `subscribed` once
    /// Redis has confirmed the subscription, so that nothing published afterwards is missed.
    Add {
        channel: String,
        id: JobId,
        key: u64,
        events: mpsc::UnboundedSender<Event>,
        subscribed: oneshot::Sender<redis::RedisResult<()>>,
    },
    /// The wait `key` is over.
    Remove {
        channel: String,
        id: JobId,
        key: u64,
    },
}

/// The shared subscription of one client; connected on the first wait, and again after
/// its connection dropped.
pub(crate) struct Subscriptions {
    redis: redis::Client,
    task: tokio::sync::Mutex<Option<mpsc::UnboundedSender<Command>>>,
    next_key: AtomicU64,
}

/// One wait's registration: its events arrive on `events` until it is dropped. `events`
/// ends if the subscription connection drops (the wait then polls).
pub(crate) struct Watch {
    pub events: mpsc::UnboundedReceiver<Event>,
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
    id: JobId,
    key: u64,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Remove {
            channel: std::mem::take(&mut self.channel),
            id: self.id.clone(),
            key: self.key,
        });
    }
}

impl Subscriptions {
    pub fn new(redis: redis::Client) -> Self {
        Subscriptions {
            redis,
            task: tokio::sync::Mutex::new(None),
            next_key: AtomicU64::new(0),
        }
    }

    /// Subscribes to `channel` (if no other wait has) and routes the events of job `id`
    /// to the returned [`Watch`]. Returns once Redis confirmed the subscription.
    pub async fn watch(&self, channel: String, id: JobId) -> Result<Watch> {
        let commands = {
            let mut task = self.task.lock().await;
            match &*task {
                Some(commands) if !commands.is_closed() => commands.clone(),
                _ => {
                    let (sink, stream) = self.redis.get_async_pubsub().await?.split();
                    let (commands, requests) = mpsc::unbounded_channel();
                    tokio::spawn(route(sink, stream, requests));
                    *task = Some(commands.clone());
                    commands
                }
            }
        };
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let (events, received) = mpsc::unbounded_channel();
        let (subscribed, confirmed) = oneshot::channel();
        let gone = || {
            redis::RedisError::from((redis::ErrorKind::Io, "the subscription connection closed"))
        };
        commands
            .send(Command::Add {
                channel: channel.clone(),
                id: id.clone(),
                key,
                events,
                subscribed,
            })
            .map_err(|_| gone())?;
        let watch = Watch {
            events: received,
            commands,
            channel,
            id,
            key,
        };
        confirmed.await.map_err(|_| gone())??;
        Ok(watch)
    }
}

/// The subscription task: keeps the channels subscribed that some wait needs, and hands
/// each event to the waits of its job. Ends when the connection drops or the client is
/// gone; the waits' event streams end with it.
async fn route(
    mut sink: PubSubSink,
    mut stream: PubSubStream,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut channels: HashMap<String, usize> = HashMap::new();
    let mut routes: HashMap<JobId, Vec<(u64, mpsc::UnboundedSender<Event>)>> = HashMap::new();
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else { return };
                let Some(event) = Event::parse(message.get_payload_bytes()) else {
                    continue;
                };
                if let Some(waits) = event.job().and_then(|id| routes.get_mut(id)) {
                    waits.retain(|(_, events)| events.send(event.clone()).is_ok());
                }
            }
            command = commands.recv() => match command {
                None => return,
                Some(Command::Add { channel, id, key, events, subscribed }) => {
                    *channels.entry(channel.clone()).or_default() += 1;
                    routes.entry(id).or_default().push((key, events));
                    // Subscribing again to a subscribed channel changes nothing, but its
                    // answer tells this wait that the subscription is in place.
                    let _ = subscribed.send(sink.subscribe(&channel).await);
                }
                Some(Command::Remove { channel, id, key }) => {
                    if let Some(waits) = routes.get_mut(&id) {
                        waits.retain(|(k, _)| *k != key);
                        if waits.is_empty() {
                            routes.remove(&id);
                        }
                    }
                    if let Some(count) = channels.get_mut(&channel) {
                        *count -= 1;
                        if *count == 0 {
                            channels.remove(&channel);
                            let _ = sink.unsubscribe(&channel).await;
                        }
                    }
                }
            },
        }
    }
}
