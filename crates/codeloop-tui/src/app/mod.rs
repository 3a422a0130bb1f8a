//! The UI's state and what keys, events and command results do to it. Pure: no terminal and no client
//! here; every effect is returned as an [`Action`] that the runtime ([`crate::run`]) carries out and
//! answers with an [`Outcome`]. That keeps the rules testable and the two client modes identical.

mod commands;
mod events;
mod jobs;

pub use jobs::{JOB_OUTPUT_BYTES, JobsAction, perform_jobs};

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;

use codeloop_types::{
    MessageId, ModelRef, PermissionId, PermissionReply, PermissionRequest, QuestionId, QuestionRequest,
    Session, SessionId, SessionStatus,
};
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind};

use crate::client::{PermissionAnswer, Prompt};
use crate::convo::{Conversation, Kept, Notice};
use crate::editor::Editor;

/// Lines the mouse wheel scrolls.
const WHEEL: usize = 3;

/// A form's fields, in the schema's order: `(name, type)`. A form without fields has one blank step so
/// Enter accepts it.
pub fn form_fields(schema: Option<&serde_json::Value>) -> Vec<(String, String)> {
    let properties = schema.and_then(|s| s.get("properties")).and_then(serde_json::Value::as_object);
    let fields: Vec<(String, String)> = properties
        .into_iter()
        .flatten()
        .map(|(name, spec)| {
            let kind = spec.get("type").and_then(serde_json::Value::as_str).unwrap_or("string");
            (name.clone(), kind.to_owned())
        })
        .collect();
    if fields.is_empty() { vec![(String::new(), "string".into())] } else { fields }
}

/// What the runtime should do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Open a session (`None`: a new one) with its history.
    Open(Option<SessionId>),
    Prompt(SessionId, Prompt),
    Abort(SessionId),
    ReplyPermission(PermissionId, PermissionAnswer),
    ReplyQuestion(QuestionId, Vec<Vec<String>>),
    RejectQuestion(QuestionId),
    /// Answer an MCP server's elicitation.
    AnswerElicitation(SessionId, codeloop_types::ElicitationId, codeloop_types::ElicitationReply),
    ListSessions,
    DeleteSession(SessionId),
    Revert(SessionId, MessageId),
    Unrevert(SessionId),
    /// `/compact [focus]`.
    Compact(SessionId, Option<String>),
    /// `/jobs`: list, read or kill the session's background jobs.
    Jobs(SessionId, JobsAction),
    CheckModel(ModelRef),
    CheckAgent(String),
    Export(SessionId),
    /// Reload the current session (after lost events).
    Reload(SessionId),
    Window(ModelRef),
    /// Load the directory's commands (for `/help` and completion).
    LoadCommands,
    /// `/NAME args` for a command file, an MCP prompt or `/init`.
    /// A `/NAME` command with its arguments, at the `/effort` level chosen (if any).
    RunCommand(SessionId, String, String, Option<codeloop_types::Effort>),
    Quit,
}

/// What came back from an action.
#[derive(Debug)]
pub enum Outcome {
    Opened {
        session: Session,
        history: Vec<Kept>,
        permissions: Vec<PermissionRequest>,
        questions: Vec<QuestionRequest>,
        /// MCP servers' requests waiting for an answer (a session opened while one asks).
        elicitations: Vec<codeloop_types::ElicitationRequest>,
        status: SessionStatus,
        created: bool,
    },
    Sessions(Vec<Session>),
    /// The session's jobs; `show`: list them for the person (else only the count is taken).
    Jobs(SessionId, Vec<codeloop_types::Job>, bool),
    /// A job's newest output.
    JobOutput(codeloop_types::JobId, String),
    /// The session reloaded (after a revert, an unrevert or lost events), with a note to show.
    Reloaded(Session, Vec<Kept>, Option<String>),
    ModelChosen(ModelRef),
    AgentChosen(String),
    Window(ModelRef, Option<u64>),
    Notice(Notice),
    /// A prompt the engine refused before any run.
    PromptFailed(String),
    Commands(Vec<crate::client::CommandEntry>),
}

/// Scrolling the conversation, in rows or pages; `End` follows the newest output again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scroll {
    Up(usize),
    Down(usize),
    PageUp,
    PageDown,
    End,
}

/// The run state of the session on screen.
#[derive(Debug, Clone, PartialEq)]
pub enum RunState {
    Idle,
    Busy,
    Retry { attempt: u32, max_attempts: u32, message: String, next: i64 },
}

/// The sessions list (`/sessions`).
#[derive(Debug, Clone)]
pub struct SessionList {
    pub sessions: Vec<Session>,
    pub selected: usize,
}

/// Typing a rejection message for the model (`m` on a permission prompt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    Choosing,
    Message,
}

pub struct App {
    pub directory: PathBuf,
    pub convo: Conversation,
    pub editor: Editor,
    pub state: RunState,
    pub permissions: VecDeque<PermissionRequest>,
    pub permission_mode: PermissionMode,
    pub questions: VecDeque<QuestionRequest>,
    /// Answers given so far to the front question request (one per question).
    pub answers: Vec<Vec<String>>,
    /// MCP servers' requests for input, oldest first; the front one is shown.
    pub elicitations: VecDeque<codeloop_types::ElicitationRequest>,
    /// The front form's values so far, one per field in order (`None`: left out).
    pub fields: Vec<Option<serde_json::Value>>,
    /// `/model` and `/agent` choices, sent with the next prompts.
    pub model: Option<ModelRef>,
    pub agent: Option<String>,
    /// `/effort`, sent with the next prompts (`None`: the agent's or model's).
    pub effort: Option<codeloop_types::Effort>,
    pub windows: HashMap<ModelRef, Option<u64>>,
    asked_windows: HashSet<ModelRef>,
    /// Scrolling asked for since the last draw (the view applies it: it knows the page).
    scrolls: Vec<Scroll>,
    pub sessions: Option<SessionList>,
    pub quit_armed: bool,
    pub show_reasoning: bool,
    /// Messages sent while busy and not yet started.
    pub queued: usize,
    /// The current session was created by this UI and nothing was sent to it yet.
    created_empty: bool,
    pub quit: bool,
    /// The open session's background jobs and their states (from `/jobs` and `job.*` events).
    pub jobs: std::collections::BTreeMap<codeloop_types::JobId, codeloop_types::JobState>,
    /// The directory's commands (command files, MCP prompts, `/init`), as last loaded.
    pub commands: Vec<crate::client::CommandEntry>,
}

impl App {
    pub fn new(directory: PathBuf, model: Option<ModelRef>, agent: Option<String>) -> App {
        App {
            directory,
            convo: Conversation::default(),
            editor: Editor::default(),
            state: RunState::Idle,
            permissions: VecDeque::new(),
            permission_mode: PermissionMode::Choosing,
            questions: VecDeque::new(),
            answers: Vec::new(),
            elicitations: VecDeque::new(),
            fields: Vec::new(),
            model,
            agent,
            effort: None,
            windows: HashMap::new(),
            asked_windows: HashSet::new(),
            scrolls: Vec::new(),
            sessions: None,
            quit_armed: false,
            show_reasoning: false,
            queued: 0,
            created_empty: false,
            quit: false,
            jobs: Default::default(),
            commands: Vec::new(),
        }
    }

    pub fn session_id(&self) -> Option<&SessionId> {
        self.convo.session.as_ref().map(|s| &s.id)
    }

    /// The model the next prompt uses.
    pub fn current_model(&self) -> Option<&ModelRef> {
        self.model.as_ref().or_else(|| self.convo.session.as_ref().and_then(|s| s.model.as_ref()))
    }

    pub fn current_agent(&self) -> Option<&str> {
        self.agent.as_deref().or_else(|| self.convo.session.as_ref().map(|s| s.agent.as_str()))
    }

    pub fn busy(&self) -> bool {
        self.state != RunState::Idle
    }

    /// Context used, in percent of the current model's window (from the last usage).
    pub fn context_percent(&self) -> Option<u64> {
        let window = (*self.windows.get(self.current_model()?)?)?;
        let used = self.convo.last_usage().unwrap_or(0);
        (window > 0).then(|| (used * 100).div_ceil(window).min(999))
    }

    /// Lookups the status line needs (a model's window), each asked once.
    pub fn lookups(&mut self) -> Vec<Action> {
        match self.current_model().cloned() {
            Some(model) if self.asked_windows.insert(model.clone()) => vec![Action::Window(model)],
            _ => Vec::new(),
        }
    }

    // ---- terminal input ----

    pub fn terminal_event(&mut self, event: Event) -> Vec<Action> {
        match event {
            Event::Key(key) if key.kind != KeyEventKind::Release => self.key(key),
            Event::Paste(text) => {
                self.quit_armed = false;
                self.editor.insert_str(&text);
                Vec::new()
            }
            Event::Mouse(mouse) => {
                match mouse.kind {
                    MouseEventKind::ScrollUp => self.scrolls.push(Scroll::Up(WHEEL)),
                    MouseEventKind::ScrollDown => self.scrolls.push(Scroll::Down(WHEEL)),
                    _ => {}
                }
                Vec::new()
            }
            _ => Vec::new(),
        }
    }

    pub fn key(&mut self, key: KeyEvent) -> Vec<Action> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C')) {
            return self.ctrl_c();
        }
        self.quit_armed = false;
        match key.code {
            KeyCode::PageUp => {
                self.scrolls.push(Scroll::PageUp);
                return Vec::new();
            }
            KeyCode::PageDown => {
                self.scrolls.push(Scroll::PageDown);
                return Vec::new();
            }
            KeyCode::Char('t') if ctrl => {
                self.show_reasoning = !self.show_reasoning;
                return Vec::new();
            }
            _ => {}
        }
        if self.sessions.is_some() {
            return self.session_list_key(key);
        }
        if !self.permissions.is_empty() {
            return self.permission_key(key);
        }
        if !self.questions.is_empty() {
            return self.question_key(key);
        }
        if !self.elicitations.is_empty() {
            return self.elicitation_key(key);
        }
        match key.code {
            KeyCode::Enter if key.modifiers.contains(KeyModifiers::ALT) => {
                self.editor.insert('\n');
                Vec::new()
            }
            KeyCode::Enter => self.submit(),
            KeyCode::Esc => self.interrupt(),
            _ => {
                self.edit(key);
                Vec::new()
            }
        }
    }

    fn ctrl_c(&mut self) -> Vec<Action> {
        if self.quit_armed {
            self.quit = true;
            return vec![Action::Quit];
        }
        self.quit_armed = true;
        self.editor.clear();
        self.permission_mode = PermissionMode::Choosing;
        Vec::new()
    }

    fn interrupt(&mut self) -> Vec<Action> {
        match self.session_id().cloned() {
            Some(id) if self.busy() => {
                self.convo.notice(Notice::warning("interrupting…"));
                vec![Action::Abort(id)]
            }
            _ => Vec::new(),
        }
    }

    /// Editing keys shared by every mode that types.
    fn edit(&mut self, key: KeyEvent) {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('w') if ctrl => self.editor.delete_word(),
            KeyCode::Char('u') if ctrl => self.editor.clear(),
            KeyCode::Char('a') if ctrl => self.editor.home(),
            KeyCode::Char('e') if ctrl => self.editor.end(),
            KeyCode::Char('j') if ctrl => self.editor.insert('\n'),
            KeyCode::Char(c) if !ctrl => self.editor.insert(c),
            KeyCode::Backspace => self.editor.backspace(),
            KeyCode::Delete => self.editor.delete(),
            KeyCode::Left => self.editor.left(),
            KeyCode::Right => self.editor.right(),
            KeyCode::Home => self.editor.home(),
            KeyCode::End => self.editor.end(),
            KeyCode::Up => {
                self.editor.up();
            }
            KeyCode::Down => {
                self.editor.down();
            }
            KeyCode::Tab if self.editor.text().starts_with('/') => self.complete(),
            KeyCode::Tab => self.editor.insert_str("  "),
            _ => {}
        }
    }

    /// The scrolling asked for since the last call (the view takes it at each draw).
    pub fn take_scrolls(&mut self) -> Vec<Scroll> {
        std::mem::take(&mut self.scrolls)
    }

    fn session_list_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let Some(list) = &mut self.sessions else { return Vec::new() };
        match key.code {
            KeyCode::Up => list.selected = list.selected.saturating_sub(1),
            KeyCode::Down => list.selected = (list.selected + 1).min(list.sessions.len().saturating_sub(1)),
            KeyCode::Enter => {
                let chosen = list.sessions.get(list.selected).map(|s| s.id.clone());
                self.sessions = None;
                if let Some(id) = chosen {
                    return self.switch_to(Some(id));
                }
            }
            KeyCode::Esc => self.sessions = None,
            _ => {}
        }
        Vec::new()
    }

    fn permission_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let Some(request) = self.permissions.front() else { return Vec::new() };
        let id = request.id.clone();
        if self.permission_mode == PermissionMode::Message {
            return match key.code {
                KeyCode::Enter if !key.modifiers.contains(KeyModifiers::ALT) => {
                    let message = self.editor.take().trim().to_owned();
                    self.permission_mode = PermissionMode::Choosing;
                    self.permissions.pop_front();
                    let message = (!message.is_empty()).then_some(message);
                    vec![Action::ReplyPermission(
                        id,
                        PermissionAnswer { reply: PermissionReply::Reject, message },
                    )]
                }
                KeyCode::Esc => {
                    self.permission_mode = PermissionMode::Choosing;
                    self.editor.clear();
                    Vec::new()
                }
                _ => {
                    self.edit(key);
                    Vec::new()
                }
            };
        }
        let reply = match key.code {
            KeyCode::Char('y' | 'Y' | 'o' | 'O') => PermissionReply::Once,
            KeyCode::Char('a' | 'A') => PermissionReply::Always,
            KeyCode::Char('n' | 'N' | 'r' | 'R') => PermissionReply::Reject,
            KeyCode::Char('m' | 'M') => {
                self.permission_mode = PermissionMode::Message;
                self.editor.clear();
                return Vec::new();
            }
            KeyCode::Esc => return self.interrupt(),
            _ => return Vec::new(),
        };
        self.permissions.pop_front();
        vec![Action::ReplyPermission(id, PermissionAnswer { reply, message: None })]
    }

    fn question_key(&mut self, key: KeyEvent) -> Vec<Action> {
        let Some(request) = self.questions.front() else { return Vec::new() };
        let id = request.id.clone();
        match key.code {
            KeyCode::Enter if !key.modifiers.contains(KeyModifiers::ALT) => {
                let index = self.answers.len();
                let Some(question) = request.questions.get(index) else { return Vec::new() };
                let line = self.editor.take();
                let line = line.trim();
                if line.is_empty() {
                    return Vec::new();
                }
                let picked: Option<Vec<String>> = line
                    .split(',')
                    .map(|n| {
                        n.trim().parse::<usize>().ok().and_then(|n| question.options.get(n.wrapping_sub(1)))
                    })
                    .map(|o| o.map(|o| o.label.clone()))
                    .collect();
                let answer = match picked {
                    Some(labels) if !labels.is_empty() && (question.multiple || labels.len() == 1) => labels,
                    _ => vec![line.to_owned()],
                };
                self.answers.push(answer);
                if self.answers.len() < request.questions.len() {
                    return Vec::new();
                }
                self.questions.pop_front();
                vec![Action::ReplyQuestion(id, std::mem::take(&mut self.answers))]
            }
            KeyCode::Esc => {
                self.questions.pop_front();
                self.answers.clear();
                self.editor.clear();
                vec![Action::RejectQuestion(id)]
            }
            _ => {
                self.edit(key);
                Vec::new()
            }
        }
    }

    /// An MCP server's request: a link is answered with `d` (done) or `n` (decline); a form is filled
    /// field by field (Enter takes the line, an empty one leaves the field to its default); Esc cancels.
    fn elicitation_key(&mut self, key: KeyEvent) -> Vec<Action> {
        use codeloop_types::{ElicitationAction, ElicitationMode, ElicitationReply};
        let Some(request) = self.elicitations.front() else { return Vec::new() };
        let answer = |app: &mut App, reply: ElicitationReply| {
            let Some(request) = app.elicitations.pop_front() else { return Vec::new() };
            app.fields.clear();
            app.editor.clear();
            vec![Action::AnswerElicitation(request.session_id, request.id, reply)]
        };
        let cancel = ElicitationReply { action: ElicitationAction::Cancel, content: None };
        if request.ask.mode == ElicitationMode::Url {
            return match key.code {
                KeyCode::Char('d' | 'D' | 'y' | 'Y') | KeyCode::Enter => {
                    answer(self, ElicitationReply { action: ElicitationAction::Accept, content: None })
                }
                KeyCode::Char('n' | 'N') => answer(self, ElicitationReply::decline()),
                KeyCode::Esc => answer(self, cancel),
                _ => Vec::new(),
            };
        }
        let properties = form_fields(request.ask.schema.as_ref());
        match key.code {
            KeyCode::Enter if !key.modifiers.contains(KeyModifiers::ALT) => {
                let Some((_, kind)) = properties.get(self.fields.len()) else { return Vec::new() };
                let line = self.editor.take().trim().to_owned();
                let value = (!line.is_empty()).then(|| match kind.as_str() {
                    "integer" | "number" => {
                        serde_json::from_str(&line).unwrap_or(serde_json::Value::String(line))
                    }
                    "boolean" => {
                        serde_json::Value::Bool(matches!(line.to_lowercase().as_str(), "y" | "yes" | "true"))
                    }
                    _ => serde_json::Value::String(line),
                });
                self.fields.push(value);
                if self.fields.len() < properties.len() {
                    return Vec::new();
                }
                let content: serde_json::Map<String, serde_json::Value> = properties
                    .iter()
                    .zip(std::mem::take(&mut self.fields))
                    .filter_map(|((name, _), value)| value.map(|v| (name.clone(), v)))
                    .collect();
                let reply = ElicitationReply {
                    action: ElicitationAction::Accept,
                    content: Some(serde_json::Value::Object(content)),
                };
                answer(self, reply)
            }
            KeyCode::Esc => answer(self, ElicitationReply::decline()),
            _ => {
                self.edit(key);
                Vec::new()
            }
        }
    }

    /// Sends `text` as if typed and entered.
    pub fn send_text(&mut self, text: &str) -> Vec<Action> {
        self.editor.set(text);
        self.submit()
    }

    fn submit(&mut self) -> Vec<Action> {
        if self.editor.text().trim().is_empty() {
            return Vec::new();
        }
        let text = self.editor.take();
        if let Some(command) = text.trim().strip_prefix('/') {
            return self.command(command);
        }
        let Some(id) = self.session_id().cloned() else {
            self.convo.notice(Notice::error("no session is open yet"));
            return Vec::new();
        };
        self.scrolls.push(Scroll::End);
        self.created_empty = false;
        if self.busy() {
            self.queued += 1;
            self.convo
                .notice(Notice::info(format!("queued (sent when the run ends): {}", first_line(&text))));
        }
        self.state = match &self.state {
            RunState::Idle => RunState::Busy,
            other => other.clone(),
        };
        let prompt =
            Prompt { text, model: self.model.clone(), agent: self.agent.clone(), effort: self.effort };
        vec![Action::Prompt(id, prompt)]
    }

    /// Actions to take before quitting.
    pub fn on_quit(&self) -> Vec<Action> {
        match self.session_id() {
            Some(id) if self.created_empty && !self.convo.has_messages() => {
                vec![Action::DeleteSession(id.clone())]
            }
            _ => Vec::new(),
        }
    }

    // ---- results of actions ----

    pub fn outcome(&mut self, outcome: Outcome) -> Vec<Action> {
        match outcome {
            Outcome::Opened { session, history, permissions, questions, elicitations, status, created } => {
                let mut actions = self.on_quit();
                self.convo = Conversation::load(session, history);
                self.permissions = permissions.into();
                self.questions = questions.into();
                self.elicitations = elicitations.into();
                self.fields.clear();
                self.answers.clear();
                self.permission_mode = PermissionMode::Choosing;
                self.state = run_state(status);
                self.created_empty = created;
                self.scrolls.push(Scroll::End);
                self.queued = 0;
                self.jobs.clear();
                actions.extend(self.lookups());
                if let Some(id) = self.session_id() {
                    actions.push(Action::Jobs(id.clone(), JobsAction::Count));
                }
                actions.push(Action::LoadCommands);
                actions
            }
            Outcome::Commands(commands) => {
                self.commands = commands;
                Vec::new()
            }
            Outcome::Jobs(session, jobs, show) => self.jobs_loaded(&session, jobs, show),
            Outcome::JobOutput(job, output) => self.job_output(&job, &output),
            Outcome::Sessions(sessions) => {
                if sessions.is_empty() {
                    self.convo.notice(Notice::info("no sessions in this directory yet"));
                } else {
                    let selected =
                        sessions.iter().position(|s| Some(&s.id) == self.session_id()).unwrap_or(0);
                    self.sessions = Some(SessionList { sessions, selected });
                }
                Vec::new()
            }
            Outcome::Reloaded(session, history, message) => {
                if self.session_id() == Some(&session.id) {
                    self.convo = Conversation::load(session, history);
                    if let Some(message) = message {
                        self.convo.notice(Notice::info(message));
                    }
                }
                Vec::new()
            }
            Outcome::ModelChosen(model) => {
                self.convo.notice(Notice::info(format!("model: {model} (from the next message on)")));
                self.model = Some(model);
                self.lookups()
            }
            Outcome::AgentChosen(agent) => {
                self.convo.notice(Notice::info(format!("agent: {agent} (from the next message on)")));
                self.agent = Some(agent);
                Vec::new()
            }
            Outcome::Window(model, window) => {
                self.windows.insert(model, window);
                Vec::new()
            }
            Outcome::Notice(notice) => {
                self.convo.notice(notice);
                Vec::new()
            }
            Outcome::PromptFailed(message) => {
                self.convo.notice(Notice::error(message));
                self.state = RunState::Idle;
                Vec::new()
            }
        }
    }
}

pub(crate) fn run_state(status: SessionStatus) -> RunState {
    match status {
        SessionStatus::Idle => RunState::Idle,
        SessionStatus::Busy => RunState::Busy,
        SessionStatus::Retry { attempt, max_attempts, message, next, .. } => {
            RunState::Retry { attempt, max_attempts, message, next }
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

#[cfg(test)]
mod tests;
