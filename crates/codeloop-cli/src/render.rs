//! Rendering bus events for a terminal: streamed text to stdout, tool activity, retries and the final
//! summary to stderr; or one JSON event per line with `--format json`. Text written to a terminal has
//! its control sequences neutralised ([`crate::terminal`]); pipes, files and JSON get the exact text.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use codeloop_core::RunOutcome;
use codeloop_types::{
    Event, EventPayload, Message, MessageId, Part, PartId, PartKind, SessionId, SessionStatus, ToolState,
};
use serde_json::Value;

use crate::Format;
use crate::terminal::Target;

pub struct Renderer {
    format: Format,
    session: SessionId,
    /// Bytes of each text part already written to stdout.
    printed: HashMap<PartId, usize>,
    kinds: HashMap<PartId, &'static str>,
    /// Assistant messages of the session: only their text is the answer.
    assistant: HashSet<MessageId>,
    announced: HashMap<PartId, &'static str>,
    /// Whether stdout ends mid-line.
    open_line: bool,
    /// Stdout, buffered: the caller flushes once per batch of events, not once per delta (a 20 000-delta
    /// answer was 20 000 write calls). Write errors (a closed pipe) end nothing here; the run goes on.
    out: std::io::BufWriter<std::io::Stdout>,
    stdout: Target,
    stderr: Target,
}

impl Renderer {
    pub fn new(format: Format, session: SessionId) -> Self {
        Self {
            format,
            session,
            printed: HashMap::new(),
            kinds: HashMap::new(),
            assistant: HashSet::new(),
            announced: HashMap::new(),
            open_line: false,
            out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout()),
            stdout: Target::stdout(),
            stderr: Target::stderr(),
        }
    }

    /// Writes out what the last batch of events printed.
    pub fn flush(&mut self) {
        let _ = self.out.flush();
    }

    /// Ends an open line of streamed text.
    fn end_line(&mut self) {
        if self.open_line {
            let _ = writeln!(self.out);
            self.open_line = false;
        }
    }

    pub fn event(&mut self, event: &Arc<Event>) {
        if event.payload.session_id() != Some(&self.session) {
            return;
        }
        match self.format {
            Format::Json => {
                if let Ok(line) = serde_json::to_string(event.as_ref()) {
                    let _ = writeln!(self.out, "{line}");
                }
                // A warning or notice is for the person too: the same line as in text output, on stderr.
                match &event.payload {
                    EventPayload::SessionWarning { message, .. } => {
                        eprintln!("{}", self.stderr.show(&format!("warning: {message}")))
                    }
                    EventPayload::SessionNotice { message, .. } => {
                        eprintln!("{}", self.stderr.show(&format!("notice: {message}")))
                    }
                    _ => {}
                }
            }
            Format::Text => self.text_event(&event.payload),
        }
    }

    /// Events were dropped because the terminal fell behind.
    pub fn lagged(&mut self, skipped: u64) {
        if self.format == Format::Json {
            let lagged = serde_json::json!({"type": "lagged", "properties": {"skipped": skipped}});
            let _ = writeln!(self.out, "{lagged}");
        }
    }

    fn text_event(&mut self, payload: &EventPayload) {
        match payload {
            EventPayload::PartDelta { part_id, delta, .. } if self.kinds.get(part_id) == Some(&"text") => {
                self.write_text(part_id, delta);
            }
            // A compaction summary is not the answer: the `SessionCompacted` note stands for it.
            EventPayload::MessageUpdated { info: Message::Assistant(info), .. } if !info.summary => {
                self.assistant.insert(info.id.clone());
            }
            EventPayload::PartUpdated { part, .. } => self.part(part),
            EventPayload::SessionStatus {
                status: SessionStatus::Retry { attempt, max_attempts, message, next, .. },
                ..
            } => {
                let wait = (*next - codeloop_types::now_ms()).max(0) as f64 / 1000.0;
                self.note(&format!("retrying in {wait:.0} s (attempt {attempt}/{max_attempts}): {message}"));
            }
            EventPayload::SessionCompacted { .. } => {
                self.note("context compacted: older messages were summarised")
            }
            EventPayload::SessionWarning { message, .. } => self.note(&format!("warning: {message}")),
            EventPayload::SessionNotice { message, .. } => self.note(&format!("notice: {message}")),
            _ => {}
        }
    }

    fn part(&mut self, part: &Part) {
        if !self.assistant.contains(&part.message_id) {
            return;
        }
        self.kinds.insert(part.id.clone(), part.kind_name());
        match &part.kind {
            // A text part's full text: print whatever deltas did not (e.g. after a lag).
            PartKind::Text(text) if !text.synthetic => {
                let printed = self.printed.get(&part.id).copied().unwrap_or(0);
                if text.text.len() > printed && text.text.is_char_boundary(printed) {
                    let rest = text.text[printed..].to_owned();
                    self.write_text(&part.id, &rest);
                }
                if text.time.end.is_some() {
                    self.end_line();
                }
            }
            PartKind::Tool(tool) => {
                let stage = tool.state.status();
                if self.announced.get(&part.id) == Some(&stage) {
                    return;
                }
                match &tool.state {
                    ToolState::Running(running) => {
                        let detail = running
                            .title
                            .clone()
                            .unwrap_or_else(|| summarize_input(&tool.tool, &running.input));
                        self.note(&format!("→ {} {detail}", tool.tool));
                    }
                    ToolState::Error(error) => {
                        let first = error.error.lines().next().unwrap_or("");
                        self.note(&format!("✗ {}: {first}", tool.tool));
                    }
                    ToolState::Completed(_) | ToolState::Pending(_) => {}
                }
                self.announced.insert(part.id.clone(), stage);
            }
            _ => {}
        }
    }

    fn write_text(&mut self, part: &PartId, text: &str) {
        let _ = self.out.write_all(self.stdout.show(text).as_bytes());
        // Counts the model's bytes, not the shown ones: `part` compares it with the part's text.
        *self.printed.entry(part.clone()).or_insert(0) += text.len();
        self.open_line = !text.ends_with('\n');
    }

    /// A line on stderr, after whatever stdout holds (so a terminal shows them in order).
    fn note(&mut self, text: &str) {
        self.end_line();
        self.flush();
        eprintln!("{}", self.stderr.show(text));
    }

    /// Prints text the live events missed (they can lag behind a very fast stream).
    pub fn catch_up(&mut self, parts: &[Part]) {
        if self.format != Format::Text {
            return;
        }
        for part in parts {
            if let PartKind::Text(text) = &part.kind
                && !text.synthetic
                && !text.ignored
            {
                self.assistant.insert(part.message_id.clone());
                self.kinds.insert(part.id.clone(), "text");
                self.part(part);
            }
        }
        self.end_line();
        self.flush();
    }

    /// The final summary line on stderr.
    pub fn summary(&mut self, outcome: &RunOutcome, session_tokens: Option<(u64, u64, f64)>) {
        if self.format != Format::Text {
            self.flush();
            return;
        }
        self.end_line();
        self.flush();
        let Some(message) = &outcome.message else { return };
        if message.finish.is_none() {
            // Nothing came back (an error before the first step): the error line says enough.
            return;
        }
        let tokens = message.tokens;
        // Without usage from the provider the counts are estimates.
        let approx = if tokens.estimated { "~" } else { "" };
        let mut line = format!(
            "— {} · {approx}{} in · {approx}{} out",
            message.model,
            group(tokens.input + tokens.cache.read + tokens.cache.write),
            group(tokens.output + tokens.reasoning)
        );
        if tokens.cache.read > 0 {
            line.push_str(&format!(" · {} cached", group(tokens.cache.read)));
        }
        if let Some((_, _, cost)) = session_tokens {
            line.push_str(&format!(" · ${cost:.4} session"));
        }
        line.push_str(&format!(" · {}", outcome.session_id));
        eprintln!("{}", self.stderr.show(&line));
    }
}

/// A short description of a call's input for the activity line.
pub fn summarize_input(tool: &str, input: &Value) -> String {
    codeloop_tools::call_summary(tool, input)
}

/// 1234567 → "1,234,567".
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_thousands() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1234567), "1,234,567");
    }
}
