//! The permission engine (DESIGN.md §4 "Permissions"): layered rules, pending requests, replies, and
//! "always" approvals saved per project in the store.
//!
//! Owns: deciding allow / deny / ask for one request, and waiting for the answer.
//! Must not: know what a tool does with the answer.

mod rules;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use codeloop_store::Store;
use codeloop_tools::{Grant, PermissionAsk, PermissionError};
use codeloop_types::LockExt;
use codeloop_types::{
    EventPayload, PermissionAction, PermissionId, PermissionReply, PermissionRequest, PermissionRule,
    SessionId, ToolCallRef,
};
use tokio::sync::oneshot;

pub use rules::{disabled, evaluate, evaluate_explicit, offered, wildcard_match};

use crate::Bus;

/// What happens to a request nobody has answered yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskPolicy {
    /// Publish `permission.asked` and wait for a reply (terminal prompt, HTTP client).
    Wait,
    /// No one can answer (headless): refuse and stop the run.
    Deny,
    /// No one can answer and the user chose to allow everything that would be asked.
    Allow,
}

/// The answer to a pending request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub reply: PermissionReply,
    /// With `reject`: feedback passed to the model instead of stopping the run.
    pub message: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReplyError {
    #[error("permission request {0} was already answered (the first reply wins)")]
    AlreadyAnswered(PermissionId),
    #[error("no permission request {0}: see the pending ones with GET /permission")]
    Unknown(PermissionId),
}

/// Answered request ids remembered to tell "already answered" from "unknown".
const ANSWERED_MEMORY: usize = 1_024;

/// Who is asking, and under which rules.
pub struct AskContext<'a> {
    pub session_id: &'a SessionId,
    /// The session's parent, when a subagent asks (carried on the request for clients).
    pub parent: Option<&'a SessionId>,
    /// The project the approval applies to (the worktree root).
    pub project: &'a str,
    /// Rule layers after the built-in defaults: agent, config, session (in that order).
    pub layers: &'a [&'a [PermissionRule]],
    /// An untrusted project's rules: they can only make a decision stricter.
    pub narrowing: &'a [PermissionRule],
    pub tool: Option<ToolCallRef>,
}

struct Pending {
    request: PermissionRequest,
    project: String,
    layers: Vec<PermissionRule>,
    narrowing: Vec<PermissionRule>,
    grant: Grant,
    answer: oneshot::Sender<Reply>,
}

/// What a person chose to always reject in a session: a permission, for the patterns these cover.
type RejectedAlways = (String, Vec<String>);

pub struct PermissionEngine {
    store: Arc<dyn Store>,
    bus: Bus,
    policy: AskPolicy,
    defaults: Vec<PermissionRule>,
    pending: Mutex<HashMap<PermissionId, Pending>>,
    answered: Mutex<std::collections::VecDeque<PermissionId>>,
    approvals: Mutex<HashMap<String, Vec<PermissionRule>>>,
    /// `(permission, patterns)` a person chose to always reject, per session, in this process.
    session_rejects: Mutex<HashMap<SessionId, Vec<RejectedAlways>>>,
}

/// Built-in defaults (reference §9): everything allowed except doom loops, paths outside the project and
/// secrets (`.env` files, keys, `~/.ssh` and friends), which ask whatever way they are read.
pub fn default_rules(always_allowed_dirs: &[String], home: Option<&std::path::Path>) -> Vec<PermissionRule> {
    use PermissionAction::*;
    let mut rules = vec![
        PermissionRule::new("*", "*", Allow),
        PermissionRule::new("doom_loop", "*", Ask),
        PermissionRule::new("external_directory", "*", Ask),
        // An MCP server asking the session's model (DESIGN.md §5o): a person or a rule naming the server.
        PermissionRule::new(crate::mcp::SAMPLING_PERMISSION, "*", Ask),
    ];
    for dir in always_allowed_dirs {
        rules.push(PermissionRule::new(
            "external_directory",
            format!("{}/*", dir.trim_end_matches('/')),
            Allow,
        ));
    }
    rules.extend([
        PermissionRule::new("question", "*", Deny),
        PermissionRule::new("read", "*.env", Ask),
        PermissionRule::new("read", "*.env.*", Ask),
        PermissionRule::new("read", "*.env.example", Allow),
        PermissionRule::new("read", "*.pem", Ask),
        PermissionRule::new("read", "*.key", Ask),
    ]);
    if let Some(home) = home {
        let home = home.display().to_string();
        let home = home.trim_end_matches('/');
        for dir in [".ssh", ".aws", ".gnupg"] {
            rules.push(PermissionRule::new("read", format!("{home}/{dir}/*"), Ask));
        }
        rules.push(PermissionRule::new("read", format!("{home}/.netrc"), Ask));
    }
    rules
}

impl PermissionEngine {
    pub fn new(store: Arc<dyn Store>, bus: Bus, policy: AskPolicy, defaults: Vec<PermissionRule>) -> Self {
        Self {
            store,
            bus,
            policy,
            defaults,
            pending: Mutex::new(HashMap::new()),
            answered: Mutex::new(std::collections::VecDeque::new()),
            approvals: Mutex::new(HashMap::new()),
            session_rejects: Mutex::new(HashMap::new()),
        }
    }

    pub fn policy(&self) -> AskPolicy {
        self.policy
    }

    pub fn defaults(&self) -> &[PermissionRule] {
        &self.defaults
    }

    fn saved_approvals(&self, project: &str) -> Vec<PermissionRule> {
        let mut cache = self.approvals.locked();
        if let Some(rules) = cache.get(project) {
            return rules.clone();
        }
        let rules: Vec<PermissionRule> = match self.store.list_approvals(Some(project)) {
            Ok(approvals) => approvals.into_iter().map(|a| a.rule).collect(),
            Err(e) => {
                tracing::warn!("could not read saved approvals: {e}");
                Vec::new()
            }
        };
        cache.insert(project.to_owned(), rules.clone());
        rules
    }

    /// The decision for every pattern without asking anyone: `Deny` if any is denied, `Allow` if all are
    /// allowed, else `Ask`. Also returns the deciding deny rule for the error message.
    fn decide(
        &self,
        ctx: &AskContext<'_>,
        ask: &PermissionAsk,
    ) -> (PermissionAction, Option<PermissionRule>) {
        let approvals = match ask.grant {
            Grant::Rules | Grant::Brake => self.saved_approvals(ctx.project),
            // "Always" answers never cover protected paths or sandbox escapes.
            Grant::Explicit => Vec::new(),
        };
        let mut layers: Vec<&[PermissionRule]> = vec![&self.defaults];
        layers.extend(ctx.layers.iter().copied());
        layers.push(&approvals);
        decide_patterns(ask, &layers, ctx.narrowing)
    }

    /// Whether the rules allow every pattern of `ask` as they stand, without asking anyone.
    pub fn allows(&self, ctx: &AskContext<'_>, ask: &PermissionAsk) -> bool {
        self.decide(ctx, ask).0 == PermissionAction::Allow
    }

    /// What the rules say of `ask` without asking anyone.
    pub fn decision(&self, ctx: &AskContext<'_>, ask: &PermissionAsk) -> PermissionAction {
        self.decide(ctx, ask).0
    }

    /// Resolves when the call may go ahead, following the rules and, when they say ask, the reply.
    pub async fn ask(&self, ctx: AskContext<'_>, ask: PermissionAsk) -> Result<(), PermissionError> {
        self.ask_with(ctx, ask, false).await
    }

    /// As [`Self::ask`]; with `force_ask` a rule's allow asks all the same (a hook asked for it).
    pub async fn ask_with(
        &self,
        ctx: AskContext<'_>,
        ask: PermissionAsk,
        force_ask: bool,
    ) -> Result<(), PermissionError> {
        match self.decide(&ctx, &ask) {
            (PermissionAction::Allow, _) if !force_ask => return Ok(()),
            (PermissionAction::Allow, _) => {}
            (PermissionAction::Deny, rule) => {
                let rule = rule
                    .map(|r| format!(" (rule: {} {} → deny)", r.permission, r.pattern))
                    .unwrap_or_default();
                return Err(PermissionError::Denied {
                    message: format!(
                        "Permission denied: `{}` for {}{rule}. The configuration forbids this; do not retry it.",
                        ask.permission,
                        ask.patterns.join(", ")
                    ),
                });
            }
            (PermissionAction::Ask, _) => {}
        }
        match (self.policy, ask.grant) {
            (AskPolicy::Allow, Grant::Rules) => return Ok(()),
            // A brake is not a question: answering it "yes" for the user would defeat it.
            (AskPolicy::Allow | AskPolicy::Deny, Grant::Brake) => {
                return Err(PermissionError::Blocked {
                    message: format!(
                        "`{}` for `{}` is a brake that stops a headless run (--on-ask allow does not answer it); \
                         if the repetition is intended, add [permission] {} = \"allow\" to your config",
                        ask.permission,
                        ask.patterns.join(", "),
                        ask.permission
                    ),
                });
            }
            (AskPolicy::Allow, Grant::Explicit) => {
                return Err(PermissionError::Blocked {
                    message: format!(
                        "`{}` for `{}` is only granted by a rule that names it or by a person's answer, never by \
                         --on-ask allow; add a rule such as [permission] {} = {{ \"{}\" = \"allow\" }} to your config",
                        ask.permission,
                        ask.patterns.join(", "),
                        ask.permission,
                        ask.patterns.first().map(String::as_str).unwrap_or("PATTERN"),
                    ),
                });
            }
            (AskPolicy::Deny, Grant::Rules | Grant::Explicit) => {
                return Err(PermissionError::Blocked {
                    message: format!(
                        "permission `{}` for `{}` needs approval and no one can answer in this headless run; \
                         re-run with --on-ask allow, or add a rule such as [permission] {} = \"allow\" to your config",
                        ask.permission,
                        ask.patterns.join(", "),
                        ask.permission
                    ),
                });
            }
            (AskPolicy::Wait, _) => {
                if let Some(message) = self.rejected_always(ctx.session_id, &ask) {
                    return Err(PermissionError::Corrected { message });
                }
            }
        }
        let request = PermissionRequest {
            id: PermissionId::new(),
            session_id: ctx.session_id.clone(),
            parent_session_id: ctx.parent.cloned(),
            permission: ask.permission.clone(),
            patterns: ask.patterns.clone(),
            always: ask.always.clone(),
            metadata: ask.metadata.clone(),
            tool: ctx.tool.clone(),
        };
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.pending.locked();
            pending.insert(
                request.id.clone(),
                Pending {
                    request: request.clone(),
                    project: ctx.project.to_owned(),
                    layers: ctx.layers.iter().flat_map(|l| l.iter().cloned()).collect(),
                    narrowing: ctx.narrowing.to_vec(),
                    grant: ask.grant,
                    answer: tx,
                },
            );
        }
        let id = request.id.clone();
        self.bus.publish(EventPayload::PermissionAsked(request));
        // If the asking call is cancelled, this future is dropped: remove the stale request.
        let guard = PendingGuard { engine: self, id };
        let reply = rx.await;
        drop(guard);
        match reply {
            Ok(Reply { reply: PermissionReply::Once | PermissionReply::Always, .. }) => Ok(()),
            Ok(Reply { reply: PermissionReply::Reject, message: Some(message) })
                if !message.trim().is_empty() =>
            {
                Err(PermissionError::Corrected { message })
            }
            Ok(Reply { reply: PermissionReply::Reject, .. }) | Err(_) => Err(PermissionError::Rejected),
        }
    }

    /// Rejects a pending request as a plain rejection does (the run stops), and from now on every ask of
    /// its session for the same permission whose patterns the request's "always" patterns cover (in this
    /// process): those are refused without asking, the model is told, and the run goes on.
    pub fn reject_always(&self, id: &PermissionId) -> Result<(), ReplyError> {
        let found = self.pending.locked().get(id).map(|p| {
            let request = &p.request;
            let covers = if request.always.is_empty() { &request.patterns } else { &request.always };
            (request.session_id.clone(), request.permission.clone(), covers.clone())
        });
        let Some((session, permission, always)) = found else {
            return self.reply(id, Reply { reply: PermissionReply::Reject, message: None });
        };
        self.session_rejects.locked().entry(session).or_default().push((permission, always));
        self.reply(id, Reply { reply: PermissionReply::Reject, message: None })
    }

    /// The note for an ask a person chose to always reject in its session, if they did.
    fn rejected_always(&self, session: &SessionId, ask: &PermissionAsk) -> Option<String> {
        let rejects = self.session_rejects.locked();
        let covered = rejects.get(session)?.iter().any(|(permission, patterns)| {
            permission == &ask.permission
                && ask.patterns.iter().all(|p| patterns.iter().any(|r| rules::wildcard_match(r, p)))
        });
        covered.then(|| reject_always_note(&ask.permission, &ask.patterns))
    }

    /// Requests waiting for an answer, oldest first.
    pub fn pending(&self, session: Option<&SessionId>) -> Vec<PermissionRequest> {
        let pending = self.pending.locked();
        let mut list: Vec<PermissionRequest> = pending
            .values()
            .filter(|p| session.is_none_or(|s| &p.request.session_id == s))
            .map(|p| p.request.clone())
            .collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        list
    }

    /// Answers a pending request. The first reply wins; later ones get `NotPending`.
    pub fn reply(&self, id: &PermissionId, reply: Reply) -> Result<(), ReplyError> {
        let mut pending = self.pending.locked();
        let Some(entry) = pending.remove(id) else {
            let answered = self.answered.locked();
            return Err(if answered.contains(id) {
                ReplyError::AlreadyAnswered(id.clone())
            } else {
                ReplyError::Unknown(id.clone())
            });
        };
        let session_id = entry.request.session_id.clone();
        let mut settled = vec![(entry.request.id.clone(), reply.reply)];
        match reply.reply {
            PermissionReply::Always if entry.grant == Grant::Explicit => {
                // Protected paths and sandbox escapes are answered one call at a time.
                let _ = entry.answer.send(Reply { reply: PermissionReply::Once, message: None });
            }
            PermissionReply::Always => {
                let rules: Vec<PermissionRule> = entry
                    .request
                    .always
                    .iter()
                    .map(|p| {
                        PermissionRule::new(
                            entry.request.permission.clone(),
                            p.clone(),
                            PermissionAction::Allow,
                        )
                    })
                    .collect();
                for rule in &rules {
                    if let Err(e) = self.store.add_approval(&entry.project, rule) {
                        tracing::warn!("could not save approval: {e}");
                    }
                }
                self.approvals.locked().remove(&entry.project);
                let _ = entry.answer.send(reply.clone());
                // Other requests of the same session that are now fully allowed go ahead too.
                let ready: Vec<PermissionId> = pending
                    .iter()
                    .filter(|(_, p)| p.request.session_id == session_id)
                    .filter(|(_, p)| self.allowed_now(p))
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in ready {
                    if let Some(p) = pending.remove(&id) {
                        let _ = p.answer.send(Reply { reply: PermissionReply::Always, message: None });
                        settled.push((id, PermissionReply::Always));
                    }
                }
            }
            PermissionReply::Reject => {
                let _ = entry.answer.send(reply.clone());
                // A rejection stops the run: every other request of the session is rejected with it.
                let others: Vec<PermissionId> = pending
                    .iter()
                    .filter(|(_, p)| p.request.session_id == session_id)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in others {
                    if let Some(p) = pending.remove(&id) {
                        let _ = p.answer.send(Reply { reply: PermissionReply::Reject, message: None });
                        settled.push((id, PermissionReply::Reject));
                    }
                }
            }
            PermissionReply::Once => {
                let _ = entry.answer.send(reply.clone());
            }
        }
        drop(pending);
        {
            let mut answered = self.answered.locked();
            for (request_id, _) in &settled {
                if answered.len() == ANSWERED_MEMORY {
                    answered.pop_front();
                }
                answered.push_back(request_id.clone());
            }
        }
        for (request_id, reply) in settled {
            self.bus.publish(EventPayload::PermissionReplied {
                session_id: session_id.clone(),
                request_id,
                reply,
            });
        }
        Ok(())
    }

    fn allowed_now(&self, pending: &Pending) -> bool {
        if pending.grant == Grant::Explicit {
            return false;
        }
        let approvals = self.saved_approvals(&pending.project);
        let layers: [&[PermissionRule]; 3] = [&self.defaults, &pending.layers, &approvals];
        pending.request.patterns.iter().all(|p| {
            let action = evaluate(&pending.request.permission, p, layers.iter().copied()).0;
            stricter(action, narrowed(&pending.request.permission, p, &pending.narrowing))
                == PermissionAction::Allow
        })
    }

    /// Rejects every pending request of a session (the run is stopping).
    pub fn reject_session(&self, session: &SessionId) {
        let ids: Vec<PermissionId> = self.pending(Some(session)).into_iter().map(|r| r.id).collect();
        for id in ids {
            let _ = self.reply(&id, Reply { reply: PermissionReply::Reject, message: None });
        }
    }

    fn forget(&self, id: &PermissionId) {
        self.pending.locked().remove(id);
    }
}

/// The decision for every pattern of `ask` across `layers`, made stricter by `narrowing`.
fn decide_patterns(
    ask: &PermissionAsk,
    layers: &[&[PermissionRule]],
    narrowing: &[PermissionRule],
) -> (PermissionAction, Option<PermissionRule>) {
    let patterns: Vec<&str> =
        if ask.patterns.is_empty() { vec!["*"] } else { ask.patterns.iter().map(String::as_str).collect() };
    let mut all_allowed = true;
    for pattern in patterns {
        let (action, rule) = match ask.grant {
            Grant::Rules | Grant::Brake => evaluate(&ask.permission, pattern, layers.iter().copied()),
            Grant::Explicit => evaluate_explicit(&ask.permission, pattern, layers.iter().copied()),
        };
        let (project_action, project_rule) = evaluate(&ask.permission, pattern, [narrowing]);
        let (action, rule) = match project_rule {
            Some(project_rule) if stricter(action, project_action) != action => {
                (project_action, Some(project_rule))
            }
            _ => (action, rule),
        };
        match action {
            PermissionAction::Deny => return (PermissionAction::Deny, rule.cloned()),
            PermissionAction::Ask => all_allowed = false,
            PermissionAction::Allow => {}
        }
    }
    if all_allowed { (PermissionAction::Allow, None) } else { (PermissionAction::Ask, None) }
}

/// What an untrusted project's rules say of one pattern: `Allow` (no constraint) when none matches.
fn narrowed(permission: &str, pattern: &str, narrowing: &[PermissionRule]) -> PermissionAction {
    let (action, rule) = evaluate(permission, pattern, [narrowing]);
    if rule.is_some() { action } else { PermissionAction::Allow }
}

fn reject_always_note(permission: &str, patterns: &[String]) -> String {
    format!(
        "The user chose to always reject `{permission}` for {} in this session; do not try it again.",
        patterns.join(", ")
    )
}

/// The stricter of two actions: deny > ask > allow.
pub fn stricter(a: PermissionAction, b: PermissionAction) -> PermissionAction {
    use PermissionAction::*;
    match (a, b) {
        (Deny, _) | (_, Deny) => Deny,
        (Ask, _) | (_, Ask) => Ask,
        (Allow, Allow) => Allow,
    }
}

struct PendingGuard<'a> {
    engine: &'a PermissionEngine,
    id: PermissionId,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.engine.forget(&self.id);
    }
}
