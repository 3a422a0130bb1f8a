//! What one handler answered (exit code, stdout JSON) and how the answers of every handler of one firing
//! merge: deny > ask > allow, any block wins, contexts join in config order, long strings are cut.

use serde_json::Value;

use super::HookEvent;
use super::config::{Handler, OnError};

/// Strings a hook hands back are cut past this many characters.
pub const MAX_TEXT: usize = 10_000;

/// A hook's say on a permission (PreToolUse `permissionDecision`, PermissionRequest `behavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    fn parse(text: &str) -> Option<Decision> {
        match text {
            "allow" | "approve" => Some(Decision::Allow),
            "ask" => Some(Decision::Ask),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    }
}

/// The merged answer of one firing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookOutcome {
    /// The strongest permission decision (deny > ask > allow).
    pub decision: Option<Decision>,
    /// Why (the deciding hook's reason).
    pub decision_reason: Option<String>,
    /// A block (exit 2, `decision: "block"`, or a failure with `on_error = "block"`) and its reason.
    pub block: Option<String>,
    /// PreToolUse `updatedInput`: replaces the tool's arguments (the last one in config order).
    pub updated_input: Option<Value>,
    /// Context for the model, in config order.
    pub context: Vec<String>,
    /// `continue: false`: the run ends, with this `stopReason`.
    pub stop: Option<String>,
    /// `systemMessage`s and non-blocking errors: shown to the user.
    pub messages: Vec<String>,
    pub warnings: Vec<String>,
}

impl HookOutcome {
    /// Every text the hook wrote with its control characters escaped (DESIGN.md §5j "Outside text"): its
    /// reasons and messages are shown to the person on every surface. `updatedInput` stays as written.
    pub(super) fn escaped(mut self) -> Self {
        let escape = |text: &mut String| *text = codeloop_types::escape_controls(text).into_owned();
        for text in self.decision_reason.iter_mut().chain(self.block.iter_mut()).chain(self.stop.iter_mut()) {
            escape(text);
        }
        for text in self.context.iter_mut().chain(self.messages.iter_mut()).chain(self.warnings.iter_mut()) {
            escape(text);
        }
        self
    }

    /// The blocking reason, or a deny's, for a gate that treats both alike.
    pub fn denial(&self) -> Option<String> {
        if let Some(reason) = &self.block {
            return Some(reason.clone());
        }
        (self.decision == Some(Decision::Deny)).then(|| self.decision_reason.clone().unwrap_or_default())
    }

    /// The context joined with blank lines, `None` when there is none.
    pub fn context_text(&self) -> Option<String> {
        (!self.context.is_empty()).then(|| self.context.join("\n\n"))
    }

    /// Everything this outcome is, as the JSON `codeloop hooks test` prints.
    pub fn to_json(&self) -> Value {
        let decision = match (&self.block, self.decision) {
            (Some(_), _) => "block",
            (None, Some(Decision::Deny)) => "deny",
            (None, Some(Decision::Ask)) => "ask",
            (None, Some(Decision::Allow)) => "allow",
            (None, None) => "none",
        };
        serde_json::json!({
            "decision": decision,
            "reason": self.block.clone().or_else(|| self.decision_reason.clone()),
            "continue": self.stop.is_none(),
            "stopReason": self.stop,
            "updatedInput": self.updated_input,
            "additionalContext": self.context_text(),
            "systemMessage": (!self.messages.is_empty()).then(|| self.messages.join("\n")),
            "warnings": self.warnings,
        })
    }

    pub(super) fn merge(&mut self, one: HookOutcome) {
        if let Some(decision) = one.decision
            && self.decision.is_none_or(|d| decision > d)
        {
            self.decision = Some(decision);
            self.decision_reason = one.decision_reason;
        }
        if self.block.is_none() {
            self.block = one.block;
        }
        if one.updated_input.is_some() {
            self.updated_input = one.updated_input;
        }
        if self.stop.is_none() {
            self.stop = one.stop;
        }
        self.context.extend(one.context);
        self.messages.extend(one.messages);
        self.warnings.extend(one.warnings);
    }

    /// The `decision` field of `hook.ran`.
    pub(super) fn label(&self) -> &'static str {
        if self.block.is_some() {
            return "block";
        }
        match self.decision {
            Some(Decision::Deny) => "deny",
            Some(Decision::Ask) => "ask",
            Some(Decision::Allow) => "allow",
            None => "none",
        }
    }
}

/// How a handler ended.
#[derive(Debug)]
pub(super) enum Ended {
    Exited {
        code: i32,
        stdout: String,
        stderr: String,
    },
    TimedOut,
    /// Killed by a signal, could not start, or an HTTP request that failed.
    Crashed(String),
}

/// What one handler's run means for `event`.
pub(super) fn interpret(event: HookEvent, handler: &Handler, ended: Ended) -> HookOutcome {
    let mut out = HookOutcome::default();
    let failure = match ended {
        Ended::Exited { code: 0, stdout, .. } => {
            let trimmed = stdout.trim_start();
            if trimmed.starts_with('{') {
                match serde_json::from_str::<Value>(trimmed) {
                    Ok(json) => read_json(event, &json, &mut out),
                    Err(e) => {
                        out.warnings.push(format!("hook `{}` printed invalid JSON ({e})", handler.target))
                    }
                }
            } else if event.stdout_is_context() && !stdout.trim().is_empty() {
                out.context.push(cut(stdout.trim_end()));
            }
            return out;
        }
        Ended::Exited { code: 2, stdout, stderr } => {
            let mut reason = stderr.trim().to_owned();
            if reason.is_empty()
                && let Ok(json) = serde_json::from_str::<Value>(stdout.trim())
            {
                reason = str_field(&json, "reason").unwrap_or_default();
            }
            block(event, cut(&reason), &mut out);
            return out;
        }
        Ended::Exited { code, stderr, .. } => {
            let stderr = stderr.trim();
            let tail = if stderr.is_empty() { String::new() } else { format!(": {}", first_line(stderr)) };
            format!("exited with status {code}{tail}")
        }
        Ended::TimedOut => format!("timed out after {} s", handler.timeout.as_secs_f64()),
        Ended::Crashed(why) => why,
    };
    let message = format!("{} hook `{}` {failure}", event.name(), handler.target);
    if handler.on_error == OnError::Block && event.can_block() {
        block(event, message, &mut out);
    } else {
        out.warnings.push(message);
    }
    out
}

/// An exit 2 or a JSON block (a gate reads it as a deny: [`HookOutcome::denial`]).
fn block(_event: HookEvent, reason: String, out: &mut HookOutcome) {
    out.block = Some(reason);
}

fn read_json(event: HookEvent, json: &Value, out: &mut HookOutcome) {
    if json.get("continue").and_then(Value::as_bool) == Some(false) {
        out.stop = Some(str_field(json, "stopReason").unwrap_or_default());
    }
    if let Some(message) = str_field(json, "systemMessage") {
        out.messages.push(message);
    }
    let specific = json.get("hookSpecificOutput");
    let reason = str_field(json, "reason");
    match json.get("decision") {
        Some(Value::String(d)) if d == "block" => block(event, reason.clone().unwrap_or_default(), out),
        Some(Value::String(d)) if event == HookEvent::PreToolUse => {
            // The older top-level form (`approve` / `block`) Claude Code still reads.
            if let Some(decision) = Decision::parse(d) {
                out.decision = Some(decision);
                out.decision_reason = reason.clone();
            }
        }
        _ => {}
    }
    let behavior = specific.and_then(|s| s.get("decision")).or_else(|| json.get("decision"));
    if event == HookEvent::PermissionRequest
        && let Some(behavior) = behavior.filter(|b| b.is_object())
        && let Some(decision) = behavior.get("behavior").and_then(Value::as_str).and_then(Decision::parse)
    {
        out.decision = Some(decision);
        out.decision_reason = str_field(behavior, "message");
    }
    let Some(specific) = specific else { return };
    if event == HookEvent::PreToolUse {
        if let Some(decision) =
            specific.get("permissionDecision").and_then(Value::as_str).and_then(Decision::parse)
        {
            out.decision = Some(decision);
            out.decision_reason = str_field(specific, "permissionDecisionReason");
        }
        if let Some(input) = specific.get("updatedInput").filter(|i| i.is_object()) {
            out.updated_input = Some(input.clone());
        }
    }
    if let Some(context) = str_field(specific, "additionalContext").filter(|c| !c.is_empty()) {
        out.context.push(context);
    }
}

fn str_field(json: &Value, key: &str) -> Option<String> {
    json.get(key).and_then(Value::as_str).map(cut)
}

fn first_line(text: &str) -> String {
    cut(text.lines().next().unwrap_or(""))
}

/// `text` cut to [`MAX_TEXT`] characters.
pub(super) fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((at, _)) => text[..at].to_owned(),
        None => text.to_owned(),
    }
}
