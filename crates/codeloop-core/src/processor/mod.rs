//! The processor (DESIGN.md §4, reference §3): consumes one provider stream for one assistant message and
//! turns every event into durable parts, starting each tool as soon as its call is complete.
//!
//! Owns: the in-flight assistant message and its parts, the tool-call lifecycle (pending → running →
//! completed | error, exactly one result per call), coalesced persistence of streamed text (at most every
//! 200 ms and at text-end), cleanup, and the compact / stop / continue signal.
//! Must not: call the provider twice or decide to loop (the run loop does), or retry.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use codeloop_provider::{EventStream, Provider, ProviderError, ProviderRequest, StreamEvent};
use codeloop_tools::ProjectPaths;
use codeloop_types::{
    AssistantError, AssistantMessage, EventPayload, Message, Part, PartKind, ToolState, now_ms,
};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::doom_loop::DoomLoopGuard;
use crate::models::ModelPricing;
use crate::outcome::Blocked;
use crate::services::Journal;
use crate::tool_host::ToolGate;
use crate::tool_host::{RunToolHost, ToolEvent};

pub(crate) mod hooked;
mod steps;
mod tools;

/// Longest a tool may run before it is stopped, unless the tool names its own deadline (bash's
/// `timeout`): this watchdog only catches one that hangs (a stuck filesystem, a tool that ignores its
/// limit).
pub const TOOL_WATCHDOG: Duration = Duration::from_secs(15 * 60);

/// Streamed text reaches the store at most this long after it arrived.
pub const TEXT_FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// How long cleanup waits for open tool calls before marking them interrupted (reference §3.3).
pub const CLEANUP_TOOL_WAIT: Duration = Duration::from_millis(250);

/// What the run loop does after a turn (DESIGN.md §4 "Processor"): the processor's one signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Call the model again (tool results to answer), unless the loop's exit rules say it is done.
    Continue,
    /// The context overflowed: compact, then go on.
    Compact,
    /// A permission block or a halt: stop, and say why.
    Blocked(Blocked),
    /// The message ended with an error (its `error` says which).
    Stop,
}

/// A settled turn: the finished assistant message, its parts, and what comes next.
#[derive(Debug)]
pub struct Finished {
    pub message: AssistantMessage,
    pub parts: Vec<Part>,
    pub next: Next,
}

/// How one attempt at the provider call ended.
#[derive(Debug)]
pub enum AttemptEnd {
    /// The stream finished and every tool call settled.
    Finished,
    /// The provider failed; the run loop may retry.
    Failed(ProviderError),
    /// The processor refused to go on (doom loop denied, tool call during a summary, permission block).
    Halted(Blocked),
    /// The run was interrupted.
    Aborted,
}

/// Fixed facts of one turn.
pub struct TurnContext {
    /// Where the message and its parts are written and announced.
    pub journal: Journal,
    /// The turn's permission rules and what its tools reach through their host.
    pub gate: Arc<ToolGate>,
    pub project: ProjectPaths,
    /// Where truncated tool outputs are saved in full.
    pub tool_output_dir: std::path::PathBuf,
    pub limits: codeloop_tools::OutputLimits,
    pub pricing: ModelPricing,
    /// Overflow threshold in tokens; `None` when automatic compaction is off or this is a summary.
    pub overflow_at: Option<u64>,
    /// False on the last allowed step and for summaries: any call fails (or halts a summary).
    pub tools_enabled: bool,
    /// This message is a compaction summary: a tool call aborts it.
    pub summary: bool,
    /// Used when the provider reports no usage: the request size estimated as chars / 4.
    pub estimated_input_tokens: u64,
    /// The tools this turn can run (built-in and MCP).
    pub tools: Arc<codeloop_tools::ToolRegistry>,
    /// The names of the tools the request offered (a call to an unknown tool is told these).
    pub offered: Vec<String>,
    /// A user's rejection is fed back to the model instead of stopping the run.
    pub continue_on_reject: bool,
    /// The OS walls of this agent's commands (`None`: permission rules only).
    pub walls: Option<Arc<codeloop_tools::Walls>>,
    /// The files the session has read or written.
    pub seen: Option<Arc<codeloop_tools::SeenFiles>>,
}

pub struct Processor {
    ctx: Arc<TurnContext>,
    message: AssistantMessage,
    parts: Vec<Part>,
    text_open: HashMap<String, usize>,
    reasoning_open: HashMap<String, usize>,
    calls: HashMap<String, usize>,
    running: HashSet<String>,
    dirty: BTreeSet<usize>,
    flush_at: Option<Instant>,
    needs_compaction: bool,
    /// Why the run must stop (a permission block), shown to the user.
    blocked: Option<Blocked>,
    tool_tx: mpsc::UnboundedSender<ToolEvent>,
    tool_rx: mpsc::UnboundedReceiver<ToolEvent>,
    host: Arc<RunToolHost>,
    tools_cancel: CancellationToken,
    /// Cleanup is running: results that arrive now are of calls cut short.
    cleaning: bool,
    /// Settled calls written but not yet announced (see [`Processor::write_now`]).
    unannounced: Vec<usize>,
    /// Snapshot of the project before this turn (git projects only).
    start_snapshot: Option<String>,
    /// Characters of text streamed without usage, for the estimate.
    streamed_chars: u64,
}

impl Processor {
    /// Starts a new assistant message: persisted and announced before the provider is called.
    pub fn new(ctx: Arc<TurnContext>, message: AssistantMessage) -> Self {
        let (tool_tx, tool_rx) = mpsc::unbounded_channel();
        let host = ctx.gate.host(tool_tx.clone());
        ctx.journal.save_message(&Message::Assistant(message.clone()));
        Self {
            ctx,
            message,
            parts: Vec::new(),
            text_open: HashMap::new(),
            reasoning_open: HashMap::new(),
            calls: HashMap::new(),
            running: HashSet::new(),
            dirty: BTreeSet::new(),
            flush_at: None,
            needs_compaction: false,
            blocked: None,
            tool_tx,
            tool_rx,
            host,
            tools_cancel: CancellationToken::new(),
            cleaning: false,
            unannounced: Vec::new(),
            start_snapshot: None,
            streamed_chars: 0,
        }
    }

    /// One provider call, consumed to the end (or until interrupted), followed by cleanup.
    pub async fn attempt(
        &mut self,
        provider: &dyn Provider,
        request: Arc<ProviderRequest>,
        cancel: &CancellationToken,
        doom: &mut DoomLoopGuard,
    ) -> AttemptEnd {
        self.tools_cancel = cancel.child_token();
        self.needs_compaction = false;
        // Call ids belong to one attempt: a retried stream may reuse them (servers without call ids
        // number calls from zero each time) and its calls must run.
        self.calls.clear();
        let stream = tokio::select! {
            biased;
            _ = cancel.cancelled() => return self.cleanup(AttemptEnd::Aborted).await,
            result = provider.stream(request) => result,
        };
        let end = match stream {
            Ok(stream) => self.consume(stream, cancel, doom).await,
            Err(error) => AttemptEnd::Failed(error),
        };
        self.cleanup(end).await
    }

    async fn consume(
        &mut self,
        mut stream: EventStream,
        cancel: &CancellationToken,
        doom: &mut DoomLoopGuard,
    ) -> AttemptEnd {
        let mut stream_done = false;
        loop {
            if stream_done && self.running.is_empty() {
                return AttemptEnd::Finished;
            }
            let flush_at = self.flush_at;
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return AttemptEnd::Aborted,
                Some(event) = self.tool_rx.recv() => {
                    if let Some((tool, input, succeeded)) = self.on_tool_event(event) {
                        doom.settled(&tool, &input, succeeded);
                    }
                    self.announce_settled().await;
                }
                item = stream.next(), if !stream_done => match item {
                    Some(Ok(event)) => {
                        let handled = self.on_stream_event(event, cancel, doom).await;
                        self.announce_settled().await;
                        if let Err(end) = handled {
                            return end;
                        }
                        // Overflow seen at a step boundary: stop reading, let running tools finish.
                        if self.needs_compaction {
                            stream_done = true;
                        }
                    }
                    Some(Err(error)) => return AttemptEnd::Failed(error),
                    None => stream_done = true,
                },
                _ = sleep_until(flush_at), if flush_at.is_some() => self.flush(),
            }
        }
    }

    async fn on_stream_event(
        &mut self,
        event: StreamEvent,
        cancel: &CancellationToken,
        doom: &mut DoomLoopGuard,
    ) -> Result<(), AttemptEnd> {
        match event {
            StreamEvent::Start | StreamEvent::Finish | StreamEvent::ToolInputEnd { .. } => {}
            StreamEvent::StartStep => self.step_start(),
            StreamEvent::ReasoningStart { id, metadata } => self.reasoning_start(id, metadata),
            StreamEvent::ReasoningDelta { id, text } => self.reasoning_delta(id, text),
            StreamEvent::ReasoningEnd { id, metadata } => self.reasoning_end(&id, metadata),
            StreamEvent::TextStart { id } => self.text_start(id),
            StreamEvent::TextDelta { id, text } => self.text_delta(id, text),
            StreamEvent::TextEnd { id } => self.text_end(&id),
            StreamEvent::ToolInputStart { call_id, name } => self.tool_input_start(call_id, name)?,
            StreamEvent::ToolInputDelta { call_id, delta } => self.tool_input_delta(&call_id, &delta),
            StreamEvent::ToolCall(call) => self.tool_call(call, cancel, doom).await?,
            StreamEvent::FinishStep { finish, usage, .. } => self.finish_step(finish, usage),
        }
        Ok(())
    }

    // ----- parts -----

    fn push_part(&mut self, kind: PartKind) -> usize {
        let part = Part::new(self.message.session_id.clone(), self.message.id.clone(), kind);
        self.parts.push(part);
        let index = self.parts.len() - 1;
        self.write_now(index);
        index
    }

    /// Persists and announces a part change right away (state transitions). A settled tool call is
    /// announced only once it is committed, so a result someone saw is never lost to a crash.
    fn write_now(&mut self, index: usize) {
        self.dirty.remove(&index);
        let Some(part) = self.parts.get(index) else { return };
        if part.as_tool().is_some_and(|t| t.state.is_terminal()) {
            self.ctx.journal.write(codeloop_store::Write::Part(part.clone()));
            self.unannounced.push(index);
        } else {
            self.ctx.journal.save_part(part);
        }
    }

    /// Waits for settled calls to be committed, then announces them.
    async fn announce_settled(&mut self) {
        if self.unannounced.is_empty() {
            return;
        }
        if let Err(e) = self.ctx.journal.flush().await {
            tracing::error!("could not persist a tool result: {e}");
        }
        for index in std::mem::take(&mut self.unannounced) {
            if let Some(part) = self.parts.get(index) {
                self.ctx.journal.publish(EventPayload::PartUpdated {
                    session_id: part.session_id.clone(),
                    part: part.clone(),
                });
            }
        }
    }

    /// Marks a part changed; it reaches the store within [`TEXT_FLUSH_INTERVAL`].
    fn mark_dirty(&mut self, index: usize) {
        self.dirty.insert(index);
        if self.flush_at.is_none() {
            self.flush_at = Some(Instant::now() + TEXT_FLUSH_INTERVAL);
        }
    }

    fn flush(&mut self) {
        self.flush_at = None;
        let dirty = std::mem::take(&mut self.dirty);
        for index in dirty {
            if let Some(part) = self.parts.get(index) {
                self.ctx.journal.write(codeloop_store::Write::Part(part.clone()));
            }
        }
    }

    fn publish_delta(&self, index: usize, delta: String) {
        let part = &self.parts[index];
        self.ctx.journal.publish(EventPayload::PartDelta {
            session_id: part.session_id.clone(),
            message_id: part.message_id.clone(),
            part_id: part.id.clone(),
            field: "text".into(),
            delta,
        });
    }

    // ----- cleanup -----

    /// Always runs: closes text and reasoning, gives open tool calls [`CLEANUP_TOOL_WAIT`] to finish after
    /// cancelling them, then marks the rest interrupted. Every call ends with exactly one result.
    async fn cleanup(&mut self, end: AttemptEnd) -> AttemptEnd {
        let now = now_ms();
        let open_text: Vec<usize> = self.text_open.drain().map(|(_, i)| i).collect();
        for index in open_text {
            if let PartKind::Text(part) = &mut self.parts[index].kind {
                part.time.end = Some(now);
            }
            self.write_now(index);
        }
        let open_reasoning: Vec<usize> = self.reasoning_open.drain().map(|(_, i)| i).collect();
        for index in open_reasoning {
            if let PartKind::Reasoning(part) = &mut self.parts[index].kind {
                part.time.end = Some(now);
            }
            self.write_now(index);
        }
        if !self.running.is_empty() {
            self.cleaning = true;
            self.tools_cancel.cancel();
            let deadline = Instant::now() + CLEANUP_TOOL_WAIT;
            while !self.running.is_empty() {
                match tokio::time::timeout_at(deadline, self.tool_rx.recv()).await {
                    Ok(Some(event)) => {
                        self.on_tool_event(event);
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
        // Drain progress/results that arrived meanwhile, then settle whatever is still open.
        while let Ok(event) = self.tool_rx.try_recv() {
            self.on_tool_event(event);
        }
        self.running.clear();
        self.cleaning = false;
        let open_calls: Vec<usize> = self.calls.values().copied().collect();
        for index in open_calls {
            self.interrupt_call(index, None);
        }
        self.flush();
        self.announce_settled().await;
        end
    }

    /// Settles a call that the end of the turn cut short as an interrupted error, keeping any output it
    /// produced in `metadata.output` (the projection replays it).
    fn interrupt_call(&mut self, index: usize, output: Option<String>) {
        let now = now_ms();
        let Some(tool) = self.tool_mut(index) else { return };
        if tool.state.interrupt(now).is_err() {
            return;
        }
        if let (Some(output), ToolState::Error(error)) = (output, &mut tool.state)
            && let Some(serde_json::Value::Object(metadata)) = &mut error.metadata
        {
            metadata.insert("output".into(), serde_json::Value::String(output));
        }
        self.write_now(index);
    }

    /// Hides what a failed attempt left from the model: its text, its reasoning, and calls it did not
    /// complete (the retried attempt says and does it again). Completed calls stay visible: they ran.
    pub fn discard_attempt(&mut self, from_part: usize) {
        for index in from_part..self.parts.len() {
            let changed = match &mut self.parts[index].kind {
                PartKind::Text(part) => !std::mem::replace(&mut part.ignored, true),
                PartKind::Reasoning(part) => !std::mem::replace(&mut part.ignored, true),
                PartKind::Tool(tool) if !matches!(tool.state, ToolState::Completed(_)) => {
                    !std::mem::replace(&mut tool.ignored, true)
                }
                _ => false,
            };
            if changed {
                self.write_now(index);
            }
        }
    }

    pub fn part_count(&self) -> usize {
        self.parts.len()
    }

    /// The message as it stands (finish reason, tokens) before [`Processor::finish`].
    pub fn message(&self) -> &AssistantMessage {
        &self.message
    }

    /// A halt during a summary is an error on the summary; other halts (permission blocks) are not.
    pub(crate) fn summary_halt_error(&self, halt: &Blocked) -> Option<AssistantError> {
        match self.blocked {
            Some(_) => None,
            None => Some(AssistantError::Unknown { message: halt.to_string() }),
        }
    }

    /// The provider said the request does not fit: the turn ends in a compaction.
    pub fn request_compaction(&mut self) {
        self.needs_compaction = true;
    }

    /// Settles the message (error if any, completion time; persisted and announced) and hands it over
    /// with the signal for the run loop: blocked (a permission block, or `halted` by the run loop) before
    /// compact (overflow seen at a step, or requested) before stop (the message has an error) before
    /// continue.
    pub fn finish(mut self, error: Option<AssistantError>, halted: Option<Blocked>) -> Finished {
        if let Some(error) = error
            && self.message.error.is_none()
        {
            self.message.error = Some(error);
        }
        self.message.time.completed = Some(now_ms());
        self.ctx.journal.save_message(&Message::Assistant(self.message.clone()));
        let next = match self.blocked.take().or(halted) {
            Some(reason) => Next::Blocked(reason),
            None if self.needs_compaction => Next::Compact,
            None if self.message.error.is_some() => Next::Stop,
            None => Next::Continue,
        };
        Finished { message: self.message, parts: self.parts, next }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
