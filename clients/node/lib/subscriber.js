'use strict';

/**
 * One pub/sub connection per client, shared by all its waits and event streams.
 *
 * A channel (or pattern) is subscribed while anything needs it and unsubscribed when the
 * last user leaves, so a thousand waits on one function's jobs cost one subscription. Each
 * message is parsed once (an event's JSON object, or a JSON array of events) and handed to
 * the waits of the jobs it names, and to the event streams of its channel or pattern.
 *
 * When the connection drops, waits hear `lost` (they poll the record meanwhile); when it is
 * back and every channel and pattern has been subscribed again (confirmed by Redis), they
 * hear `resubscribed` (events may have been missed: they read the record again).
 */

const protocol = require('./protocol');

/** The events of one published message: an object, or an array of objects. */
function parseMessage(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return [];
  }
  const list = Array.isArray(value) ? value : [value];
  return list.filter((e) => e !== null && typeof e === 'object' && typeof e.event === 'string');
}

/** A queue with one reader that may wait on it with a timeout. */
class Mailbox {
  constructor() {
    this.items = [];
    this.reader = null;
    this.closed = false;
  }

  push(item) {
    if (this.closed) return;
    if (this.reader) {
      const { resolve, timer } = this.reader;
      this.reader = null;
      if (timer) clearTimeout(timer);
      resolve(item);
    } else {
      this.items.push(item);
    }
  }

  /** The next item; `null` after `timeoutMs` (if given) or once closed. */
  next(timeoutMs) {
    if (this.items.length > 0) return Promise.resolve(this.items.shift());
    if (this.closed) return Promise.resolve(null);
    return new Promise((resolve) => {
      let timer = null;
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          this.reader = null;
          resolve(null);
        }, Math.max(0, timeoutMs));
      }
      this.reader = { resolve, timer };
    });
  }

  close() {
    this.closed = true;
    this.items = [];
    if (this.reader) {
      const { resolve, timer } = this.reader;
      this.reader = null;
      if (timer) clearTimeout(timer);
      resolve(null);
    }
  }
}

class Subscriber {
  /** @param {() => import('ioredis').Redis} connect makes the pub/sub connection */
  constructor(connect) {
    this.connect = connect;
    this.conn = null;
    /** channel or pattern -> {count, ready: Promise<boolean>} */
    this.topics = { channel: new Map(), pattern: new Map() };
    /** channel -> job id -> Set<Mailbox> */
    this.watches = new Map();
    /** 'channel' | 'pattern' -> name -> Set<Mailbox> */
    this.streams = { channel: new Map(), pattern: new Map() };
    this.hearing = false;
    this.dropped = false;
    this.closed = false;
  }

  /** The connection, made on first use. */
  connection() {
    if (this.conn) return this.conn;
    const conn = this.connect();
    conn.on('error', () => {
      // Connection errors show as lost events and failed subscriptions; nothing to throw.
    });
    conn.on('message', (channel, message) => this.deliver('channel', channel, channel, message));
    conn.on('pmessage', (pattern, channel, message) =>
      this.deliver('pattern', pattern, channel, message),
    );
    conn.on('close', () => {
      this.dropped = true;
      if (!this.hearing) return;
      this.hearing = false;
      this.tellAll({ type: 'lost' });
    });
    conn.on('ready', () => {
      // The first connection subscribes what was asked for meanwhile by itself; after a
      // drop, every topic is subscribed again here.
      if (this.dropped) this.resubscribe();
      else this.hearing = true;
    });
    this.conn = conn;
    return conn;
  }

  /** After a reconnection: subscribes every topic again, then tells the waits. */
  async resubscribe() {
    const conn = this.conn;
    const channels = [...this.topics.channel.keys()];
    const patterns = [...this.topics.pattern.keys()];
    try {
      if (channels.length > 0) await conn.subscribe(...channels);
      if (patterns.length > 0) await conn.psubscribe(...patterns);
    } catch {
      // Lost again meanwhile: the next 'ready' tries again.
      return;
    }
    if (this.conn !== conn || conn.status !== 'ready') return;
    // Those that subscribe from now on need not wait for a subscription that failed before.
    for (const kind of ['channel', 'pattern']) {
      for (const topic of this.topics[kind].values()) topic.ready = Promise.resolve(true);
    }
    this.hearing = true;
    this.tellAll({ type: 'resubscribed' });
  }

  tellAll(item) {
    for (const byJob of this.watches.values()) {
      for (const boxes of byJob.values()) for (const box of boxes) box.push(item);
    }
    for (const kind of ['channel', 'pattern']) {
      for (const boxes of this.streams[kind].values()) for (const box of boxes) box.push(item);
    }
  }

  deliver(kind, topic, channel, message) {
    const streams = this.streams[kind].get(topic);
    const watches = kind === 'channel' ? this.watches.get(channel) : undefined;
    if (!streams && !watches) return;
    const events = parseMessage(message);
    if (streams) {
      const fn = protocol.functionOfChannel(channel);
      for (const event of events) {
        for (const box of streams) box.push({ type: 'event', event: { function: fn, ...event } });
      }
    }
    if (watches) {
      for (const event of events) {
        const boxes = watches.get(event.id);
        if (boxes) for (const box of boxes) box.push({ type: 'event', event });
      }
    }
  }

  /**
   * Subscribes `name` (a channel or pattern) for one more user; resolves `true` once Redis
   * has confirmed the subscription, `false` when it could not be made now (it is made
   * again when the connection is back).
   */
  acquire(kind, name) {
    if (this.closed) return Promise.resolve(false);
    const conn = this.connection();
    const topics = this.topics[kind];
    let topic = topics.get(name);
    if (!topic) {
      const subscribe = kind === 'channel' ? conn.subscribe(name) : conn.psubscribe(name);
      topic = {
        count: 0,
        ready: subscribe.then(
          () => true,
          () => false,
        ),
      };
      topics.set(name, topic);
    }
    topic.count += 1;
    return topic.ready;
  }

  release(kind, name) {
    const topics = this.topics[kind];
    const topic = topics.get(name);
    if (!topic) return;
    topic.count -= 1;
    if (topic.count > 0) return;
    topics.delete(name);
    if (this.closed || !this.conn) return;
    const unsubscribe =
      kind === 'channel' ? this.conn.unsubscribe(name) : this.conn.punsubscribe(name);
    unsubscribe.catch(() => {});
  }

  /**
   * Watches job `id`'s events on `channel`. Returns the mailbox (items `{type: 'event',
   * event}`, `{type: 'lost'}`, `{type: 'resubscribed'}`), a promise of whether the
   * subscription is confirmed, and `close()`.
   */
  watch(channel, id) {
    const box = new Mailbox();
    if (this.closed) box.close();
    let byJob = this.watches.get(channel);
    if (!byJob) {
      byJob = new Map();
      this.watches.set(channel, byJob);
    }
    let boxes = byJob.get(id);
    if (!boxes) {
      boxes = new Set();
      byJob.set(id, boxes);
    }
    boxes.add(box);
    const subscribed = this.acquire('channel', channel);
    let open = true;
    const close = () => {
      if (!open) return;
      open = false;
      box.close();
      boxes.delete(box);
      if (boxes.size === 0) byJob.delete(id);
      if (byJob.size === 0) this.watches.delete(channel);
      this.release('channel', channel);
    };
    return { box, subscribed, close };
  }

  /** Follows every event of `channel` (kind 'channel') or of the channels `pattern` matches. */
  stream(kind, name) {
    const box = new Mailbox();
    if (this.closed) box.close();
    let boxes = this.streams[kind].get(name);
    if (!boxes) {
      boxes = new Set();
      this.streams[kind].set(name, boxes);
    }
    boxes.add(box);
    const subscribed = this.acquire(kind, name);
    let open = true;
    const close = () => {
      if (!open) return;
      open = false;
      box.close();
      boxes.delete(box);
      if (boxes.size === 0) this.streams[kind].delete(name);
      this.release(kind, name);
    };
    return { box, subscribed, close };
  }

  /** Ends every wait and stream, and closes the connection. */
  async close() {
    this.closed = true;
    for (const byJob of this.watches.values()) {
      for (const boxes of byJob.values()) for (const box of boxes) box.close();
    }
    for (const kind of ['channel', 'pattern']) {
      for (const boxes of this.streams[kind].values()) for (const box of boxes) box.close();
    }
    const conn = this.conn;
    this.conn = null;
    if (conn) {
      try {
        await conn.quit();
      } catch {
        // Closed anyway below.
      }
      // Ends what QUIT leaves: a reconnection under way, the failover detector's sentinel
      // connections.
      conn.disconnect();
    }
  }
}

module.exports = { Subscriber, Mailbox, parseMessage };
