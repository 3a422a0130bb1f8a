//! Text, reasoning and step events: parts created, deltas appended and published live, persistence
//! coalesced, and each step's usage, cost and overflow check.

use codeloop_provider::Usage;
use codeloop_types::{
    Finish, Message, PartKind, PartTime, ReasoningPart, StepFinishPart, StepStartPart, TextPart, Tokens,
    now_ms,
};
use serde_json::Value;

use super::Processor;

impl Processor {
    pub(super) fn step_start(&mut self) {
        self.push_part(PartKind::StepStart(StepStartPart { snapshot: self.start_snapshot.clone() }));
    }

    /// The snapshot taken before the provider was called (tools may change files before any step event).
    pub fn set_start_snapshot(&mut self, snapshot: Option<String>) {
        self.start_snapshot = snapshot;
    }

    /// Records what the turn changed on disk: a `patch` part listing the files (when any changed), and
    /// the end snapshot on the last `step-finish`.
    pub fn record_patch(&mut self, start: String, end: String, files: Vec<String>) {
        if let Some(index) = self.parts.iter().rposition(|p| matches!(p.kind, PartKind::StepFinish(_))) {
            if let PartKind::StepFinish(step) = &mut self.parts[index].kind {
                step.snapshot = Some(end);
            }
            self.write_now(index);
        }
        if !files.is_empty() {
            self.push_part(PartKind::Patch(codeloop_types::PatchPart { hash: start, files }));
        }
    }

    pub(super) fn reasoning_start(&mut self, id: String, metadata: Option<Value>) {
        if self.reasoning_open.contains_key(&id) {
            return;
        }
        let index = self.push_part(PartKind::Reasoning(ReasoningPart {
            text: String::new(),
            metadata,
            time: PartTime { start: now_ms(), end: None },
            ignored: false,
        }));
        self.reasoning_open.insert(id, index);
    }

    pub(super) fn reasoning_delta(&mut self, id: String, text: String) {
        let index = match self.reasoning_open.get(&id) {
            Some(index) => *index,
            None => {
                self.reasoning_start(id.clone(), None);
                self.reasoning_open[&id]
            }
        };
        if let PartKind::Reasoning(part) = &mut self.parts[index].kind {
            part.text.push_str(&text);
        }
        self.streamed_chars += text.len() as u64;
        self.publish_delta(index, text);
        self.mark_dirty(index);
    }

    pub(super) fn reasoning_end(&mut self, id: &str, metadata: Option<Value>) {
        let Some(index) = self.reasoning_open.remove(id) else { return };
        if let PartKind::Reasoning(part) = &mut self.parts[index].kind {
            if metadata.is_some() {
                part.metadata = metadata;
            }
            part.time.end = Some(now_ms());
        }
        self.write_now(index);
    }

    pub(super) fn text_start(&mut self, id: String) {
        if self.text_open.contains_key(&id) {
            return;
        }
        let index = self.push_part(PartKind::Text(TextPart {
            text: String::new(),
            time: PartTime { start: now_ms(), end: None },
            ..Default::default()
        }));
        self.text_open.insert(id, index);
    }

    pub(super) fn text_delta(&mut self, id: String, text: String) {
        let index = match self.text_open.get(&id) {
            Some(index) => *index,
            None => {
                self.text_start(id.clone());
                self.text_open[&id]
            }
        };
        if let PartKind::Text(part) = &mut self.parts[index].kind {
            part.text.push_str(&text);
        }
        self.streamed_chars += text.len() as u64;
        self.publish_delta(index, text);
        self.mark_dirty(index);
    }

    pub(super) fn text_end(&mut self, id: &str) {
        let Some(index) = self.text_open.remove(id) else { return };
        if let PartKind::Text(part) = &mut self.parts[index].kind {
            part.time.end = Some(now_ms());
        }
        self.write_now(index);
    }

    pub(super) fn finish_step(&mut self, finish: Finish, usage: Option<Usage>) {
        // Reasoning never outlives its step.
        let open: Vec<String> = self.reasoning_open.keys().cloned().collect();
        for id in open {
            self.reasoning_end(&id, None);
        }
        let estimated = usage.is_none();
        let usage = usage.unwrap_or_else(|| Usage {
            input: self.ctx.estimated_input_tokens,
            output: self.streamed_chars / 4,
            ..Default::default()
        });
        let tokens = Tokens { estimated, ..usage.tokens() };
        let cost = self.ctx.pricing.of(&usage);
        self.message.finish = Some(finish);
        self.message.cost += cost;
        self.message.tokens = tokens;
        self.push_part(PartKind::StepFinish(StepFinishPart { reason: finish, snapshot: None, tokens, cost }));
        self.ctx.journal.save_message(&Message::Assistant(self.message.clone()));
        if let Some(limit) = self.ctx.overflow_at
            && tokens.count() >= limit
        {
            self.needs_compaction = true;
        }
    }
}
