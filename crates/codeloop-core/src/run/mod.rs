//! The run loop (DESIGN.md §1, §4 "Run loop"): one provider call per iteration, in the order
//! load history → exit? → pending compaction? → overflow? → build request → process.
//!
//! Owns: when to call again, stop, or compact; step limits; retries; the circuit breaker.
//! Must not: parse wire formats or re-read the whole session every step — history is loaded once per run
//! and appended to in memory.

mod compact;
mod hooked;
mod limits;
mod offer;
mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use codeloop_store::MessageWithParts;
use codeloop_types::{
    AssistantError, AssistantMessage, EventPayload, Finish, Message, MessageId, ModelRef, PartKind, Session,
    SessionId, SessionStatus, ToolState,
};
use tokio_util::sync::CancellationToken;

use crate::doom_loop::DoomLoopGuard;
use crate::error::RunError;
use crate::input::{PromptInput, user_message};
use crate::instructions::ProjectInfo;
use crate::models::ResolvedModel;
use crate::outcome::{RunOutcome, StopReason};
use crate::prefix::Prefix;
use crate::services::Services;
use crate::snapshot::Snapshots;
use codeloop_types::LockExt;

/// Input steered into an active run: applied at the next step boundary. Each input is already stored
/// in the session's queue (its id beside it) when it is pushed, so a process that dies before the
/// step boundary leaves it for the settling process to run (DESIGN.md §5b "accepted prompts").
#[derive(Default)]
pub struct Inbox {
    steer: Mutex<Vec<Steered>>,
}

/// One steered input and the id of its stored copy in the session's queue.
#[derive(Clone)]
pub struct Steered {
    pub queued: i64,
    pub input: PromptInput,
}

impl Inbox {
    pub fn push(&self, steered: Steered) {
        self.steer.locked().push(steered);
    }

    pub fn take(&self) -> Vec<Steered> {
        std::mem::take(&mut *self.steer.locked())
    }

    pub fn is_empty(&self) -> bool {
        self.steer.locked().is_empty()
    }
}

/// The newest messages that decide what the loop does next, by position in the ordered history.
struct Latest {
    last_user: Option<usize>,
    last_assistant: Option<usize>,
    /// Newest assistant message with a finish reason.
    last_finished: Option<usize>,
    /// A compaction request that no summary answered yet.
    pending_compaction: Option<usize>,
}

impl Latest {
    fn find(history: &[MessageWithParts]) -> Latest {
        let mut latest =
            Latest { last_user: None, last_assistant: None, last_finished: None, pending_compaction: None };
        let mut answered: std::collections::HashSet<&MessageId> = std::collections::HashSet::new();
        for (index, message) in history.iter().enumerate() {
            match &message.info {
                Message::User(_) => latest.last_user = Some(index),
                Message::Assistant(info) => {
                    latest.last_assistant = Some(index);
                    if info.finish.is_some() {
                        latest.last_finished = Some(index);
                    }
                    answered.insert(&info.parent_id);
                }
            }
        }
        latest.pending_compaction = history
            .iter()
            .enumerate()
            .rev()
            .find(|(_, m)| {
                matches!(m.info, Message::User(_))
                    && m.parts.iter().any(|p| p.as_compaction().is_some())
                    && !answered.contains(m.info.id())
            })
            .map(|(i, _)| i);
        latest
    }

    /// The exit rule: the newest assistant answers the newest user, finished with something other than
    /// tool-calls/unknown, and made no tool calls (the "finish=stop but tool calls" quirk continues).
    fn should_exit(&self, history: &[MessageWithParts]) -> bool {
        let (Some(user), Some(assistant)) = (self.last_user, self.last_assistant) else { return false };
        if assistant < user {
            return false;
        }
        let message = &history[assistant];
        let Message::Assistant(info) = &message.info else { return false };
        // A summary answers its compaction request only: one left by a `session compact` that failed
        // before summarising is processed at the next prompt, and that prompt still needs its answer.
        if info.summary && &info.parent_id != history[user].info.id() {
            return false;
        }
        if matches!(info.finish, None | Some(Finish::ToolCalls) | Some(Finish::Unknown)) {
            return false;
        }
        !message.parts.iter().any(|p| match &p.kind {
            PartKind::Tool(tool) => !tool.state.is_interrupted(),
            _ => false,
        })
    }
}

/// Tracks compactions in one run so a conversation that cannot be made to fit stops instead of
/// compacting forever.
#[derive(Debug, Default)]
struct Breaker {
    /// Size of the request that triggered the last automatic compaction, while its first follow-up is
    /// pending.
    pending_check: Option<u64>,
    no_progress: u32,
}

/// One agent's offer on one model.
pub(crate) struct Offer {
    pub system: crate::instructions::SystemPrompt,
    /// Sorted by name, as the registry lists them.
    pub tools: Vec<codeloop_types::ToolSpec>,
}

/// Compactions in a row that did not shrink the context before the run stops.
pub const MAX_NO_PROGRESS_COMPACTIONS: u32 = 3;

/// One run of a session.
pub(crate) struct Run<'a> {
    services: Arc<Services>,
    runs: Arc<dyn crate::runs::Runs>,
    /// The permission rules and instructions of the session's project.
    policy: crate::services::ProjectPolicy,
    session: Session,
    history: Vec<MessageWithParts>,
    project: ProjectInfo,
    /// What the tools see of the project: its dirs, the session's temp dir, the protected dirs.
    paths: codeloop_tools::ProjectPaths,
    cancel: CancellationToken,
    inbox: &'a Inbox,
    doom: DoomLoopGuard,
    step: u32,
    /// What each agent and model is offered, worked out once per run so every step sends the same prefix.
    offers: HashMap<(String, ModelRef, bool, usize, bool), Arc<Offer>>,
    /// MCP tools `tool_search` loaded in this session, in the order it did (from its history, then as
    /// calls complete), and how many history messages were looked at for them.
    loaded_tools: Vec<String>,
    loaded_scanned: usize,
    /// Each agent's OS walls, worked out once per run (they stat the protected paths).
    walls: HashMap<String, Option<Arc<codeloop_tools::Walls>>>,
    models: HashMap<ModelRef, ResolvedModel>,
    breaker: Breaker,
    snapshots: Option<Arc<Snapshots>>,
    tools: crate::services::ToolSet,
    /// The wire encoding of messages earlier steps sent: a step encodes only the messages that changed.
    encoded: codeloop_provider::EncodeCache,
    /// What the model is told in its next request about MCP servers that stopped or came back.
    mcp_notes: Vec<String>,
    /// What this run spent, checked against `[limits]` before each model request.
    spend: limits::Spend,
    /// A hook's `continue: false`, with its `stopReason`: the run ends at the next step boundary.
    hook_stop: Arc<Mutex<Option<String>>>,
    /// Stop hooks that blocked in a row (at most [`MAX_STOP_BLOCKS`]).
    stop_blocks: u32,
    /// The run did nothing but a manual compaction (`/compact`) since it began: it ends without Stop hooks,
    /// as Claude Code's does.
    compacted_only: bool,
    /// The `allowed-tools` of the command the current turn answers (empty for a plain prompt).
    allowed_tools: Vec<String>,
    /// The files the session has read or written (from its history, then as its tools go).
    seen: Arc<codeloop_tools::SeenFiles>,
    /// Effort levels already warned about as not taken by a model.
    effort_warned: std::collections::HashSet<(ModelRef, codeloop_types::Effort)>,
}

/// The files the history's completed `read`, `edit` and `write` calls touched, as the tools resolve them.
fn seen_files(history: &[MessageWithParts], directory: &std::path::Path) -> codeloop_tools::SeenFiles {
    let seen = codeloop_tools::SeenFiles::default();
    for part in history.iter().flat_map(|m| &m.parts) {
        if let PartKind::Tool(tool) = &part.kind
            && matches!(tool.tool.as_str(), "read" | "edit" | "write")
            && let codeloop_types::ToolState::Completed(done) = &tool.state
            && let Some(path) = done.input.get("filePath").and_then(serde_json::Value::as_str)
        {
            seen.saw(&codeloop_tools::resolve_in(directory, path));
        }
    }
    seen
}

/// Stop-hook blocks in a row after which the run ends all the same (DESIGN.md §5d).
pub const MAX_STOP_BLOCKS: u32 = 8;

/// Runs a session until the model is done, blocked, interrupted or failing.
pub(crate) async fn run_session(
    services: Arc<Services>,
    runs: Arc<dyn crate::runs::Runs>,
    session_id: &SessionId,
    cancel: CancellationToken,
    inbox: &Inbox,
) -> Result<RunOutcome, RunError> {
    // The caller (the coordinator) holds the session's lock. Input it just recorded must be readable.
    services.journal.flush().await?;
    let failed_before = services.journal.failed_writes();
    let id = session_id.clone();
    // Store work happens on the blocking pool, not on the async threads other sessions run on.
    let (session, mut history) = services
        .blocking(move |store| {
            store.recover(Some(&id))?;
            let Some(session) = store.get_session(&id)? else { return Ok(None) };
            Ok(Some((session, store.load_history(&id)?)))
        })
        .await?
        .ok_or_else(|| RunError::SessionNotFound(session_id.clone()))?;
    // Messages a revert hid are never sent (they are removed by the next prompt).
    if let Some(from) = crate::input::reverted_from(&session) {
        history.retain(|m| m.info.id() < &from);
    }
    let project = ProjectInfo::discover(std::path::Path::new(&session.directory));
    let policy = {
        let (services, directory) = (services.clone(), project.directory.clone());
        tokio::task::spawn_blocking(move || services.project_policy(&directory))
            .await
            .map_err(|_| RunError::Lost)?
            .map_err(|e| {
                RunError::Config(format!(
                    "cannot use the config of the session's project ({e}); fix the file, or move it aside"
                ))
            })?
    };
    let snapshots = services.snapshots_for(&project);
    let paths = services.project_paths(&project, session_id);
    let seen = Arc::new(seen_files(&history, &project.directory));
    let mut run = Run {
        services: services.clone(),
        runs,
        policy,
        session,
        history,
        project,
        paths,
        cancel,
        inbox,
        doom: DoomLoopGuard::default(),
        step: 0,
        offers: HashMap::new(),
        loaded_tools: Vec::new(),
        loaded_scanned: 0,
        walls: HashMap::new(),
        models: HashMap::new(),
        breaker: Breaker::default(),
        snapshots,
        tools: services.tool_set().await,
        encoded: codeloop_provider::EncodeCache::new(),
        mcp_notes: Vec::new(),
        effort_warned: Default::default(),
        allowed_tools: Vec::new(),
        seen,
        spend: limits::Spend::new(),
        hook_stop: Default::default(),
        stop_blocks: 0,
        compacted_only: false,
    };
    services.set_status(session_id, SessionStatus::Busy);
    let result = run.drive().await;
    run.sweep_jobs().await;
    if let Ok(StopReason::Error(error)) = &result {
        run.stop_failure(error).await;
    }
    if services.config.compaction.prune && run.prune() {
        run.prefix_changed(codeloop_types::CacheReason::Prune);
    }
    if let Some(snapshots) = run.snapshots.clone() {
        tokio::spawn(async move { snapshots.collect_garbage().await });
    }
    let persisted = services.journal.flush().await;
    let lost = services.journal.failed_writes().saturating_sub(failed_before);
    services.set_status(session_id, SessionStatus::Idle);
    services.bus.publish(EventPayload::SessionIdle { session_id: session_id.clone() });
    let mut stop = result?;
    if stop == StopReason::Interrupted {
        say_jobs_keep_running(&services, session_id);
    }
    // A run whose writes were lost (disk full, read-only data dir) did not complete, however the model
    // ended: it stops with an error that says where (an interrupt keeps its own stop).
    if let Some(error) = storage_failure(&services.data_dir, persisted, lost)
        && stop != StopReason::Interrupted
    {
        tracing::error!("{}", error.message());
        stop = StopReason::Error(error);
    }
    if let StopReason::Error(error) = &stop {
        services.bus.publish(EventPayload::SessionError {
            session_id: Some(session_id.clone()),
            error: error.clone(),
        });
    }
    if let StopReason::Limit(reached) = &stop {
        services.bus.publish(EventPayload::SessionLimit {
            session_id: session_id.clone(),
            limit: reached.limit,
            value: reached.value,
            used: reached.used,
        });
    }
    if let StopReason::Blocked(message) = &stop {
        services.bus.publish(EventPayload::SessionError {
            session_id: Some(session_id.clone()),
            error: AssistantError::Unknown { message: message.to_string() },
        });
    }
    Ok(RunOutcome { session_id: session_id.clone(), message: run.last_assistant().cloned(), stop })
}

/// See [`Run::sweep_jobs`]; nothing to do (and no thread) when no job of the session watches.
async fn sweep_jobs(services: &Services, session_id: &SessionId) {
    if !services.jobs.watches_protected(session_id) {
        return;
    }
    let (jobs, id) = (services.jobs.clone(), session_id.clone());
    let _ = tokio::task::spawn_blocking(move || jobs.sweep_session(&id)).await;
}

/// An interrupt ends the run's own calls, not the session's background jobs: the user is told which run on.
fn say_jobs_keep_running(services: &Services, session_id: &SessionId) {
    let running = services.jobs.running(session_id);
    if running.is_empty() {
        return;
    }
    let ids: Vec<&str> = running.iter().map(|id| id.as_str()).collect();
    services.bus.publish(EventPayload::SessionWarning {
        session_id: session_id.clone(),
        message: format!(
            "{} background job{} still running ({}): /jobs lists and kills them; they end when codeloop exits",
            ids.len(),
            if ids.len() == 1 { "" } else { "s" },
            ids.join(", ")
        ),
    });
}

/// The error of a run some of whose writes failed: `persisted` is its last flush, `lost` the writes
/// that failed during it (errors an earlier flush took are counted there).
fn storage_failure(
    data_dir: &std::path::Path,
    persisted: Result<(), codeloop_store::StoreError>,
    lost: u64,
) -> Option<AssistantError> {
    let cause = match persisted {
        Err(e) => e.to_string(),
        Ok(()) if lost > 0 => format!("{lost} write(s) failed"),
        Ok(()) => return None,
    };
    Some(AssistantError::Unknown {
        message: format!(
            "could not save this session in the data directory {} ({cause}); the answer above may be \
             missing from the stored session. Is the disk full or the directory read-only?",
            data_dir.display()
        ),
    })
}

/// What an iteration decided.
enum Flow {
    Continue,
    Stop(StopReason),
}

impl Run<'_> {
    async fn drive(&mut self) -> Result<StopReason, RunError> {
        loop {
            self.apply_steer()?;
            if self.cancel.is_cancelled() {
                return Ok(StopReason::Interrupted);
            }
            let latest = Latest::find(&self.history);
            if latest.last_user.is_none() {
                return Err(RunError::Input(
                    "the session has no user message to answer: send a prompt first".into(),
                ));
            }
            if let Some(reason) = self.hook_stop.locked().clone() {
                return Ok(StopReason::HookStopped(reason));
            }
            if latest.should_exit(&self.history) {
                if self.compacted_only {
                    return Ok(StopReason::Completed);
                }
                match self.stop_hooks().await? {
                    Flow::Continue => continue,
                    Flow::Stop(reason) => return Ok(reason),
                }
            }
            if let Some(index) = latest.pending_compaction {
                if let Some(reached) = self.limit_reached() {
                    return Ok(StopReason::Limit(reached));
                }
                if self.compaction_blocked(index).await? {
                    continue;
                }
                let auto =
                    self.history[index].parts.iter().find_map(|p| p.as_compaction()).is_some_and(|c| c.auto);
                let flow = self.summarize(index).await?;
                if matches!(flow, Flow::Continue) {
                    self.compacted_hooks(auto).await;
                    self.compacted_only = !auto && self.step == 0;
                }
                match flow {
                    Flow::Continue => continue,
                    Flow::Stop(reason) => return Ok(reason),
                }
            }
            if let Some(flow) = self.overflow_before_call(&latest)? {
                match flow {
                    Flow::Continue => continue,
                    Flow::Stop(reason) => return Ok(reason),
                }
            }
            self.refresh_mcp().await;
            if let Some(reached) = self.limit_reached() {
                return Ok(StopReason::Limit(reached));
            }
            self.step += 1;
            self.compacted_only = false;
            self.sweep_jobs().await;
            let user = self.note_ended_jobs(latest.last_user.unwrap_or(0));
            match self.turn(user).await? {
                Flow::Continue => {}
                Flow::Stop(reason) => {
                    if let Some(stopped) = self.hook_stop.locked().clone() {
                        return Ok(StopReason::HookStopped(stopped));
                    }
                    return Ok(reason);
                }
            }
        }
    }

    /// The first `[limits]` limit this run has reached, checked before each model request.
    fn limit_reached(&self) -> Option<codeloop_types::LimitReached> {
        self.spend.reached(&self.services.config.limits, self.session.cost)
    }

    /// Takes what changed in the MCP servers since the last step: their notices become warnings for the
    /// user (and notes for the model), and a changed tool set is offered from this step on.
    async fn refresh_mcp(&mut self) {
        if self.services.mcp.is_empty() {
            return;
        }
        let tools = self.services.tool_set().await;
        for notice in self.services.mcp.drain_notices() {
            self.services.bus.publish(EventPayload::SessionWarning {
                session_id: self.session.id.clone(),
                message: notice.message,
            });
            self.mcp_notes.extend(notice.for_model);
        }
        if tools.generation != self.tools.generation {
            let before: std::collections::HashSet<&str> =
                self.tools.specs.iter().map(|s| s.name.as_str()).collect();
            let changed = tools.specs.len() != before.len()
                || tools.specs.iter().any(|s| !before.contains(s.name.as_str()));
            self.tools = tools;
            if changed {
                self.offers.clear();
            }
        }
    }

    /// Persists steered input and appends it to the in-memory history.
    fn apply_steer(&mut self) -> Result<(), RunError> {
        for steered in self.inbox.take() {
            // Recorded and taken off the stored queue in one transaction: never lost, never twice.
            let (message, mut batch) = user_message(&self.services, &mut self.session, &steered.input)?;
            batch.write(codeloop_store::Write::RemoveQueued(steered.queued));
            self.services.journal.commit(batch);
            self.history.push(message);
        }
        Ok(())
    }

    /// Protected paths the session's running jobs created are moved out of the project at the latest at
    /// each step boundary and at the run's end (DESIGN.md §5j); each job also looks every second.
    async fn sweep_jobs(&self) {
        sweep_jobs(&self.services, &self.session.id).await;
    }

    /// Background jobs that ended since the last request become a short note in this one (DESIGN.md §5f):
    /// a synthetic user message like the one being answered, recorded so every later request keeps the
    /// same prefix. Only when a request is made anyway: a job's end never starts a turn by itself.
    /// Returns the index of the message the turn answers.
    fn note_ended_jobs(&mut self, user_index: usize) -> usize {
        let notes = self.services.jobs.take_notes(&self.session.id);
        let Some(Message::User(like)) =
            self.history.get(user_index).map(|m| &m.info).filter(|_| !notes.is_empty())
        else {
            return user_index;
        };
        let mut info = crate::compaction::user_info(&self.session.id, like);
        info.system = like.system.clone();
        let mut part = codeloop_types::Part::synthetic_text(
            self.session.id.clone(),
            info.id.clone(),
            crate::jobs::note_text(&notes),
        );
        if let PartKind::Text(text) = &mut part.kind {
            text.metadata = Some(serde_json::json!({ "job_notes": true }));
        }
        let message = MessageWithParts { info: Message::User(info), parts: vec![part] };
        self.services.journal.save_message(&message.info);
        for part in &message.parts {
            self.services.journal.save_part(part);
        }
        self.history.push(message);
        self.history.len() - 1
    }

    fn last_assistant(&self) -> Option<&AssistantMessage> {
        self.history.iter().rev().find_map(|m| m.info.as_assistant())
    }

    fn resolve_model(&mut self, model: &ModelRef) -> Result<ResolvedModel, RunError> {
        if let Some(resolved) = self.models.get(model) {
            return Ok(resolved.clone());
        }
        let resolved = self.services.models.resolve(model)?;
        if !resolved.known {
            tracing::warn!(
                "model {model} is not in the catalogue; assuming a {}-token context and {}-token output. Set [provider.{}.models.\"{}\"] context and output in your config.",
                resolved.limits.context,
                resolved.limits.output,
                model.provider_id,
                model.model_id
            );
        }
        self.models.insert(model.clone(), resolved.clone());
        Ok(resolved)
    }

    /// Adds a finished assistant message to the history and the session totals.
    fn record_assistant(&mut self, message: MessageWithParts) {
        for part in &message.parts {
            if let PartKind::StepFinish(step) = &part.kind {
                self.session.tokens.accumulate(&step.tokens);
                self.session.cost += step.cost;
                self.spend.add(&step.tokens, step.cost);
            }
            // What an MCP server's sampling requests cost during a call counts like a step.
            if let PartKind::Tool(tool) = &part.kind
                && let codeloop_types::ToolState::Completed(done) = &tool.state
                && let Some(sampled) =
                    done.metadata.get(crate::mcp::SAMPLING_META_KEY).and_then(|s| s.as_array())
            {
                for one in sampled {
                    let count = |key: &str| one["tokens"][key].as_u64().unwrap_or(0);
                    let tokens = codeloop_types::Tokens {
                        input: count("input"),
                        output: count("output"),
                        ..Default::default()
                    };
                    let cost = one["cost"].as_f64().unwrap_or(0.0);
                    self.session.tokens.accumulate(&tokens);
                    self.session.cost += cost;
                    self.spend.add(&tokens, cost);
                }
            }
        }
        self.session.time.updated = codeloop_types::now_ms();
        self.services.journal.save_session(&mut self.session);
        self.history.push(message);
    }

    /// Says that codeloop itself changed what the next request starts with (`session.cache`).
    fn prefix_changed(&self, reason: codeloop_types::CacheReason) {
        self.services.bus.publish(EventPayload::SessionCache { session_id: self.session.id.clone(), reason });
    }

    /// Compares the prefix of the step about to be sent with the session's previous one.
    fn note_prefix(&self, prefix: Prefix) {
        // A session the live map forgot is compared with its stored history instead.
        let before = self.services.live.swap_prefix(&self.session.id, prefix.clone());
        let before = before.or_else(|| Prefix::from_history(&self.history, &prefix));
        if let Some(reason) = before.and_then(|before| prefix.changed_from(&before)) {
            self.prefix_changed(reason);
        }
    }

    /// Hides old tool outputs from the model after the run (DESIGN.md §4 "Prune"); true when it hid any.
    fn prune(&mut self) -> bool {
        let visible = crate::projection::visible_history(&self.history);
        let ids: Vec<(MessageId, usize)> = crate::compaction::prune_candidates(&visible)
            .into_iter()
            .map(|(m, p)| (visible[m].info.id().clone(), p))
            .collect();
        if ids.is_empty() {
            return false;
        }
        let now = codeloop_types::now_ms();
        let mut pruned = false;
        for (message_id, part_index) in ids {
            let Some(message) = self.history.iter_mut().find(|m| m.info.id() == &message_id) else {
                continue;
            };
            let Some(part) = message.parts.get_mut(part_index) else { continue };
            if let Some(tool) = part.as_tool_mut()
                && matches!(tool.state, ToolState::Completed(_))
                && tool.state.mark_compacted(now).is_ok()
            {
                self.services.journal.save_part(part);
                pruned = true;
            }
        }
        pruned
    }
}
