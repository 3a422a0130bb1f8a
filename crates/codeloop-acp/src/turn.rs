//! One prompt turn: the client's content blocks become the engine's input, the run's bus events become
//! `session/update`s, and each permission ask becomes a `session/request_permission` whose answer
//! reaches the engine exactly once.
//!
//! Owns: the turn's lifetime — cancel (the engine's interrupt, then `cancelled` within a grace period),
//! permission timeouts, and the stop reason.
//! Must not: settle tool calls or permissions itself; the engine's interrupt and reply do.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use codeloop_core::{
    Delivery, InputPart, PermissionAnswer, PromptInput, RunOutcome, SessionCommand, StopReason as EngineStop,
};
use codeloop_types::{EventPayload, Finish, PermissionId, PermissionRequest, SessionId};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::agent::{AcpSession, Agent};
use crate::protocol::{
    ContentBlock, PermissionOption, PermissionOptionKind, PermissionOutcome, PromptResponse,
    RequestPermissionRequest, RequestPermissionResponse, SessionUpdate, StopReason, ToolCallUpdate, method,
};
use crate::rpc::RpcError;
use crate::stream::Stream;
use codeloop_types::LockExt;

/// Tells the prompts of a session apart in its cancel list.
static NEXT_TICKET: AtomicU64 = AtomicU64::new(0);

const ALLOW_ONCE: &str = "allow_once";
const ALLOW_ALWAYS: &str = "allow_always";
const REJECT_ONCE: &str = "reject_once";
const REJECT_ALWAYS: &str = "reject_always";

/// Answers `session/prompt`: runs the turn and returns its stop reason.
pub async fn prompt(
    agent: &Arc<Agent>,
    session: &Arc<AcpSession>,
    request_id: &Value,
    blocks: Vec<ContentBlock>,
) -> Result<PromptResponse, RpcError> {
    let input = match command_of(session, &blocks).await {
        Some((name, arguments)) => Send::Command { name, arguments },
        None => Send::Prompt(input(blocks)?),
    };
    let cancel = CancellationToken::new();
    let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
    session.cancels.locked().push((ticket, cancel.clone()));
    agent.prompts.locked().insert(request_id.to_string(), cancel.clone());
    let stop = tokio::select! {
        turn = session.turn.lock() => {
            let _turn = turn;
            if cancel.is_cancelled() {
                Ok(StopReason::Cancelled)
            } else {
                Turn::new(agent, session, cancel.clone()).run(input).await
            }
        }
        _ = cancel.cancelled() => Ok(StopReason::Cancelled),
    };
    session.cancels.locked().retain(|(t, _)| *t != ticket);
    agent.prompts.locked().remove(&request_id.to_string());
    Ok(PromptResponse { stop_reason: stop? })
}

/// What a turn sends: the person's content, or a command typed as `/NAME args` (DESIGN.md §5g).
enum Send {
    Prompt(PromptInput),
    Command { name: String, arguments: String },
}

/// `(NAME, args)` when the prompt is one text block `/NAME args` naming one of the session's commands
/// (any other text starting with `/`, a path say, is an ordinary prompt).
async fn command_of(session: &AcpSession, blocks: &[ContentBlock]) -> Option<(String, String)> {
    let [ContentBlock::Text { text }] = blocks else { return None };
    let typed = text.trim_start().strip_prefix('/')?;
    let (name, arguments) = typed.split_once(char::is_whitespace).unwrap_or((typed, ""));
    let known = session.engine.commands(&session.cwd).await.into_iter().any(|c| c.name == name);
    known.then(|| (name.to_owned(), arguments.trim().to_owned()))
}

/// The client's content as the engine's input: text as typed, embedded resources as context the model
/// reads (synthetic text, or a file part for binary data), links as mentions.
fn input(blocks: Vec<ContentBlock>) -> Result<PromptInput, RpcError> {
    let mut parts = Vec::new();
    for block in blocks {
        parts.push(match block {
            ContentBlock::Text { text } => InputPart::Text { text, synthetic: false },
            ContentBlock::Resource { resource } => match (resource.text, resource.blob) {
                (Some(text), _) => InputPart::Text {
                    text: format!("<context uri=\"{}\">\n{text}\n</context>", resource.uri),
                    synthetic: true,
                },
                (None, Some(blob)) => {
                    let mime = resource.mime_type.unwrap_or_else(|| "application/octet-stream".into());
                    InputPart::File {
                        url: format!("data:{mime};base64,{blob}"),
                        mime,
                        filename: Some(resource.uri),
                    }
                }
                (None, None) => {
                    return Err(RpcError::invalid_params(
                        "Invalid params: a resource needs `text` or `blob`",
                    ));
                }
            },
            ContentBlock::ResourceLink { uri, name, .. } => {
                InputPart::Text { text: format!("[@{name}]({uri})"), synthetic: false }
            }
            ContentBlock::Image { data, mime_type, .. } => InputPart::File {
                url: format!("data:{mime_type};base64,{data}"),
                mime: mime_type,
                filename: None,
            },
            // Not advertised (`promptCapabilities.audio` is false): refused, not silently dropped.
            ContentBlock::Audio { .. } => {
                return Err(RpcError::invalid_params(
                    "Invalid params: this agent takes no audio (promptCapabilities.audio is false); send text or an image",
                ));
            }
        });
    }
    let input = PromptInput { parts, ..Default::default() };
    if input.is_empty() {
        return Err(RpcError::invalid_params(
            "Invalid params: the prompt is empty: send at least one text block",
        ));
    }
    Ok(input)
}

struct Turn<'a> {
    agent: &'a Arc<Agent>,
    session: &'a Arc<AcpSession>,
    cancel: CancellationToken,
    stream: Stream,
    /// Permission requests forwarded to the client, by engine id: cancelling one withdraws it.
    forwarded: HashMap<PermissionId, CancellationToken>,
    /// Ends every forwarded request when the turn ends.
    asks: CancellationToken,
    /// The forwarded requests' tasks: awaited when the turn ends, so their withdrawals reach the client
    /// before the turn's answer does.
    ask_tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Sessions of this turn's subagents (their asks come to this client too), and others seen.
    /// Whether the person (or a timeout) rejected a call: the run's stop needs no further notice.
    rejected: Arc<AtomicBool>,
}

impl<'a> Turn<'a> {
    fn new(agent: &'a Arc<Agent>, session: &'a Arc<AcpSession>, cancel: CancellationToken) -> Self {
        Self {
            agent,
            session,
            cancel,
            stream: Stream::new(session.id.clone(), session.cwd.clone()),
            forwarded: HashMap::new(),
            asks: CancellationToken::new(),
            ask_tasks: Vec::new(),
            rejected: Arc::new(AtomicBool::new(false)),
        }
    }

    async fn run(mut self, send: Send) -> Result<StopReason, RpcError> {
        let warnings: Vec<String> = std::mem::take(&mut *self.session.warnings.locked());
        for warning in warnings {
            self.agent.notice(&self.session.id, &format!("warning: {warning}")).await;
        }
        let command = match send {
            Send::Prompt(mut input) => {
                let choice = self.session.choice.locked();
                input.agent = Some(choice.mode.clone());
                input.model = choice.model.clone();
                input.effort = choice.effort;
                SessionCommand::Prompt { session: self.session.id.clone(), input, delivery: Delivery::Queue }
            }
            Send::Command { name, arguments } => SessionCommand::RunCommand {
                session: self.session.id.clone(),
                name,
                arguments,
                delivery: Delivery::Queue,
                effort: self.session.choice.locked().effort,
            },
        };
        let engine = self.session.engine.clone();
        let mut events = engine.bus().subscribe();
        let prompt = engine.submit(command);
        tokio::pin!(prompt);
        let grace = tokio::time::sleep(std::time::Duration::MAX / 4);
        tokio::pin!(grace);
        let mut cancelled = false;
        let mut open = true;
        let mut lagged = false;
        let result = loop {
            tokio::select! {
                biased;
                result = &mut prompt => break Some(result),
                _ = self.cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    let engine = engine.clone();
                    let id = self.session.id.clone();
                    tokio::spawn(async move { engine.submit(SessionCommand::Abort { session: id }).await });
                    grace.as_mut().reset(tokio::time::Instant::now() + self.agent.options.cancel_grace);
                }
                _ = &mut grace, if cancelled => {
                    tracing::warn!("the run's cleanup takes longer than {:?}; answering cancelled now", self.agent.options.cancel_grace);
                    break None;
                }
                event = events.recv(), if open => match event {
                    Ok(event) => self.event(&event.payload).await,
                    Err(RecvError::Lagged(skipped)) => {
                        tracing::debug!("{skipped} events lagged; caught up from the store at the end");
                        lagged = true;
                    }
                    Err(RecvError::Closed) => open = false,
                },
            }
        };
        // Everything the run published is queued already: send it before the answer.
        while let Ok(event) = events.try_recv() {
            self.event(&event.payload).await;
        }
        // Only a lagging subscriber missed anything; the store has it (after the writer's flush).
        if lagged
            && engine.flush().await.is_ok()
            && let Ok(history) = engine.history(&self.session.id).await
        {
            for update in self.stream.catch_up(&history) {
                self.agent.send_update(&self.session.id, update).await;
            }
        }
        self.asks.cancel();
        // A withdrawn request's `$/cancel_request` goes out before the answer (each task ends at once
        // once cancelled; the bound only guards against a stuck client pipe).
        let tasks = std::mem::take(&mut self.ask_tasks);
        let all = async {
            for task in tasks {
                let _ = task.await;
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), all).await;
        if cancelled {
            return Ok(StopReason::Cancelled);
        }
        match result {
            Some(Ok(outcome)) => match outcome.into_run() {
                Some(outcome) => self.stop_reason(&outcome).await,
                None => Err(RpcError::internal("the prompt did not run")),
            },
            Some(Err(error)) => Err(crate::agent::engine_error(&error)),
            None => Ok(StopReason::Cancelled),
        }
    }

    async fn stop_reason(&self, outcome: &RunOutcome) -> Result<StopReason, RpcError> {
        let finish = outcome.message.as_ref().and_then(|m| m.finish);
        match &outcome.stop {
            EngineStop::Completed => Ok(match finish {
                Some(Finish::Length) => StopReason::MaxTokens,
                Some(Finish::ContentFilter) => StopReason::Refusal,
                _ => StopReason::EndTurn,
            }),
            EngineStop::StepLimit(_) => Ok(StopReason::MaxTurnRequests),
            EngineStop::Interrupted => Ok(StopReason::Cancelled),
            // The person who rejected knows why; anything else is said in the message stream.
            EngineStop::Blocked(codeloop_core::Blocked::Rejected { .. }) => Ok(StopReason::EndTurn),
            EngineStop::Blocked(blocked) => {
                if !self.rejected.load(Ordering::SeqCst) {
                    self.agent.notice(&self.session.id, &blocked.to_string()).await;
                }
                Ok(StopReason::EndTurn)
            }
            EngineStop::Error(error) => Err(RpcError::internal(error.message())),
            // A spending limit cut the turn short: the editor shows why, and the turn ends as one
            // whose requests ran out.
            EngineStop::Limit(reached) => {
                self.agent.notice(&self.session.id, &reached.to_string()).await;
                Ok(StopReason::MaxTurnRequests)
            }
            EngineStop::HookStopped(reason) => {
                self.agent.notice(&self.session.id, &format!("a hook ended the run: {reason}")).await;
                Ok(StopReason::EndTurn)
            }
        }
    }

    async fn event(&mut self, payload: &EventPayload) {
        match payload {
            EventPayload::SessionWarning { session_id, message } if self.ours(session_id, None) => {
                self.agent.notice(&self.session.id, &format!("warning: {message}")).await;
            }
            EventPayload::SessionNotice { session_id, message } if self.ours(session_id, None) => {
                self.agent.notice(&self.session.id, &format!("notice: {message}")).await;
            }
            EventPayload::HookRan { session_id, event, command, decision, .. }
                if self.ours(session_id, None) && decision != "none" =>
            {
                self.agent.notice(&self.session.id, &format!("hook {event} `{command}`: {decision}")).await;
            }
            EventPayload::PermissionAsked(request)
                if self.ours(&request.session_id, request.parent_session_id.as_ref()) =>
            {
                self.permission(request.clone()).await;
            }
            EventPayload::PermissionReplied { request_id, .. } => {
                if let Some(token) = self.forwarded.remove(request_id) {
                    token.cancel();
                }
            }
            EventPayload::QuestionAsked(request)
                if self.ours(&request.session_id, request.parent_session_id.as_ref()) =>
            {
                // ACP has no way to ask; the question ends the turn and the person answers in the chat.
                let text: Vec<String> = request
                    .questions
                    .iter()
                    .map(|q| {
                        let options: Vec<&str> = q.options.iter().map(|o| o.label.as_str()).collect();
                        if options.is_empty() {
                            q.question.clone()
                        } else {
                            format!("{} ({})", q.question, options.join(" / "))
                        }
                    })
                    .collect();
                let update = SessionUpdate::AgentMessageChunk {
                    content: ContentBlock::text(format!("\n\n{}\n", text.join("\n"))),
                };
                self.agent.send_update(&self.session.id, update).await;
                self.rejected.store(true, Ordering::SeqCst);
                let command = SessionCommand::AnswerQuestion { request: request.id.clone(), answers: None };
                let _ = self.session.engine.submit(command).await;
            }
            EventPayload::ElicitationAsked(request) if self.ours(&request.session_id, None) => {
                self.elicitation(request.clone()).await;
            }
            payload => {
                for update in self.stream.event(payload) {
                    self.agent.send_update(&self.session.id, update).await;
                }
            }
        }
    }

    /// The session itself, or (with its parent named, as requests carry it) one of its subagents'.
    fn ours(&self, id: &SessionId, parent: Option<&SessionId>) -> bool {
        id == &self.session.id || parent == Some(&self.session.id)
    }

    async fn permission(&mut self, request: PermissionRequest) {
        let tool_call = self.tool_call(&request);
        let token = self.asks.child_token();
        self.forwarded.insert(request.id.clone(), token.clone());
        let ask = Ask {
            agent: self.agent.clone(),
            session: self.session.clone(),
            request,
            tool_call,
            token,
            rejected: self.rejected.clone(),
        };
        self.ask_tasks.retain(|task| !task.is_finished());
        self.ask_tasks.push(tokio::spawn(ask.run()));
    }

    /// An MCP server's request for input, as a permission-style question (ACP has no forms): a URL to
    /// visit ("Done" / "Decline"), or a form whose every required field has a default ("Accept the
    /// defaults" / "Decline"). A form that needs typing is declined, and the person told why.
    async fn elicitation(&mut self, request: codeloop_types::ElicitationRequest) {
        use codeloop_types::{ElicitationAction, ElicitationMode, ElicitationReply};
        let ask = &request.ask;
        let (title, accept) = match ask.mode {
            ElicitationMode::Url => {
                let url = ask.url.clone().unwrap_or_default();
                (format!("MCP server {} asks: {} — open {url}", ask.server, ask.message), "Done")
            }
            ElicitationMode::Form if defaults_cover(ask.schema.as_ref()) => {
                (format!("MCP server {} asks: {}", ask.server, ask.message), "Accept the defaults")
            }
            ElicitationMode::Form => {
                let text = format!(
                    "\n\nMCP server {} asked: {} — declined: the form needs typing, which this editor cannot \
                     show (answer it from the web page or a terminal run)\n",
                    ask.server, ask.message
                );
                let update = SessionUpdate::AgentMessageChunk { content: ContentBlock::text(text) };
                self.agent.send_update(&self.session.id, update).await;
                let _ = self.session.engine.answer_elicitation(
                    &request.session_id,
                    &request.id,
                    ElicitationReply::decline(),
                );
                return;
            }
        };
        let tool_call = ToolCallUpdate {
            tool_call_id: request.id.to_string(),
            title: Some(codeloop_tools::ellipsize(&title, 300)),
            raw_input: Some(
                json!({"server": ask.server, "message": ask.message, "mode": ask.mode, "url": ask.url, "schema": ask.schema}),
            ),
            ..Default::default()
        };
        let params = RequestPermissionRequest {
            session_id: self.session.id.to_string(),
            tool_call,
            options: vec![
                option(ALLOW_ONCE, accept.into(), PermissionOptionKind::AllowOnce),
                option(REJECT_ONCE, "Decline".into(), PermissionOptionKind::RejectOnce),
            ],
        };
        let (agent, session, timeout) =
            (self.agent.clone(), self.session.clone(), self.agent.options.permission_timeout);
        tokio::spawn(async move {
            let pending = agent.peer.request(method::REQUEST_PERMISSION, params).await;
            let id = pending.id;
            let answer = tokio::time::timeout(timeout, pending.answer()).await;
            let chosen = match answer {
                Ok(Ok(value)) => {
                    serde_json::from_value::<RequestPermissionResponse>(value).ok().map(|r| r.outcome)
                }
                Ok(Err(_)) => None,
                Err(_) => {
                    agent.peer.forget(id).await;
                    None
                }
            };
            let reply = match chosen {
                Some(PermissionOutcome::Selected { option_id }) if option_id == ALLOW_ONCE => {
                    ElicitationReply { action: ElicitationAction::Accept, content: Some(json!({})) }
                }
                Some(PermissionOutcome::Selected { .. }) => ElicitationReply::decline(),
                Some(PermissionOutcome::Cancelled) | None => {
                    ElicitationReply { action: ElicitationAction::Cancel, content: None }
                }
            };
            let _ = session.engine.answer_elicitation(&request.session_id, &request.id, reply);
        });
    }

    /// The call the request is about, as the client already saw it, or a new one described by the ask.
    fn tool_call(&self, request: &PermissionRequest) -> ToolCallUpdate {
        let shown = request
            .tool
            .as_ref()
            .and_then(|call| self.stream.call_id(call))
            .and_then(|id| self.stream.shown_call(id));
        let what = format!("{} {}", request.permission, request.patterns.join(", "));
        match shown {
            Some(mut call) => {
                call.raw_output = None;
                call
            }
            None => ToolCallUpdate {
                tool_call_id: request.id.to_string(),
                title: Some(codeloop_tools::ellipsize(&what, 120)),
                raw_input: Some(
                    json!({"permission": request.permission, "patterns": request.patterns, "metadata": request.metadata}),
                ),
                ..Default::default()
            },
        }
    }
}

/// One forwarded permission request, waiting for the client's answer.
struct Ask {
    agent: Arc<Agent>,
    session: Arc<AcpSession>,
    request: PermissionRequest,
    tool_call: ToolCallUpdate,
    token: CancellationToken,
    rejected: Arc<AtomicBool>,
}

impl Ask {
    async fn run(self) {
        let always = if self.request.always.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.request.always.join(", "))
        };
        let options = vec![
            option(ALLOW_ONCE, "Allow once".into(), PermissionOptionKind::AllowOnce),
            option(ALLOW_ALWAYS, format!("Always allow{always}"), PermissionOptionKind::AllowAlways),
            option(REJECT_ONCE, "Reject".into(), PermissionOptionKind::RejectOnce),
            option(REJECT_ALWAYS, "Always reject (this session)".into(), PermissionOptionKind::RejectAlways),
        ];
        let params = RequestPermissionRequest {
            session_id: self.session.id.to_string(),
            tool_call: self.tool_call.clone(),
            options,
        };
        let pending = self.agent.peer.request(method::REQUEST_PERMISSION, params).await;
        let id = pending.id;
        let timeout = self.agent.options.permission_timeout;
        let answer = tokio::select! {
            answer = tokio::time::timeout(timeout, pending.answer()) => answer,
            // The engine settled the request some other way (cancel, another answer) or the turn ended.
            _ = self.token.cancelled() => {
                self.agent.peer.forget(id).await;
                return;
            }
        };
        let reject = PermissionAnswer::Reject { message: None };
        let answer = match answer {
            Ok(Ok(value)) => self.answer(value),
            Ok(Err(error)) => {
                tracing::warn!("the client failed to answer a permission request: {error}");
                reject
            }
            Err(_) => {
                self.agent.peer.forget(id).await;
                let text = format!(
                    "No answer to the permission request for `{}` {} within {} s: rejected.",
                    self.request.permission,
                    self.request.patterns.join(", "),
                    timeout.as_secs_f64()
                );
                self.agent.notice(&self.session.id, &text).await;
                reject
            }
        };
        if matches!(answer, PermissionAnswer::Reject { .. } | PermissionAnswer::RejectAlways) {
            self.rejected.store(true, Ordering::SeqCst);
        }
        let command = SessionCommand::AnswerPermission { request: self.request.id.clone(), answer };
        if let Err(e) = self.session.engine.submit(command).await {
            tracing::debug!("permission answer not used: {e}");
        }
    }

    fn answer(&self, value: Value) -> PermissionAnswer {
        let reject = PermissionAnswer::Reject { message: None };
        let response: RequestPermissionResponse = match serde_json::from_value(value) {
            Ok(response) => response,
            Err(e) => {
                tracing::warn!("unreadable permission answer ({e}): rejected");
                return reject;
            }
        };
        match response.outcome {
            PermissionOutcome::Cancelled => reject,
            PermissionOutcome::Selected { option_id } => match option_id.as_str() {
                ALLOW_ONCE => PermissionAnswer::Once,
                ALLOW_ALWAYS => PermissionAnswer::Always,
                REJECT_ONCE => reject,
                // Remembered by the engine for this session: later asks like it are refused there.
                REJECT_ALWAYS => PermissionAnswer::RejectAlways,
                other => {
                    tracing::warn!("unknown permission option `{other}`: rejected");
                    reject
                }
            },
        }
    }
}

/// Whether accepting a form with nothing typed fills every field it requires (from the defaults).
fn defaults_cover(schema: Option<&Value>) -> bool {
    let properties = schema.and_then(|s| s.get("properties"));
    let required = schema.and_then(|s| s.get("required")).and_then(Value::as_array);
    required
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .all(|field| properties.and_then(|p| p.get(field)).and_then(|spec| spec.get("default")).is_some())
}

fn option(id: &str, name: String, kind: PermissionOptionKind) -> PermissionOption {
    PermissionOption { option_id: id.to_owned(), name, kind }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::protocol::EmbeddedResource;

    #[test]
    fn prompt_blocks_become_input_parts() {
        let parsed = input(vec![
            ContentBlock::text("fix it"),
            ContentBlock::Resource {
                resource: EmbeddedResource {
                    uri: "file:///p/a.rs".into(),
                    mime_type: None,
                    text: Some("fn a() {}".into()),
                    blob: None,
                },
            },
            ContentBlock::ResourceLink { uri: "file:///p/b.rs".into(), name: "b.rs".into(), mime_type: None },
        ])
        .unwrap();
        assert_eq!(
            parsed.parts,
            vec![
                InputPart::Text { text: "fix it".into(), synthetic: false },
                InputPart::Text {
                    text: "<context uri=\"file:///p/a.rs\">\nfn a() {}\n</context>".into(),
                    synthetic: true
                },
                InputPart::Text { text: "[@b.rs](file:///p/b.rs)".into(), synthetic: false },
            ]
        );
        assert_eq!(
            input(vec![ContentBlock::text("  ")]).unwrap_err().code,
            crate::protocol::code::INVALID_PARAMS
        );
    }
}
