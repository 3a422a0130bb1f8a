//! The conversation as the UI holds it: the session, its messages and parts (kept current by bus
//! events), and notices of the UI's own (errors, command results). Each item carries a version so its
//! rendered lines are cached until it changes. A part is kept only in the form the view draws: a
//! finished tool call as its card ([`ToolCard`]), parts nothing on screen comes from not at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use codeloop_types::MessageWithParts;
use codeloop_types::{Message, MessageId, Part, PartId, PartKind, Session};

use crate::card::ToolCard;

/// How a notice looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    Info,
    Warning,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    pub text: String,
}

impl Notice {
    pub fn info(text: impl Into<String>) -> Notice {
        Notice { kind: NoticeKind::Info, text: text.into() }
    }

    pub fn warning(text: impl Into<String>) -> Notice {
        Notice { kind: NoticeKind::Warning, text: text.into() }
    }

    pub fn error(text: impl Into<String>) -> Notice {
        Notice { kind: NoticeKind::Error, text: text.into() }
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub info: Option<Message>,
    pub parts: BTreeMap<PartId, Piece>,
    pub version: u64,
}

/// A stored message as the UI keeps it: its parts as [`Piece`]s.
#[derive(Debug, Clone)]
pub struct Kept {
    pub info: Message,
    pub parts: BTreeMap<PartId, Piece>,
}

impl Kept {
    pub fn new(message: MessageWithParts) -> Kept {
        let parts = message.parts.into_iter().filter_map(|p| Some((p.id.clone(), Piece::new(p)?))).collect();
        Kept { info: message.info, parts }
    }
}

/// A part as the UI keeps it.
#[derive(Debug, Clone)]
pub enum Piece {
    /// Boxed: most pieces of a long session are cards, which should not pay for a part's size.
    Part(Box<Part>),
    /// A finished tool call: it will not change again, so only its card is kept.
    Card(ToolCard),
}

impl Piece {
    /// `None` for a part nothing on screen comes from (step marks, hidden tool calls).
    fn new(part: Part) -> Option<Piece> {
        match &part.kind {
            PartKind::Tool(tool) if tool.ignored => None,
            PartKind::Tool(tool) => {
                let card = ToolCard::new(tool);
                Some(if card.is_final() { Piece::Card(card) } else { Piece::Part(Box::new(part)) })
            }
            PartKind::StepStart(_) | PartKind::StepFinish(_) => None,
            _ => Some(Piece::Part(Box::new(part))),
        }
    }

    pub fn as_part(&self) -> Option<&Part> {
        match self {
            Piece::Part(part) => Some(part),
            Piece::Card(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Item {
    Message(MessageId),
    /// A notice with its version (unique, so rendered lines are never confused).
    Notice(u64, Notice),
}

/// Versions are unique across conversations: a reloaded conversation never reuses a cached rendering.
static VERSIONS: AtomicU64 = AtomicU64::new(1);

fn next_version() -> u64 {
    VERSIONS.fetch_add(1, Ordering::Relaxed)
}

#[derive(Default)]
pub struct Conversation {
    pub session: Option<Session>,
    pub items: Vec<Item>,
    pub messages: HashMap<MessageId, Entry>,
}

impl Conversation {
    pub fn load(session: Session, history: Vec<Kept>) -> Conversation {
        let mut convo = Conversation { session: Some(session), ..Default::default() };
        for message in history {
            let id = message.info.id().clone();
            let version = convo.bump();
            convo
                .messages
                .insert(id.clone(), Entry { info: Some(message.info), parts: message.parts, version });
            convo.items.push(Item::Message(id));
        }
        convo
    }

    fn bump(&mut self) -> u64 {
        next_version()
    }

    pub fn notice(&mut self, notice: Notice) {
        self.items.push(Item::Notice(next_version(), notice));
    }

    fn entry(&mut self, id: &MessageId) -> &mut Entry {
        if !self.messages.contains_key(id) {
            self.items.push(Item::Message(id.clone()));
        }
        let version = self.bump();
        let entry = self.messages.entry(id.clone()).or_insert_with(|| Entry {
            info: None,
            parts: BTreeMap::new(),
            version,
        });
        entry.version = version;
        entry
    }

    pub fn message_updated(&mut self, info: Message) {
        let id = info.id().clone();
        self.entry(&id).info = Some(info);
    }

    pub fn part_updated(&mut self, mut part: Part) {
        let entry = self.entry(&part.message_id);
        // Deltas can run ahead of a stored snapshot of the same text: never go backwards.
        if let Some(old) = entry.parts.get(&part.id).and_then(Piece::as_part)
            && let (Some(old_text), Some(new_text)) = (streamed_text(old), streamed_text(&part))
            && old_text.len() > new_text.len()
            && old_text.starts_with(new_text)
        {
            let text = old_text.to_owned();
            set_streamed_text(&mut part, text);
        }
        let id = part.id.clone();
        match Piece::new(part) {
            Some(piece) => entry.parts.insert(id, piece),
            None => entry.parts.remove(&id),
        };
    }

    pub fn part_delta(&mut self, message: &MessageId, part: &PartId, delta: &str) {
        if !self.messages.get(message).is_some_and(|e| e.parts.contains_key(part)) {
            return;
        }
        let entry = self.entry(message);
        if let Some(Piece::Part(part)) = entry.parts.get_mut(part) {
            match &mut part.kind {
                PartKind::Text(t) => t.text.push_str(delta),
                PartKind::Reasoning(r) => r.text.push_str(delta),
                _ => {}
            }
        }
    }

    /// The first message hidden by a revert (`/undo`).
    pub fn reverted_from(&self) -> Option<MessageId> {
        Some(self.session.as_ref()?.revert.as_ref()?.message_id.clone())
    }

    pub fn is_hidden(&self, id: &MessageId) -> bool {
        self.reverted_from().is_some_and(|from| *id >= from)
    }

    /// The newest user message still shown (what `/undo` reverts).
    pub fn last_visible_user(&self) -> Option<MessageId> {
        self.items.iter().rev().find_map(|item| match item {
            Item::Message(id) if !self.is_hidden(id) => match self.messages.get(id)?.info.as_ref()? {
                Message::User(_) => Some(id.clone()),
                Message::Assistant(_) => None,
            },
            _ => None,
        })
    }

    /// The newest finished assistant message with usage (for "context used").
    pub fn last_usage(&self) -> Option<u64> {
        self.items.iter().rev().find_map(|item| match item {
            Item::Message(id) => match self.messages.get(id)?.info.as_ref()? {
                Message::Assistant(a) if !a.summary => {
                    let t = &a.tokens;
                    let total = t.total.unwrap_or(t.input + t.output + t.cache.read + t.cache.write);
                    (total > 0).then_some(total)
                }
                _ => None,
            },
            Item::Notice(..) => None,
        })
    }

    /// The newest assistant message's error text, if it has one.
    pub fn last_error(&self) -> Option<String> {
        self.items.iter().rev().find_map(|item| match item {
            Item::Message(id) => match self.messages.get(id)?.info.as_ref()? {
                Message::Assistant(a) => Some(a.error.as_ref().map(|e| e.message().to_owned())),
                Message::User(_) => None,
            },
            Item::Notice(..) => None,
        })?
    }

    pub fn has_messages(&self) -> bool {
        !self.messages.is_empty()
    }
}

fn streamed_text(part: &Part) -> Option<&str> {
    match &part.kind {
        PartKind::Text(t) => Some(&t.text),
        PartKind::Reasoning(r) => Some(&r.text),
        _ => None,
    }
}

fn set_streamed_text(part: &mut Part, text: String) {
    match &mut part.kind {
        PartKind::Text(t) => t.text = text,
        PartKind::Reasoning(r) => r.text = text,
        _ => {}
    }
}
