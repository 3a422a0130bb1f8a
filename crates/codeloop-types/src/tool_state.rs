//! The tool-call state machine: `pending → running → completed | error`.
//!
//! Only a `running` call may become terminal, and a terminal state is never rewritten (prune only sets
//! `time.compacted`). The one exception is [`ToolState::interrupt`], used by cleanup and crash recovery,
//! which also settles a call that never got past `pending`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{FilePart, Millis};

/// The error text of a call that was still open when its turn ended (reference §3.3).
pub const INTERRUPTED_ERROR: &str = "Tool execution aborted";
/// `metadata.outcome` of an interrupted call that had started: it may have acted.
pub const OUTCOME_UNKNOWN: &str = "unknown";
/// `metadata.outcome` of an interrupted call that never started: nothing ran.
pub const OUTCOME_NOT_STARTED: &str = "not_started";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase", try_from = "FlatState")]
pub enum ToolState {
    Pending(ToolPending),
    Running(ToolRunning),
    Completed(ToolCompleted),
    Error(ToolError),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPending {
    #[serde(default = "empty_object")]
    pub input: Value,
    /// Argument text streamed so far.
    #[serde(default)]
    pub raw: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolRunning {
    pub input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    pub time: StartTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartTime {
    pub start: Millis,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCompleted {
    pub input: Value,
    pub output: String,
    pub title: String,
    #[serde(default = "empty_object")]
    pub metadata: Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<FilePart>,
    pub time: ToolTime,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    pub input: Value,
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    pub time: ToolTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolTime {
    pub start: Millis,
    pub end: Millis,
    /// Set when prune cleared this output from the model's view; the stored output stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted: Option<Millis>,
}

/// A refused state change; names both states so a log line says what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal tool state transition: {from} -> {to}")]
pub struct TransitionError {
    pub from: &'static str,
    pub to: &'static str,
}

/// Every field of every state, read in one pass. Serde's internally tagged enums buffer the whole value
/// before choosing the variant; reading flat first and then picking is about twice as fast, and loading
/// a long session is mostly decoding tool states.
#[derive(Deserialize)]
struct FlatState {
    status: FlatStatus,
    #[serde(default = "empty_object")]
    input: Value,
    #[serde(default)]
    raw: String,
    title: Option<String>,
    metadata: Option<Value>,
    output: Option<String>,
    #[serde(default)]
    attachments: Vec<FilePart>,
    error: Option<String>,
    time: Option<FlatTime>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum FlatStatus {
    Pending,
    Running,
    Completed,
    Error,
}

#[derive(Deserialize)]
struct FlatTime {
    start: Millis,
    end: Option<Millis>,
    compacted: Option<Millis>,
}

impl TryFrom<FlatState> for ToolState {
    type Error = String;

    fn try_from(flat: FlatState) -> Result<Self, String> {
        let time = |what: &str| flat.time.as_ref().ok_or_else(|| format!("a {what} tool state needs `time`"));
        let span = |what: &str| -> Result<ToolTime, String> {
            let t = time(what)?;
            let end = t.end.ok_or_else(|| format!("a {what} tool state needs `time.end`"))?;
            Ok(ToolTime { start: t.start, end, compacted: t.compacted })
        };
        Ok(match flat.status {
            FlatStatus::Pending => ToolState::Pending(ToolPending { input: flat.input, raw: flat.raw }),
            FlatStatus::Running => ToolState::Running(ToolRunning {
                time: StartTime { start: time("running")?.start },
                input: flat.input,
                title: flat.title,
                metadata: flat.metadata,
            }),
            FlatStatus::Completed => ToolState::Completed(ToolCompleted {
                time: span("completed")?,
                output: flat.output.ok_or("a completed tool state needs `output`")?,
                input: flat.input,
                title: flat.title.unwrap_or_default(),
                metadata: flat.metadata.unwrap_or_else(empty_object),
                attachments: flat.attachments,
            }),
            FlatStatus::Error => ToolState::Error(ToolError {
                time: span("error")?,
                error: flat.error.ok_or("an error tool state needs `error`")?,
                input: flat.input,
                metadata: flat.metadata,
            }),
        })
    }
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

impl Default for ToolState {
    fn default() -> Self {
        ToolState::Pending(ToolPending { input: empty_object(), raw: String::new() })
    }
}

impl ToolState {
    pub fn status(&self) -> &'static str {
        match self {
            ToolState::Pending(_) => "pending",
            ToolState::Running(_) => "running",
            ToolState::Completed(_) => "completed",
            ToolState::Error(_) => "error",
        }
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, ToolState::Completed(_) | ToolState::Error(_))
    }

    pub fn input(&self) -> &Value {
        match self {
            ToolState::Pending(s) => &s.input,
            ToolState::Running(s) => &s.input,
            ToolState::Completed(s) => &s.input,
            ToolState::Error(s) => &s.input,
        }
    }

    /// When the call started running (`None` while pending).
    pub fn started_at(&self) -> Option<crate::Millis> {
        match self {
            ToolState::Pending(_) => None,
            ToolState::Running(s) => Some(s.time.start),
            ToolState::Completed(s) => Some(s.time.start),
            ToolState::Error(s) => Some(s.time.start),
        }
    }

    /// Metadata of a running, completed or errored call.
    pub fn metadata(&self) -> Option<&Value> {
        match self {
            ToolState::Pending(_) => None,
            ToolState::Running(s) => s.metadata.as_ref(),
            ToolState::Completed(s) => Some(&s.metadata),
            ToolState::Error(s) => s.metadata.as_ref(),
        }
    }

    /// True for an error left by cleanup or recovery (`metadata.interrupted = true`).
    pub fn is_interrupted(&self) -> bool {
        match self {
            ToolState::Error(e) => {
                e.metadata.as_ref().and_then(|m| m.get("interrupted")).and_then(Value::as_bool) == Some(true)
            }
            _ => false,
        }
    }

    fn refuse(&self, to: &'static str) -> TransitionError {
        TransitionError { from: self.status(), to }
    }

    /// Appends streamed argument text to a pending call.
    pub fn append_raw(&mut self, delta: &str) -> Result<(), TransitionError> {
        match self {
            ToolState::Pending(p) => {
                p.raw.push_str(delta);
                Ok(())
            }
            other => Err(other.refuse("pending")),
        }
    }

    /// The call's input is complete: `pending → running`. Only a pending call starts, so a provider that
    /// repeats the call event can never run a tool twice.
    pub fn start(&mut self, input: Value, now: Millis) -> Result<(), TransitionError> {
        match self {
            ToolState::Pending(_) => {
                *self = ToolState::Running(ToolRunning {
                    input,
                    title: None,
                    metadata: None,
                    time: StartTime { start: now },
                });
                Ok(())
            }
            other => Err(other.refuse("running")),
        }
    }

    /// Live progress from inside a running tool.
    pub fn progress(
        &mut self,
        title: Option<String>,
        metadata: Option<Value>,
    ) -> Result<(), TransitionError> {
        match self {
            ToolState::Running(r) => {
                if title.is_some() {
                    r.title = title;
                }
                if metadata.is_some() {
                    r.metadata = metadata;
                }
                Ok(())
            }
            other => Err(other.refuse("running")),
        }
    }

    /// `running → completed`.
    pub fn complete(
        &mut self,
        output: String,
        title: String,
        metadata: Value,
        attachments: Vec<FilePart>,
        now: Millis,
    ) -> Result<(), TransitionError> {
        match self {
            ToolState::Running(r) => {
                *self = ToolState::Completed(ToolCompleted {
                    input: std::mem::take(&mut r.input),
                    output,
                    title,
                    metadata,
                    attachments,
                    time: ToolTime { start: r.time.start, end: now, compacted: None },
                });
                Ok(())
            }
            other => Err(other.refuse("completed")),
        }
    }

    /// `running → error`, keeping the running metadata so partial progress survives.
    pub fn fail(&mut self, error: String, now: Millis) -> Result<(), TransitionError> {
        match self {
            ToolState::Running(r) => {
                *self = ToolState::Error(ToolError {
                    input: std::mem::take(&mut r.input),
                    error,
                    metadata: r.metadata.take(),
                    time: ToolTime { start: r.time.start, end: now, compacted: None },
                });
                Ok(())
            }
            other => Err(other.refuse("error")),
        }
    }

    /// Settles a call that is still pending or running when its turn ends or after a crash:
    /// `error "Tool execution aborted"` with `metadata.interrupted = true` and what is known of its
    /// effects, `metadata.outcome`: `not_started` (it never ran: safe to repeat) or `unknown` (it started
    /// and may have acted before it was cut short).
    pub fn interrupt(&mut self, now: Millis) -> Result<(), TransitionError> {
        let (input, metadata, start, outcome) = match self {
            ToolState::Pending(p) => (std::mem::take(&mut p.input), None, now, OUTCOME_NOT_STARTED),
            ToolState::Running(r) => {
                (std::mem::take(&mut r.input), r.metadata.take(), r.time.start, OUTCOME_UNKNOWN)
            }
            other => return Err(other.refuse("error")),
        };
        let mut metadata = match metadata {
            Some(Value::Object(map)) => map,
            _ => Default::default(),
        };
        metadata.insert("interrupted".into(), Value::Bool(true));
        metadata.insert("outcome".into(), Value::String(outcome.into()));
        *self = ToolState::Error(ToolError {
            input,
            error: INTERRUPTED_ERROR.to_owned(),
            metadata: Some(Value::Object(metadata)),
            time: ToolTime { start, end: now, compacted: None },
        });
        Ok(())
    }

    /// Prune: hides a completed output from the model; the stored output stays.
    pub fn mark_compacted(&mut self, now: Millis) -> Result<(), TransitionError> {
        match self {
            ToolState::Completed(c) => {
                c.time.compacted.get_or_insert(now);
                Ok(())
            }
            other => Err(other.refuse("compacted")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn running() -> ToolState {
        let mut s = ToolState::default();
        s.start(json!({"cmd": "ls"}), 10).unwrap();
        s
    }

    #[test]
    fn only_running_becomes_terminal() {
        let mut pending = ToolState::default();
        assert_eq!(
            pending.complete("x".into(), "t".into(), json!({}), vec![], 1),
            Err(TransitionError { from: "pending", to: "completed" })
        );
        assert!(pending.fail("boom".into(), 1).is_err());

        let mut s = running();
        s.complete("out".into(), "title".into(), json!({"a": 1}), vec![], 20).unwrap();
        let ToolState::Completed(c) = &s else { panic!("not completed") };
        assert_eq!((c.time.start, c.time.end, c.input.clone()), (10, 20, json!({"cmd": "ls"})));
    }

    #[test]
    fn terminal_states_never_change() {
        let mut s = running();
        s.fail("boom".into(), 5).unwrap();
        let before = s.clone();
        assert!(s.complete("x".into(), "t".into(), json!({}), vec![], 6).is_err());
        assert!(s.fail("again".into(), 6).is_err());
        assert!(s.start(json!({}), 6).is_err());
        assert!(s.interrupt(6).is_err());
        let mut again = running();
        assert_eq!(again.start(json!({}), 7), Err(TransitionError { from: "running", to: "running" }));
        assert_eq!(s, before);
    }

    #[test]
    fn interrupt_settles_pending_and_running_keeping_metadata() {
        let mut s = running();
        s.progress(Some("ls".into()), Some(json!({"output": "partial"}))).unwrap();
        s.interrupt(99).unwrap();
        let ToolState::Error(e) = &s else { panic!("not error") };
        assert_eq!(e.error, INTERRUPTED_ERROR);
        assert_eq!(e.metadata, Some(json!({"output": "partial", "interrupted": true, "outcome": "unknown"})));
        assert!(s.is_interrupted());

        let mut p = ToolState::default();
        p.interrupt(5).unwrap();
        assert!(p.is_interrupted());
    }

    #[test]
    fn every_state_round_trips_and_incomplete_ones_are_refused() {
        let mut completed = running();
        completed.progress(Some("t".into()), Some(json!({"k": 1}))).unwrap();
        completed.complete("out".into(), "t".into(), json!({"k": 2}), vec![], 20).unwrap();
        completed.mark_compacted(30).unwrap();
        let mut failed = running();
        failed.fail("boom".into(), 21).unwrap();
        let mut interrupted = ToolState::default();
        interrupted.interrupt(22).unwrap();
        for state in [ToolState::default(), running(), completed, failed, interrupted] {
            let text = serde_json::to_string(&state).unwrap();
            assert_eq!(serde_json::from_str::<ToolState>(&text).unwrap(), state, "{text}");
        }
        let missing = serde_json::from_str::<ToolState>(
            r#"{"status":"completed","input":{},"time":{"start":1,"end":2}}"#,
        );
        assert!(missing.unwrap_err().to_string().contains("output"));
    }

    #[test]
    fn serialises_with_status_tag() {
        let s = running();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v, json!({"status": "running", "input": {"cmd": "ls"}, "time": {"start": 10}}));
        let back: ToolState = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
