//! Events in, facts out: what happened to a run, told once each (a request started, its first token came,
//! a tool ended), with the timings the event stream alone implies. Both the Prometheus counters and the
//! OpenTelemetry exporter read these facts instead of each re-deciding what an event means.
//!
//! Everything kept here belongs to a session with a run in progress or about to start, and is dropped when
//! the run ends: a server that runs for weeks keeps nothing per finished session.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use codeloop_types::{
    AssistantError, CacheReason, Event, EventPayload, Limit, Message, MessageId, Millis, ModelRef, Part,
    PartId, PartKind, SessionId, SessionStatus, StepFinishPart, ToolPart, ToolState,
};
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio_util::sync::CancellationToken;

/// Sessions tracked at once; a bound that is never reached in practice (each ends with its run).
const MAX_SESSIONS: usize = 4_096;

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum ToolStatus {
    Completed,
    Error,
    Aborted,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One thing that happened, borrowed from the event that told it.
#[derive(Debug)]
pub enum Fact<'a> {
    RunStarted {
        session: &'a SessionId,
        at: SystemTime,
    },
    RunEnded {
        session: &'a SessionId,
        at: SystemTime,
    },
    /// A model request went out (a new assistant message, or the next step of one). `summary`: a
    /// compaction's summary request.
    RequestStarted {
        session: &'a SessionId,
        message: &'a MessageId,
        model: &'a ModelRef,
        agent: &'a str,
        summary: bool,
        at: SystemTime,
    },
    FirstToken {
        session: &'a SessionId,
        message: &'a MessageId,
        model: &'a ModelRef,
        after: Duration,
    },
    /// The request's stream finished with its usage.
    RequestFinished {
        session: &'a SessionId,
        message: &'a MessageId,
        model: &'a ModelRef,
        step: &'a StepFinishPart,
        took: Duration,
        at: SystemTime,
    },
    /// The assistant message is complete (its tools too); `error` when it failed.
    MessageCompleted {
        session: &'a SessionId,
        message: &'a MessageId,
        error: Option<&'a AssistantError>,
        at: SystemTime,
    },
    ToolStarted {
        session: &'a SessionId,
        message: &'a MessageId,
        part: &'a PartId,
        tool: &'a ToolPart,
        at: SystemTime,
    },
    ToolEnded {
        session: &'a SessionId,
        message: &'a MessageId,
        part: &'a PartId,
        tool: &'a ToolPart,
        status: ToolStatus,
        sandboxed: bool,
        started: SystemTime,
        at: SystemTime,
    },
    /// The latest full text of a text part (`user`: of the person's message).
    Text {
        session: &'a SessionId,
        message: &'a MessageId,
        part: &'a PartId,
        text: &'a str,
        user: bool,
    },
    Hook {
        session: &'a SessionId,
        event: &'a str,
        source: &'a str,
        command: &'a str,
        exit_code: Option<i32>,
        decision: &'a str,
        took: Duration,
        at: SystemTime,
    },
    Retry {
        session: &'a SessionId,
        attempt: u32,
        at: SystemTime,
    },
    Compacted {
        session: &'a SessionId,
        at: SystemTime,
    },
    Limit {
        session: &'a SessionId,
        limit: Limit,
        value: f64,
        used: f64,
        at: SystemTime,
    },
    CacheChanged {
        session: &'a SessionId,
        reason: CacheReason,
        at: SystemTime,
    },
    Error {
        session: &'a SessionId,
        error: &'a AssistantError,
        at: SystemTime,
    },
    /// A session was created under another (a subagent's).
    Child {
        session: &'a SessionId,
        parent: &'a SessionId,
    },
}

/// What consumes facts.
pub trait Recorder: Send + 'static {
    fn record(&mut self, fact: &Fact<'_>);
    /// The watch is over: end whatever is still open.
    fn close(&mut self) {}
}

#[derive(Default)]
struct Track {
    running: bool,
    /// Assistant messages not yet complete.
    messages: HashMap<MessageId, Request>,
    users: HashSet<MessageId>,
    started_tools: HashSet<PartId>,
    ended_tools: HashSet<PartId>,
}

struct Request {
    model: ModelRef,
    /// When the request in flight went out; `None` between a step's end and the next step's start.
    in_flight: Option<Instant>,
    first_token: bool,
}

/// Turns events into facts.
#[derive(Default)]
pub struct Observer {
    sessions: HashMap<SessionId, Track>,
}

fn system_time(ms: Millis) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl Observer {
    /// Sessions tracked now (each has a run in progress or about to start).
    pub fn tracked(&self) -> usize {
        self.sessions.len()
    }

    fn track(&mut self, session: &SessionId) -> Option<&mut Track> {
        if !self.sessions.contains_key(session) && self.sessions.len() >= MAX_SESSIONS {
            return None;
        }
        Some(self.sessions.entry(session.clone()).or_default())
    }

    pub fn observe(&mut self, event: &Event, out: &mut dyn FnMut(&Fact<'_>)) {
        let now = SystemTime::now();
        match &event.payload {
            EventPayload::SessionStatus { session_id, status } => match status {
                SessionStatus::Busy => self.run_started(session_id, now, out),
                SessionStatus::Retry { attempt, .. } => {
                    self.run_started(session_id, now, out);
                    out(&Fact::Retry { session: session_id, attempt: *attempt, at: now });
                }
                SessionStatus::Idle => self.run_ended(session_id, now, out),
            },
            EventPayload::SessionIdle { session_id } => self.run_ended(session_id, now, out),
            EventPayload::SessionDeleted { session_id } => {
                self.sessions.remove(session_id);
            }
            EventPayload::SessionCreated { session_id, info } => {
                if let Some(parent) = &info.parent_id {
                    out(&Fact::Child { session: session_id, parent });
                }
            }
            EventPayload::MessageUpdated { session_id, info } => self.message(session_id, info, now, out),
            EventPayload::PartDelta { session_id, message_id, .. } => {
                self.first_token(session_id, message_id, out);
            }
            EventPayload::PartUpdated { session_id, part } => self.part(session_id, part, now, out),
            EventPayload::HookRan {
                session_id,
                event,
                source,
                command,
                duration_ms,
                exit_code,
                decision,
            } => {
                out(&Fact::Hook {
                    session: session_id,
                    event,
                    source,
                    command,
                    exit_code: *exit_code,
                    decision,
                    took: Duration::from_millis(*duration_ms),
                    at: now,
                });
            }
            EventPayload::SessionCompacted { session_id } => {
                out(&Fact::Compacted { session: session_id, at: now })
            }
            EventPayload::SessionLimit { session_id, limit, value, used } => {
                out(&Fact::Limit { session: session_id, limit: *limit, value: *value, used: *used, at: now });
            }
            EventPayload::SessionCache { session_id, reason } => {
                out(&Fact::CacheChanged { session: session_id, reason: *reason, at: now });
            }
            EventPayload::SessionError { session_id: Some(session_id), error } => {
                out(&Fact::Error { session: session_id, error, at: now });
            }
            _ => {}
        }
    }

    fn run_started(&mut self, session: &SessionId, at: SystemTime, out: &mut dyn FnMut(&Fact<'_>)) {
        let Some(track) = self.track(session) else { return };
        if !track.running {
            track.running = true;
            out(&Fact::RunStarted { session, at });
        }
    }

    fn run_ended(&mut self, session: &SessionId, at: SystemTime, out: &mut dyn FnMut(&Fact<'_>)) {
        if let Some(track) = self.sessions.remove(session)
            && track.running
        {
            out(&Fact::RunEnded { session, at });
        }
    }

    fn message(
        &mut self,
        session: &SessionId,
        info: &Message,
        at: SystemTime,
        out: &mut dyn FnMut(&Fact<'_>),
    ) {
        let Some(track) = self.track(session) else { return };
        match info {
            Message::User(user) => {
                track.users.insert(user.id.clone());
            }
            Message::Assistant(info) if info.time.completed.is_none() => {
                if !track.messages.contains_key(&info.id) {
                    track.messages.insert(
                        info.id.clone(),
                        Request {
                            model: info.model.clone(),
                            in_flight: Some(Instant::now()),
                            first_token: false,
                        },
                    );
                    out(&Fact::RequestStarted {
                        session,
                        message: &info.id,
                        model: &info.model,
                        agent: &info.agent,
                        summary: info.summary,
                        at,
                    });
                }
            }
            Message::Assistant(info) => {
                if track.messages.remove(&info.id).is_some() {
                    out(&Fact::MessageCompleted {
                        session,
                        message: &info.id,
                        error: info.error.as_ref(),
                        at,
                    });
                }
            }
        }
    }

    fn first_token(&mut self, session: &SessionId, message: &MessageId, out: &mut dyn FnMut(&Fact<'_>)) {
        let Some(request) = self.sessions.get_mut(session).and_then(|t| t.messages.get_mut(message)) else {
            return;
        };
        if let Some(started) = request.in_flight
            && !request.first_token
        {
            request.first_token = true;
            out(&Fact::FirstToken { session, message, model: &request.model, after: started.elapsed() });
        }
    }

    fn part(&mut self, session: &SessionId, part: &Part, at: SystemTime, out: &mut dyn FnMut(&Fact<'_>)) {
        let message = &part.message_id;
        match &part.kind {
            PartKind::Text(text) => {
                let user = self.sessions.get(session).is_some_and(|t| t.users.contains(message));
                if !user {
                    self.first_token(session, message, out);
                }
                out(&Fact::Text { session, message, part: &part.id, text: &text.text, user });
            }
            PartKind::Reasoning(_) => self.first_token(session, message, out),
            PartKind::StepStart(_) => {
                let Some(request) = self.sessions.get_mut(session).and_then(|t| t.messages.get_mut(message))
                else {
                    return;
                };
                if request.in_flight.is_none() {
                    request.in_flight = Some(Instant::now());
                    request.first_token = false;
                    let summary = false;
                    out(&Fact::RequestStarted {
                        session,
                        message,
                        model: &request.model,
                        agent: "",
                        summary,
                        at,
                    });
                }
            }
            PartKind::StepFinish(step) => {
                let Some(request) = self.sessions.get_mut(session).and_then(|t| t.messages.get_mut(message))
                else {
                    return;
                };
                if let Some(started) = request.in_flight.take() {
                    let took = started.elapsed();
                    out(&Fact::RequestFinished { session, message, model: &request.model, step, took, at });
                }
            }
            PartKind::Tool(tool) => self.tool(session, part, tool, out),
            _ => {}
        }
    }

    fn tool(&mut self, session: &SessionId, part: &Part, tool: &ToolPart, out: &mut dyn FnMut(&Fact<'_>)) {
        let message = &part.message_id;
        let status = match &tool.state {
            // A call streaming in is the request's first output too.
            ToolState::Pending(_) => return self.first_token(session, message, out),
            ToolState::Running(running) => {
                self.first_token(session, message, out);
                let Some(track) = self.sessions.get_mut(session) else { return };
                if track.started_tools.insert(part.id.clone()) {
                    let at = system_time(running.time.start);
                    out(&Fact::ToolStarted { session, message, part: &part.id, tool, at });
                }
                return;
            }
            ToolState::Completed(_) => ToolStatus::Completed,
            ToolState::Error(_) if tool.state.is_interrupted() => ToolStatus::Aborted,
            ToolState::Error(_) => ToolStatus::Error,
        };
        let Some(track) = self.sessions.get_mut(session) else { return };
        if !track.ended_tools.insert(part.id.clone()) {
            return;
        }
        let (started, ended) = match &tool.state {
            ToolState::Completed(done) => (done.time.start, done.time.end),
            ToolState::Error(failed) => (failed.time.start, failed.time.end),
            _ => return,
        };
        let sandboxed = tool
            .state
            .metadata()
            .and_then(|m| m.get("sandbox"))
            .and_then(|s| s.as_str())
            .is_some_and(|mode| mode != "off");
        let (started, ended) = (system_time(started), system_time(ended).max(system_time(started)));
        out(&Fact::ToolEnded {
            session,
            message,
            part: &part.id,
            tool,
            status,
            sandboxed,
            started,
            at: ended,
        });
    }
}

/// Watches the events this process publishes and hands each fact to `recorder`, until `stop` is
/// cancelled: then it records what is already published and closes the recorder. Missed events (a
/// recorder that fell far behind) only lose facts.
pub fn watch<R: Recorder>(
    mut events: broadcast::Receiver<Arc<Event>>,
    stop: CancellationToken,
    mut recorder: R,
) -> tokio::task::JoinHandle<R> {
    tokio::spawn(async move {
        let mut observer = Observer::default();
        loop {
            tokio::select! {
                biased;
                event = events.recv() => match event {
                    Ok(event) => observer.observe(&event, &mut |fact| recorder.record(fact)),
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                },
                _ = stop.cancelled() => {
                    loop {
                        match events.try_recv() {
                            Ok(event) => observer.observe(&event, &mut |fact| recorder.record(fact)),
                            Err(TryRecvError::Lagged(_)) => {}
                            Err(TryRecvError::Empty | TryRecvError::Closed) => break,
                        }
                    }
                    break;
                }
            }
        }
        recorder.close();
        recorder
    })
}
