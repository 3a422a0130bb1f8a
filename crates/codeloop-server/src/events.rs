//! `GET /event`: the bus as Server-Sent Events (DESIGN.md §4 "Event stream").
//!
//! A stream starts with `server.connected` (on a first connection its `id` is the bus position, so a
//! reconnect resumes from there; on a reconnect it has none, as the client's last id already says where it
//! is and a greeting must not stand for a real event), replays what a `Last-Event-ID` (or `?since=`) client missed — atomically with the live
//! subscription, so there is no gap and no duplicate — then sends live events in batches, a
//! `server.heartbeat` every heartbeat period, and `resync` when events were lost for this client.
//!
//! Owns: per-client delivery, filtering by session, lag recovery.
//! Must not: block a publisher or hold more than the bus's bounded buffers for a slow client: a client
//! that stops reading is simply not polled; its broadcast receiver lags and it catches up from the
//! replay buffer, or gets one `resync`, when it reads again.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use codeloop_core::{Bus, Replay};
use codeloop_types::{Event, EventPayload, SessionId};
use serde_json::json;
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::api::EventQuery;
use crate::error::{ApiError, ApiQuery};
use crate::frames::{FrameCache, ResyncReason, control, resync};

/// A batch written in one go stops growing past this size.
const MAX_BATCH_BYTES: usize = 64 * 1024;

pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<EventQuery>,
) -> Result<Response, ApiError> {
    let header = headers.get("last-event-id").map(|v| v.to_str().map(str::trim));
    let requested = match header {
        Some(Ok(value)) if !value.is_empty() => Some(
            value
                .parse::<u64>()
                .map_err(|_| ApiError::invalid("Last-Event-ID must be an event id (a number)"))?,
        ),
        Some(Err(_)) => return Err(ApiError::invalid("Last-Event-ID must be an event id (a number)")),
        _ => query.since,
    };
    let filter = query.session.filter(|s| !s.is_empty()).map(SessionId::from);
    let stream = EventStream::open(&state, requested, filter).await;
    let body = Body::from_stream(futures::stream::unfold(stream, |mut stream| async move {
        let chunk = stream.next_chunk().await?;
        Some((Ok::<Bytes, Infallible>(chunk), stream))
    }));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

struct EventStream {
    bus: Bus,
    rx: broadcast::Receiver<Arc<Event>>,
    /// Replayed events still to send, before anything from `rx`.
    backlog: VecDeque<Arc<Event>>,
    /// Control frames to send first.
    head: Option<Bytes>,
    filter: Option<SessionId>,
    /// The newest bus event this stream has taken (sent or filtered out).
    last_seen: u64,
    heartbeat: Interval,
    shutdown: CancellationToken,
    frames: Arc<FrameCache>,
    /// When the last frames were handed to the connection (`None` after a quiet period).
    last_write: Option<Instant>,
    coalesce: Duration,
    finished: bool,
}

impl EventStream {
    async fn open(state: &AppState, requested: Option<u64>, filter: Option<SessionId>) -> EventStream {
        let bus = state.engine.bus().clone();
        let position = bus.next_id().saturating_sub(1);
        let connected = |id: Option<u64>| control(id, "server.connected", json!({"last_event_id": position}));
        let (head, replay, rx, last_seen) = match requested {
            // Ahead of this worker: another worker sent it, and it reaches this one's bus soon; the stream
            // goes on from there (events up to it are skipped).
            Some(last) if last > position && state.engine.is_logged_event(last).await => {
                let (replay, rx) = bus.subscribe_after(position);
                (connected(None).to_vec(), replay, rx, last)
            }
            Some(last) if last > position => {
                let (replay, rx) = bus.subscribe_after(position);
                let head = [connected(None), resync(ResyncReason::UnknownId, last)].concat();
                (head, replay, rx, position)
            }
            Some(last) => {
                let (replay, rx) = state.engine.subscribe_after(last).await;
                match replay {
                    Replay::Events(_) => (connected(None).to_vec(), replay, rx, last),
                    Replay::TooFarBehind { .. } => {
                        let head = [connected(None), resync(ResyncReason::TooFarBehind, last)].concat();
                        (head, Replay::Events(Vec::new()), rx, position)
                    }
                }
            }
            None => {
                let (replay, rx) = bus.subscribe_after(position);
                (connected(Some(position)).to_vec(), replay, rx, position)
            }
        };
        let mut head = BytesMut::from(&head[..]);
        let backlog = match replay {
            Replay::Events(events) => events.into(),
            // Only possible with a replay buffer of size 0: say so rather than skip silently.
            Replay::TooFarBehind { .. } => {
                head.extend_from_slice(&resync(ResyncReason::TooFarBehind, position));
                VecDeque::new()
            }
        };
        let period = state.options.heartbeat.max(Duration::from_millis(10));
        let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        EventStream {
            bus,
            rx,
            backlog,
            head: Some(head.freeze()),
            filter,
            last_seen,
            heartbeat,
            shutdown: state.shutdown.clone(),
            frames: state.frames.clone(),
            last_write: None,
            coalesce: state.options.coalesce,
            finished: false,
        }
    }

    /// The next bytes to write: one or more whole frames. `None` ends the response.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.finished {
            return None;
        }
        let mut out = BytesMut::new();
        if let Some(head) = self.head.take() {
            out.extend_from_slice(&head);
        }
        loop {
            self.drain_backlog(&mut out);
            if !out.is_empty() {
                self.last_write = Some(Instant::now());
                return Some(out.freeze());
            }
            if let Some(last) = self.last_write.take() {
                // Right after a write, let a busy stream accumulate for a moment instead of waking this
                // task (and writing to the socket) once per event: with many clients, per-event wake-ups
                // would take the CPU a run needs. An event after a quiet period still goes out at once.
                tokio::select! {
                    _ = self.shutdown.cancelled() => return Some(self.dispose(out)),
                    _ = tokio::time::sleep_until(last + self.coalesce) => {}
                }
                self.drain_ready(&mut out);
                continue;
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return Some(self.dispose(out)),
                received = self.rx.recv() => match received {
                    Ok(event) => {
                        self.push(&mut out, &event);
                        self.drain_ready(&mut out);
                    }
                    Err(RecvError::Lagged(_)) => self.recover(&mut out),
                    Err(RecvError::Closed) => {
                        self.finished = true;
                        return (!out.is_empty()).then(|| out.freeze());
                    }
                },
                _ = self.heartbeat.tick() => {
                    return Some(control(None, "server.heartbeat", json!({})));
                }
            }
        }
    }

    /// The last frames: what is already queued, then `server.instance.disposed`.
    fn dispose(&mut self, mut out: BytesMut) -> Bytes {
        self.drain_ready(&mut out);
        self.drain_backlog(&mut out);
        out.extend_from_slice(&control(None, "server.instance.disposed", json!({})));
        self.finished = true;
        out.freeze()
    }

    fn push(&mut self, out: &mut BytesMut, event: &Event) {
        if event.id <= self.last_seen {
            return;
        }
        self.last_seen = event.id;
        // Between workers only (see codeloop_core::peers).
        if matches!(event.payload, EventPayload::WorkerRequest { .. }) {
            return;
        }
        if self.filter.as_ref().is_none_or(|session| event.payload.session_id() == Some(session)) {
            out.extend_from_slice(&self.frames.frame(event));
        }
    }

    fn drain_backlog(&mut self, out: &mut BytesMut) {
        while out.len() < MAX_BATCH_BYTES {
            let Some(event) = self.backlog.pop_front() else { return };
            self.push(out, &event);
        }
    }

    /// Takes what is already queued, without waiting, up to the batch size.
    fn drain_ready(&mut self, out: &mut BytesMut) {
        while out.len() < MAX_BATCH_BYTES && self.backlog.is_empty() {
            match self.rx.try_recv() {
                Ok(event) => self.push(out, &event),
                Err(TryRecvError::Lagged(_)) => self.recover(out),
                Err(TryRecvError::Empty | TryRecvError::Closed) => return,
            }
        }
    }

    /// The receiver fell behind the channel: continue from the replay buffer if it still holds every
    /// missed event, else tell the client to resync.
    fn recover(&mut self, out: &mut BytesMut) {
        let (replay, rx) = self.bus.subscribe_after(self.last_seen);
        self.rx = rx;
        match replay {
            Replay::Events(events) => self.backlog.extend(events),
            Replay::TooFarBehind { .. } => {
                out.extend_from_slice(&resync(ResyncReason::Lagged, self.last_seen))
            }
        }
    }
}
