//! The waits of one [`Client`](super::Client), sharing one [`Subscription`].
//!
//! A wait registers the job it waits for; the events channel of the job's function is
//! subscribed while any wait needs it, and one task hands each event to the waits of its
//! job. So a wait costs a `SUBSCRIBE` round trip at most, on the client's one reconnecting
//! pub/sub connection ([`Subscriber`]), and many waits share it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};

use wasmgear_proto::{Event, JobId};

use crate::subscriber::{Delivery, Subscriber, Subscription, Topic};

/// What a wait hears.
pub(crate) enum Seen {
    /// An event of its job.
    Event(Event),
    /// The subscription was lost: events are missed until [`Seen::Resubscribed`].
    Lost,
    /// The subscription was lost and is back: events may have been missed.
    Resubscribed,
}

/// What a wait asks of the routing task.
enum Command {
    /// Route the events of job `id` on `channel` to `events`; answer on `subscribed` once
    /// Redis has confirmed the subscription, so that nothing published afterwards is missed.
    Add {
        channel: String,
        id: JobId,
        key: u64,
        events: mpsc::UnboundedSender<Seen>,
        subscribed: oneshot::Sender<redis::RedisResult<()>>,
    },
    /// The wait `key` is over.
    Remove {
        channel: String,
        id: JobId,
        key: u64,
    },
}

/// The waits of one client.
pub(crate) struct Watches {
    commands: mpsc::UnboundedSender<Command>,
    next_key: AtomicU64,
}

/// One wait's registration: what concerns its job arrives on `events` until it is dropped.
pub(crate) struct Watch {
    pub events: mpsc::UnboundedReceiver<Seen>,
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

impl Watches {
    /// Starts the routing task over a subscription of `subscriber`.
    pub fn new(subscriber: &Subscriber) -> Self {
        let (commands, requests) = mpsc::unbounded_channel();
        tokio::spawn(route(subscriber.open(), requests));
        Watches {
            commands,
            next_key: AtomicU64::new(0),
        }
    }

    /// Subscribes to `channel` (if no other wait has) and routes the events of job `id`
    /// to the returned [`Watch`]. The error says the subscription is not in place yet (Redis
    /// is unreachable); the watch then hears [`Seen::Resubscribed`] once it is.
    pub async fn watch(&self, channel: String, id: JobId) -> (Watch, redis::RedisResult<()>) {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        let (events, received) = mpsc::unbounded_channel();
        let (subscribed, confirmed) = oneshot::channel();
        let _ = self.commands.send(Command::Add {
            channel: channel.clone(),
            id: id.clone(),
            key,
            events,
            subscribed,
        });
        let watch = Watch {
            events: received,
            commands: self.commands.clone(),
            channel,
            id,
            key,
        };
        let confirmed = confirmed.await.unwrap_or_else(|_| {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "the wait routing task has ended",
            )))
        });
        (watch, confirmed)
    }
}

/// The routing task: adds the channels some wait needs to the subscription and hands each
/// event to the waits of its job. Ends when the client is gone.
async fn route(mut subscription: Subscription, mut commands: mpsc::UnboundedReceiver<Command>) {
    let mut routes: HashMap<JobId, Vec<(u64, mpsc::UnboundedSender<Seen>)>> = HashMap::new();
    loop {
        tokio::select! {
            delivery = subscription.next() => match delivery {
                None => return,
                Some(Delivery::Message(message)) => {
                    for (event, _) in Event::parse_message(&message.payload) {
                        if let Some(waits) = event.job().and_then(|id| routes.get_mut(id)) {
                            waits.retain(|(_, events)| events.send(Seen::Event(event.clone())).is_ok());
                        }
                    }
                }
                Some(Delivery::Lost) => tell_all(&mut routes, || Seen::Lost),
                Some(Delivery::Resubscribed) => tell_all(&mut routes, || Seen::Resubscribed),
            },
            command = commands.recv() => match command {
                None => return,
                Some(Command::Add { channel, id, key, events, subscribed }) => {
                    routes.entry(id).or_default().push((key, events));
                    let _ = subscribed.send(subscription.subscribe(Topic::Channel(channel)).await);
                }
                Some(Command::Remove { channel, id, key }) => {
                    if let Some(waits) = routes.get_mut(&id) {
                        waits.retain(|(k, _)| *k != key);
                        if waits.is_empty() {
                            routes.remove(&id);
                        }
                    }
                    subscription.unsubscribe(Topic::Channel(channel));
                }
            },
        }
    }
}

/// Tells every wait what `seen` makes.
fn tell_all(
    routes: &mut HashMap<JobId, Vec<(u64, mpsc::UnboundedSender<Seen>)>>,
    seen: impl Fn() -> Seen,
) {
    for waits in routes.values_mut() {
        waits.retain(|(_, events)| events.send(seen()).is_ok());
    }
}
