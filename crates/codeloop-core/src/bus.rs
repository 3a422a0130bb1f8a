//! The event bus: every state change a watcher may care about, with a strictly increasing id.
//!
//! Owns: id assignment, fan-out to live subscribers, and a bounded replay buffer so a client that
//! reconnects with `Last-Event-ID` gets exactly what it missed. A relayed bus (many workers on one
//! PostgreSQL store, DESIGN.md §5b) hands what is published to the store and fans out what the store
//! delivers: every worker's events, with the store's ids.
//! Must not: block a publisher. A slow subscriber lags (tokio broadcast drops its oldest events and tells
//! it so); memory stays bounded by the channel and replay capacities.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use codeloop_types::LockExt;
use codeloop_types::{Event, EventPayload};
use tokio::sync::broadcast;

/// Events kept for replay after a reconnect.
pub const DEFAULT_REPLAY_CAPACITY: usize = 10_000;

/// Bytes of events kept for replay, whatever their count: ten thousand finished tool parts would
/// otherwise hold hundreds of megabytes in a server that runs for weeks.
pub const DEFAULT_REPLAY_BYTES: usize = 16 * 1024 * 1024;
/// Events a live subscriber may fall behind before it lags.
pub const DEFAULT_CHANNEL_CAPACITY: usize = 4_096;

#[derive(Clone)]
pub struct Bus {
    inner: Arc<Inner>,
}

struct Inner {
    sender: broadcast::Sender<Arc<Event>>,
    state: Mutex<ReplayState>,
    replay_capacity: usize,
    /// Set on a relayed bus: where published payloads go to get their ids.
    relay: Option<Relay>,
    /// On a relayed bus, the events this process published (id 0), before they went to the log: what
    /// telemetry counts, so that each worker reports its own runs and no run twice.
    local: Option<broadcast::Sender<Arc<Event>>>,
}

/// Takes a payload published on a relayed bus (to the store's event log).
pub type Relay = Box<dyn Fn(EventPayload) + Send + Sync>;

struct ReplayState {
    next_id: u64,
    /// Each event with its size as the replay buffer counts it.
    buffer: VecDeque<(Arc<Event>, usize)>,
    bytes: usize,
}

/// About what an event takes in memory: the streamed text of a delta (the frequent, cheap case),
/// else its JSON's length.
fn replay_size(payload: &EventPayload) -> usize {
    const OVERHEAD: usize = 128;
    match payload {
        EventPayload::PartDelta { delta, .. } => OVERHEAD + delta.len(),
        other => {
            let mut counter = ByteCounter(0);
            let _ = serde_json::to_writer(&mut counter, other);
            OVERHEAD + counter.0
        }
    }
}

/// An `io::Write` that only counts.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a reconnecting client gets.
#[derive(Debug)]
pub enum Replay {
    /// Every event after the requested id, in order (possibly none).
    Events(Vec<Arc<Event>>),
    /// The client is further behind than the buffer, which holds only `held` (every event from id
    /// `held_from` on). What came between is gone from memory: a shared store's event log may still
    /// have it ([`crate::Engine::subscribe_after`]); otherwise the client must refetch state.
    TooFarBehind { held_from: u64, held: Vec<Arc<Event>> },
}

impl Default for Bus {
    fn default() -> Self {
        Self::new(DEFAULT_CHANNEL_CAPACITY, DEFAULT_REPLAY_CAPACITY)
    }
}

impl Bus {
    pub fn new(channel_capacity: usize, replay_capacity: usize) -> Self {
        Self::build(channel_capacity, replay_capacity, None)
    }

    /// A bus whose ids come from elsewhere: [`Bus::publish`] hands each payload to `relay`, and events
    /// reach subscribers only through [`Bus::deliver`], with the ids given there.
    pub fn relayed(channel_capacity: usize, replay_capacity: usize, relay: Relay) -> Self {
        Self::build(channel_capacity, replay_capacity, Some(relay))
    }

    fn build(channel_capacity: usize, replay_capacity: usize, relay: Option<Relay>) -> Self {
        let (sender, _) = broadcast::channel(channel_capacity.max(1));
        let local = relay.is_some().then(|| broadcast::channel(channel_capacity.max(1)).0);
        Self {
            inner: Arc::new(Inner {
                sender,
                state: Mutex::new(ReplayState { next_id: 1, buffer: VecDeque::new(), bytes: 0 }),
                replay_capacity,
                relay,
                local,
            }),
        }
    }

    /// Assigns the next id and delivers the event. Never waits for subscribers. On a relayed bus it hands
    /// the payload on and returns 0: the store assigns the id, and [`Bus::deliver`] fans it out.
    pub fn publish(&self, payload: EventPayload) -> u64 {
        if let Some(relay) = &self.inner.relay {
            if let Some(local) = self.inner.local.as_ref().filter(|local| local.receiver_count() > 0) {
                let _ = local.send(Arc::new(Event { id: 0, payload: payload.clone() }));
            }
            relay(payload);
            return 0;
        }
        let mut state = self.inner.state.locked();
        let id = state.next_id;
        state.next_id += 1;
        self.fan_out(&mut state, Event { id, payload });
        id
    }

    /// Fans out an event whose id was assigned elsewhere (a relayed bus). Ids must increase: one that
    /// does not (delivered twice) is dropped. Gaps are fine.
    pub fn deliver(&self, id: u64, payload: EventPayload) {
        let mut state = self.inner.state.locked();
        if id < state.next_id {
            return;
        }
        state.next_id = id + 1;
        self.fan_out(&mut state, Event { id, payload });
    }

    fn fan_out(&self, state: &mut ReplayState, event: Event) {
        let event = Arc::new(event);
        if self.inner.replay_capacity > 0 {
            let size = replay_size(&event.payload);
            while state.buffer.len() >= self.inner.replay_capacity
                || (!state.buffer.is_empty() && state.bytes + size > DEFAULT_REPLAY_BYTES)
            {
                if let Some((_, dropped)) = state.buffer.pop_front() {
                    state.bytes -= dropped;
                }
            }
            state.bytes += size;
            state.buffer.push_back((event.clone(), size));
        }
        // Sending under the lock keeps channel order equal to id order. No receivers is fine.
        let _ = self.inner.sender.send(event);
    }

    /// A live subscription starting with the next published event.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.inner.sender.subscribe()
    }

    /// The events this process publishes, in order: on a relayed bus (workers sharing a store's event
    /// log) the other workers' events are not among them, and ids are 0. Otherwise the same as
    /// [`Bus::subscribe`].
    pub fn subscribe_local(&self) -> broadcast::Receiver<Arc<Event>> {
        match &self.inner.local {
            Some(local) => local.subscribe(),
            None => self.inner.sender.subscribe(),
        }
    }

    /// Subscribes and returns, atomically, the events after `last_id` from the replay buffer: no gap and
    /// no duplicate between the replay and the live receiver.
    pub fn subscribe_after(&self, last_id: u64) -> (Replay, broadcast::Receiver<Arc<Event>>) {
        let state = self.inner.state.locked();
        let receiver = self.inner.sender.subscribe();
        let replay = replay_from(&state, last_id);
        (replay, receiver)
    }

    /// Starts ids after `id` (a relayed bus: events up to it are already in the store's log).
    pub fn start_after(&self, id: u64) {
        let mut state = self.inner.state.locked();
        state.next_id = state.next_id.max(id + 1);
    }

    /// The id the next event will get.
    pub fn next_id(&self) -> u64 {
        self.inner.state.locked().next_id
    }
}

fn replay_from(state: &ReplayState, last_id: u64) -> Replay {
    if last_id + 1 >= state.next_id {
        return Replay::Events(Vec::new());
    }
    let oldest = state.buffer.front().map(|(e, _)| e.id).unwrap_or(state.next_id);
    if last_id + 1 < oldest {
        let held = state.buffer.iter().map(|(e, _)| e.clone()).collect();
        return Replay::TooFarBehind { held_from: oldest, held };
    }
    // Ids may have gaps on a relayed bus: find the position rather than compute it.
    let skip = state.buffer.partition_point(|(e, _)| e.id <= last_id);
    Replay::Events(state.buffer.iter().skip(skip).map(|(e, _)| e.clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compacted(n: u64) -> EventPayload {
        EventPayload::SessionCompacted { session_id: format!("ses_{n}").into() }
    }

    #[test]
    fn the_replay_buffer_is_bounded_in_bytes_as_well_as_in_events() {
        let bus = Bus::default();
        let big = "x".repeat(1024 * 1024);
        let ids: Vec<u64> = (0..40)
            .map(|_| {
                bus.publish(EventPayload::SessionError {
                    session_id: None,
                    error: codeloop_types::AssistantError::Unknown { message: big.clone() },
                })
            })
            .collect();
        let state = bus.inner.state.locked();
        assert!(state.bytes <= DEFAULT_REPLAY_BYTES, "{} bytes held", state.bytes);
        assert!(state.buffer.len() < 20, "{} one-MiB events held", state.buffer.len());
        assert_eq!(state.buffer.back().map(|(e, _)| e.id), ids.last().copied(), "the newest is kept");
    }

    #[tokio::test]
    async fn ids_increase_and_subscribers_see_order() {
        let bus = Bus::default();
        let mut rx = bus.subscribe();
        let a = bus.publish(compacted(1));
        let b = bus.publish(compacted(2));
        assert!(b > a);
        assert_eq!(rx.recv().await.unwrap().id, a);
        assert_eq!(rx.recv().await.unwrap().id, b);
    }

    #[test]
    fn replay_returns_exactly_the_missed_events() {
        let bus = Bus::new(16, 100);
        let ids: Vec<u64> = (0..10).map(|n| bus.publish(compacted(n))).collect();
        let (replay, _rx) = bus.subscribe_after(ids[6]);
        let Replay::Events(events) = replay else { panic!("expected events") };
        assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), ids[7..].to_vec());
        let (replay, _rx) = bus.subscribe_after(ids[9]);
        assert!(matches!(replay, Replay::Events(ref e) if e.is_empty()));
    }

    #[test]
    fn replay_beyond_the_buffer_asks_for_resync() {
        let bus = Bus::new(16, 5);
        for n in 0..20 {
            bus.publish(compacted(n));
        }
        assert!(matches!(bus.subscribe_after(3).0, Replay::TooFarBehind { .. }));
        assert!(matches!(bus.subscribe_after(15).0, Replay::Events(ref e) if e.len() == 5));
    }

    #[test]
    fn a_relayed_bus_fans_out_what_is_delivered_with_its_ids_and_replays_across_gaps() {
        let published = Arc::new(Mutex::new(Vec::new()));
        let sink = published.clone();
        let bus = Bus::relayed(16, 100, Box::new(move |p| sink.lock().unwrap().push(p)));
        let mut rx = bus.subscribe();
        assert_eq!(bus.publish(compacted(1)), 0);
        assert!(rx.try_recv().is_err(), "nothing is fanned out before the store hands it back");
        assert_eq!(published.lock().unwrap().as_slice(), [compacted(1)]);
        bus.deliver(40, compacted(1));
        bus.deliver(42, compacted(2));
        bus.deliver(42, compacted(2));
        bus.deliver(45, compacted(3));
        assert_eq!(rx.try_recv().unwrap().id, 40);
        assert_eq!(rx.try_recv().unwrap().id, 42);
        assert_eq!(rx.try_recv().unwrap().id, 45);
        assert!(rx.try_recv().is_err(), "a repeated id is delivered once");
        assert_eq!(bus.next_id(), 46);
        let (replay, _rx) = bus.subscribe_after(41);
        let Replay::Events(events) = replay else { panic!("expected events") };
        assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [42, 45]);
    }

    #[test]
    fn the_local_tap_of_a_relayed_bus_has_what_this_process_published_and_nothing_delivered() {
        let bus = Bus::relayed(16, 0, Box::new(|_| {}));
        let mut local = bus.subscribe_local();
        bus.publish(compacted(1));
        bus.deliver(7, compacted(2));
        assert_eq!(local.try_recv().unwrap().payload, compacted(1));
        assert!(local.try_recv().is_err(), "another worker's event is not this process's");
        let plain = Bus::new(16, 0);
        let mut local = plain.subscribe_local();
        plain.publish(compacted(3));
        assert_eq!(local.try_recv().unwrap().payload, compacted(3));
    }

    #[tokio::test]
    async fn a_slow_subscriber_lags_instead_of_blocking() {
        let bus = Bus::new(4, 0);
        let mut rx = bus.subscribe();
        for n in 0..100 {
            bus.publish(compacted(n));
        }
        assert!(matches!(rx.recv().await, Err(broadcast::error::RecvError::Lagged(_))));
    }
}
