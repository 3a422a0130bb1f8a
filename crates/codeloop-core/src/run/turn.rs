//! One normal turn: build the request from the in-memory history, call the provider through the
//! processor with bounded retries, and decide what comes next.

use std::sync::Arc;

use codeloop_provider::{ChatMessage, ProviderError, ProviderRequest, ToolCallText, ToolChoice, UserContent};
use codeloop_store::MessageWithParts;
use codeloop_types::{
    AssistantError, AssistantMessage, EventPayload, Finish, Message, MessagePath, ModelRef, Part, PartKind,
    PermissionRule, SessionStatus, UserMessage, now_ms,
};

use super::{Flow, Run};
use crate::agents::Agent;
use crate::compaction::{max_output, overflow_threshold, request_size, usable};
use crate::error::RunError;
use crate::instructions::SystemPrompt;
use crate::models::ResolvedModel;
use crate::outcome::StopReason;
use crate::processor::{AttemptEnd, Finished, Next, Processor, TurnContext};
use crate::projection::{ProjectionOptions, lead_with_context, to_provider_messages, visible_history};
use crate::retry::{RetryDecision, RetryPolicy};
use crate::tool_host::ToolGate;

/// Sent as the last message on the final allowed step, with no tools offered.
pub const MAX_STEPS_TEXT: &str = "The maximum number of steps for this task has been reached and tools are now disabled. Do not call any tool. Reply in text only: say that the step limit was reached, summarise what was done, list what remains, and recommend the next steps.";

/// What a finished attempt loop produced.
pub(super) struct TurnEnd {
    pub error: Option<AssistantError>,
    /// The provider said the request does not fit.
    pub overflow: bool,
    pub halted: Option<crate::outcome::Blocked>,
}

impl Run<'_> {
    pub(super) fn agent(&self, name: &str) -> Result<Agent, RunError> {
        Ok(crate::agents::find(&self.services.agents, name)?.clone())
    }

    /// The OS walls of an agent's commands in this run.
    fn walls_of(&mut self, agent: &Agent) -> Option<Arc<codeloop_tools::Walls>> {
        let (setup, config, paths) = (&self.services.walls, &self.services.config.sandbox, &self.paths);
        self.walls
            .entry(agent.name.clone())
            .or_insert_with(|| crate::walls::walls_for(setup, config, paths, &agent.name).map(Arc::new))
            .clone()
    }

    /// Permission rules after the built-in defaults: agent, config, session.
    pub(super) fn layers(&self, agent: &Agent) -> Arc<Vec<PermissionRule>> {
        let mut rules = agent.permission.clone();
        rules.extend(self.policy.permission.iter().cloned());
        rules.extend(self.session.permission.iter().cloned());
        Arc::new(rules)
    }

    /// The turn's rules: a command's `allowed-tools` pre-approve after every other rule, and every deny
    /// rule holds again after them (allowed-tools never lifts a deny).
    fn layers_with(&self, agent: &Agent, allowed_tools: &[String]) -> Arc<Vec<PermissionRule>> {
        let layers = self.layers(agent);
        if allowed_tools.is_empty() {
            return layers;
        }
        let mut rules = (*layers).clone();
        let denies: Vec<PermissionRule> =
            rules.iter().filter(|r| r.action == codeloop_types::PermissionAction::Deny).cloned().collect();
        rules.extend(crate::config::claude_allow_rules(allowed_tools, &self.project.root));
        rules.extend(denies);
        Arc::new(rules)
    }

    pub(super) fn turn_context(
        &mut self,
        agent: &Agent,
        model: &ResolvedModel,
        tools_enabled: bool,
        summary: bool,
        estimated_input_tokens: u64,
        offered: Vec<String>,
    ) -> Arc<TurnContext> {
        let compaction = &self.services.config.compaction;
        let layers = self.layers_with(agent, &self.allowed_tools);
        Arc::new(TurnContext {
            journal: self.services.journal.clone(),
            gate: Arc::new(
                ToolGate::new(
                    self.services.clone(),
                    self.runs.clone(),
                    self.session.id.clone(),
                    self.session.parent_id.clone(),
                    layers,
                    self.policy.narrowing.clone(),
                    self.project.root.display().to_string(),
                )
                .with_hooks(self.hooks())
                .with_model(model.reference.clone()),
            ),
            project: self.paths.clone(),
            tool_output_dir: self.services.tool_output_dir.clone(),
            limits: self.services.limits(),
            pricing: model.pricing.clone(),
            overflow_at: if summary { None } else { overflow_threshold(&model.limits, compaction) },
            tools_enabled,
            summary,
            estimated_input_tokens,
            tools: self.tools.registry.clone(),
            offered,
            continue_on_reject: self.services.config.continue_on_reject,
            walls: self.walls_of(agent),
            seen: Some(self.seen.clone()),
        })
    }

    fn build_request(
        &mut self,
        agent: &Agent,
        model: &ResolvedModel,
        user: &UserMessage,
        last_step: bool,
    ) -> ProviderRequest {
        let visible = visible_history(&self.history);
        let mut messages = to_provider_messages(&visible, &model.reference, ProjectionOptions::default());
        if !self.mcp_notes.is_empty() {
            let notes = std::mem::take(&mut self.mcp_notes).join("\n");
            messages.push(ChatMessage::User(vec![UserContent::Text(format!("[codeloop: {notes}]"))]));
        }
        if last_step {
            messages.push(ChatMessage::User(vec![UserContent::Text(MAX_STEPS_TEXT.into())]));
        }
        let offer = self.offer(agent, model);
        let SystemPrompt { stable: mut system, context } = offer.system.clone();
        lead_with_context(&mut messages, context);
        if let Some(extra) = &user.system {
            system.push(extra.clone());
        }
        // Anthropic rejects tool_use blocks in history without tool definitions: there the tools stay
        // listed and tool_choice "none" forbids calling them.
        let keep_tools = !last_step || model.wire == codeloop_provider::WireApi::Anthropic;
        let tools = if keep_tools { offer.tools.clone() } else { Vec::new() };
        let max_output_tokens = max_output(&model.limits);
        let reasoning = self.reasoning(agent, model, user, max_output_tokens);
        let thinks = reasoning.as_ref().is_some_and(codeloop_provider::Reasoning::thinks);
        ProviderRequest {
            model: model.api_id.clone(),
            system,
            messages,
            tool_choice: if last_step { ToolChoice::None } else { ToolChoice::Auto },
            tools,
            max_output_tokens: Some(max_output_tokens),
            // A thinking model samples as its provider decides (Anthropic refuses a temperature then).
            temperature: agent
                .temperature
                .or(model.temperature)
                .filter(|_| model.accepts_temperature && !thinks),
            top_p: model.top_p.filter(|_| !thinks),
            tool_call_text: model.tool_call_text,
            session_id: Some(self.session.id.to_string()),
            reasoning,
            cache: Some(self.encoded.clone()),
        }
    }

    /// The thinking asked for: the prompt's effort, else the agent's, else the model's config. A level the
    /// model cannot take is not sent, with one warning per run.
    fn reasoning(
        &mut self,
        agent: &Agent,
        model: &ResolvedModel,
        user: &UserMessage,
        max_output_tokens: u64,
    ) -> Option<codeloop_provider::Reasoning> {
        let effort = user.effort.or(agent.effort).or(model.effort)?;
        match model.info.reasoning_for(effort, model.wire, max_output_tokens) {
            Ok(reasoning) => reasoning,
            Err(why) => {
                if self.effort_warned.insert((model.reference.clone(), effort)) {
                    tracing::warn!("effort {effort} is not sent to {}: {why}", model.reference);
                }
                None
            }
        }
    }

    pub(super) fn new_assistant(
        &self,
        parent: &UserMessage,
        agent: &str,
        model: &ResolvedModel,
    ) -> AssistantMessage {
        AssistantMessage::new(
            self.session.id.clone(),
            parent.id.clone(),
            agent,
            model.reference.clone(),
            MessagePath {
                cwd: self.project.directory.display().to_string(),
                root: self.project.root.display().to_string(),
            },
        )
    }

    /// A normal provider turn answering the user message at `user_index`.
    pub(super) async fn turn(&mut self, user_index: usize) -> Result<Flow, RunError> {
        let Message::User(user) = &self.history[user_index].info else {
            return Err(RunError::Internal("the last user message is not a user message".into()));
        };
        let user = user.clone();
        let agent = self.agent(&user.agent)?;
        let model = self.resolve_model(&user.model)?;
        let last_step = agent.steps.is_some_and(|steps| self.step >= steps);
        let request = self.build_request(&agent, &model, &user, last_step);
        let offer = self.offer(&agent, &model);
        self.note_prefix(crate::prefix::Prefix::of(
            &request,
            &offer.system.context,
            &model.reference,
            &agent.name,
        ));
        let estimate = estimate_request_tokens(&request);
        let offered: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
        self.allowed_tools = user.allowed_tools.clone();
        let ctx = self.turn_context(&agent, &model, !last_step, false, estimate, offered.clone());
        let mut processor = Processor::new(ctx, self.new_assistant(&user, &agent.name, &model));
        let start = self.snapshot().await;
        processor.set_start_snapshot(start.clone());
        let end = self.attempts(&mut processor, &model, request).await;
        if let Some(start) = start {
            self.record_patch(&mut processor, start).await;
        }
        let compaction = self.services.config.compaction.clone();

        let mut error = end.error;
        if end.overflow {
            if compaction.auto {
                processor.request_compaction();
            } else {
                error = Some(AssistantError::ContextOverflow {
                    message: format!(
                        "The conversation no longer fits {}'s context window and automatic compaction is off ([compaction] auto = false). Run `codeloop session compact {}` and then continue, or start a new session.",
                        model.reference, self.session.id
                    ),
                    body: None,
                });
            }
        }
        if error.is_none() && processor.message().finish == Some(Finish::ContentFilter) {
            error = Some(AssistantError::ContentFilter {
                message: "The response was blocked by the provider's content filter".into(),
            });
        }
        let Finished { message, parts, next } = processor.finish(error.clone(), end.halted);
        if model.tool_call_text != ToolCallText::Off && next == Next::Continue {
            self.warn_if_call_written_as_text(&model, &parts, &offered);
        }
        let tokens = message.tokens;
        self.record_assistant(MessageWithParts { info: Message::Assistant(message), parts });

        // Circuit breaker: the first request after a compaction must fit.
        if let Some(trigger) = self.breaker.pending_check.take() {
            let size = request_size(&tokens);
            let usable = usable(&model.limits, &compaction);
            if end.overflow || (usable > 0 && size >= usable) {
                return Ok(Flow::Stop(StopReason::Error(self.breaker_error(
                    &model,
                    size.max(trigger),
                    usable,
                ))));
            }
            if size * 10 > trigger * 8 {
                self.breaker.no_progress += 1;
            } else {
                self.breaker.no_progress = 0;
            }
        }

        match next {
            Next::Blocked(message) => Ok(Flow::Stop(StopReason::Blocked(message))),
            Next::Compact => {
                let trigger =
                    if end.overflow { usable(&model.limits, &compaction) } else { request_size(&tokens) };
                self.request_compaction(&user, true, end.overflow, trigger)
            }
            Next::Stop => Ok(Flow::Stop(match error {
                Some(error) if error.is_aborted() => StopReason::Interrupted,
                Some(error) => StopReason::Error(error),
                None => StopReason::Completed,
            })),
            Next::Continue if last_step => Ok(Flow::Stop(StopReason::StepLimit(self.step))),
            Next::Continue => Ok(Flow::Continue),
        }
    }

    /// An answer with a tool call written as text in it ends the run as if the model were done: say so,
    /// and what to configure (DESIGN.md §1: the provider parses, the loop decides).
    fn warn_if_call_written_as_text(&self, model: &ResolvedModel, parts: &[Part], offered: &[String]) {
        if parts.iter().any(|p| p.as_tool().is_some()) {
            return;
        }
        let text: String = parts
            .iter()
            .filter_map(|p| match &p.kind {
                PartKind::Text(text) if !text.ignored && !text.synthetic => Some(text.text.as_str()),
                _ => None,
            })
            .collect();
        let offered: Vec<&str> = offered.iter().map(String::as_str).collect();
        let Some(call) = codeloop_provider::text_tool_call_inside(&text, &offered) else { return };
        let tool = &call.name;
        let ModelRef { provider_id, model_id } = &model.reference;
        let message = match model.tool_call_text {
            // An answer of calls alone would have been one: this one has other text around it.
            ToolCallText::Parse => format!(
                "the answer has a call to `{tool}` written as text among other text, so nothing ran: \
                 tool_call_text = \"parse\" takes only an answer that is nothing but calls. Continue the session \
                 and ask for the call alone, or start the server with its tool-call parser"
            ),
            ToolCallText::Warn | ToolCallText::Off => format!(
                "the answer looks like a call to `{tool}` written as text, so nothing ran and the run ended. The \
                 server did not turn it into a tool call: start it with its tool-call parser (llama.cpp: --jinja; \
                 vLLM: --enable-auto-tool-choice --tool-call-parser hermes), or let codeloop parse such answers \
                 with tool_call_text = \"parse\" in [provider.{provider_id}.models.\"{model_id}\"] (or \
                 [provider.{provider_id}])"
            ),
        };
        self.services
            .bus
            .publish(EventPayload::SessionWarning { session_id: self.session.id.clone(), message });
    }

    /// A snapshot of the project, when snapshots are on for it. Failures only cost the patch list.
    async fn snapshot(&self) -> Option<String> {
        let snapshots = self.snapshots.as_ref()?;
        match snapshots.track().await {
            Ok(tree) => Some(tree),
            Err(e) => {
                tracing::warn!("snapshot skipped: {e}");
                None
            }
        }
    }

    async fn record_patch(&self, processor: &mut Processor, start: String) {
        let Some(snapshots) = &self.snapshots else { return };
        let Some(end) = self.snapshot().await else { return };
        match snapshots.changed_files(&start, &end).await {
            Ok(files) => processor.record_patch(start, end, files),
            Err(e) => tracing::warn!("could not list the files this step changed: {e}"),
        }
    }

    pub(super) fn breaker_error(&self, model: &ResolvedModel, size: u64, usable: u64) -> AssistantError {
        AssistantError::ContextOverflow {
            message: format!(
                "The context still does not fit {}'s window after compacting ({size} tokens, {usable} usable). Stopping instead of compacting again: start a new session, remove large attachments, or use a model with a larger context window.",
                model.reference
            ),
            body: None,
        }
    }

    /// Calls the provider with bounded retries (DESIGN.md §4 "Retry"). Status `retry` is published before
    /// each wait; an interrupt cuts the wait.
    pub(super) async fn attempts(
        &mut self,
        processor: &mut Processor,
        model: &ResolvedModel,
        request: ProviderRequest,
    ) -> TurnEnd {
        let mut policy = RetryPolicy::new(self.services.config.retry.clone());
        let request = Arc::new(request);
        loop {
            let first_part = processor.part_count();
            let end = processor
                .attempt(model.provider.as_ref(), request.clone(), &self.cancel, &mut self.doom)
                .await;
            let error = match end {
                AttemptEnd::Finished => return TurnEnd { error: None, overflow: false, halted: None },
                AttemptEnd::Aborted => {
                    return TurnEnd { error: Some(AssistantError::aborted()), overflow: false, halted: None };
                }
                AttemptEnd::Halted(message) => {
                    let error = processor.summary_halt_error(&message);
                    return TurnEnd { error, overflow: false, halted: Some(message) };
                }
                AttemptEnd::Failed(error) => error,
            };
            if error.is_context_overflow() {
                return TurnEnd { error: Some(to_assistant_error(&error)), overflow: true, halted: None };
            }
            match policy.next(&error) {
                RetryDecision::Wait { delay, attempt } => {
                    processor.discard_attempt(first_part);
                    let message = error.short_reason();
                    let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                    let next = now_ms().saturating_add(i64::try_from(delay_ms).unwrap_or(i64::MAX));
                    let max_attempts = policy.max_attempts();
                    let status = SessionStatus::Retry { attempt, max_attempts, message, next, delay_ms };
                    self.services.set_status(&self.session.id, status);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.cancel.cancelled() => {
                            return TurnEnd { error: Some(AssistantError::aborted()), overflow: false, halted: None };
                        }
                    }
                    self.services.set_status(&self.session.id, SessionStatus::Busy);
                }
                RetryDecision::GiveUp { reason } => {
                    let mut error = to_assistant_error(&error);
                    if let Some(reason) = reason {
                        append_reason(&mut error, &reason);
                    }
                    return TurnEnd { error: Some(error), overflow: false, halted: None };
                }
            }
        }
    }
}

fn append_reason(error: &mut AssistantError, reason: &str) {
    match error {
        AssistantError::Api { message, .. }
        | AssistantError::ProviderAuth { message, .. }
        | AssistantError::ContextOverflow { message, .. }
        | AssistantError::OutputLength { message }
        | AssistantError::Aborted { message }
        | AssistantError::ContentFilter { message }
        | AssistantError::Unknown { message } => {
            message.push_str(" (");
            message.push_str(reason);
            message.push(')');
        }
    }
}

/// Maps a provider failure to the error recorded on the message.
pub(crate) fn to_assistant_error(error: &ProviderError) -> AssistantError {
    match error {
        ProviderError::Auth { provider, .. } => {
            AssistantError::ProviderAuth { message: error.to_string(), provider_id: provider.clone() }
        }
        ProviderError::ContextOverflow { message, body } => {
            AssistantError::ContextOverflow { message: message.clone(), body: body.clone() }
        }
        ProviderError::Api { status, body, retryable, .. } => AssistantError::Api {
            message: error.to_string(),
            status: *status,
            retryable: *retryable,
            body: body.clone(),
        },
        ProviderError::Connection { .. }
        | ProviderError::HeadersTimeout(_)
        | ProviderError::IdleTimeout(_)
        | ProviderError::Stream { .. } => {
            AssistantError::Api { message: error.to_string(), status: None, retryable: true, body: None }
        }
        ProviderError::ContentFilter { .. } => AssistantError::ContentFilter { message: error.to_string() },
        ProviderError::Unreachable { .. } => {
            AssistantError::Api { message: error.to_string(), status: None, retryable: false, body: None }
        }
        ProviderError::Config { .. } => AssistantError::Unknown { message: error.to_string() },
    }
}

/// The request size in tokens, estimated as characters / 4, for providers that report no usage.
pub(crate) fn estimate_request_tokens(request: &ProviderRequest) -> u64 {
    let system: usize = request.system.iter().map(String::len).sum();
    let messages: usize = request.messages.iter().map(crate::compaction::chat_chars).sum();
    let tools: usize =
        request.tools.iter().map(|t| t.description.len() + t.parameters.to_string().len()).sum();
    ((system + messages + tools) as u64).div_ceil(4)
}
