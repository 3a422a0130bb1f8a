//! codeloop's interactive terminal UI (DESIGN.md §5, `codeloop` / `codeloop tui`): a conversation view
//! with streamed Markdown, tool cards and inline permission prompts; an input editor; slash commands;
//! and a status line. A client of the engine, in-process ([`LocalClient`]) or attached to a server
//! ([`RemoteClient`]), through one [`Client`] trait, so both behave the same.
//!
//! Owns: drawing, keys, and turning them into engine operations.
//! Must not: decide anything the engine decides (validation, permissions, runs) or read config.

mod app;
mod card;
mod client;
mod convo;
mod editor;
mod http;
mod local;
mod markdown;
mod remote;
mod terminal;
mod view;
mod wrap;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use codeloop_types::{ModelRef, Page, Session, SessionId};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

pub use app::{Action, App, Outcome, RunState};
pub use client::{Client, Incoming, PermissionAnswer, Prompt, export_json};
pub use convo::{Conversation, Kept, Notice, NoticeKind};
pub use http::{ServerHttp, SseStream};
pub use local::LocalClient;
pub use remote::{RemoteClient, TOKEN_ENV};
pub use view::{View, draw};

/// The shortest time between two frames (at most 60 per second); events in between are coalesced.
const FRAME: Duration = Duration::from_millis(16);
/// How long quitting waits for an interrupted run's cleanup.
const QUIT_WAIT: Duration = Duration::from_secs(3);

/// Which session the UI opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    New,
    /// The most recently updated session in the directory.
    Continue,
    Session(SessionId),
}

/// What a running run does when the UI quits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnQuit {
    /// In-process: the run cannot outlive the UI, so it is interrupted (and settled) first.
    Interrupt,
    /// Attached: the server keeps running it.
    Leave,
}

pub struct Options {
    pub directory: PathBuf,
    pub start: Start,
    pub model: Option<ModelRef>,
    pub agent: Option<String>,
    pub on_quit: OnQuit,
    /// Shown first in the conversation (config warnings).
    pub warnings: Vec<String>,
    /// Sent as soon as the UI is up (the demo's task).
    pub prompt: Option<String>,
    /// How to reopen the UI, for the hint printed on exit (`codeloop`, or with `--attach URL`).
    pub command: String,
    /// Where stderr goes while the UI is up (log lines, MCP servers' chatter); `None` leaves it alone.
    pub log: Option<PathBuf>,
}

/// Runs the UI until the person quits. Errors before the terminal is taken over (no session to
/// continue, an unusable model) come back without touching the screen.
pub async fn run(client: Arc<dyn Client>, options: Options) -> anyhow::Result<()> {
    let mut feed = client.subscribe().await?;
    let opened = open_first(client.as_ref(), &options).await?;
    let mut guard = terminal::Guard::enter(options.log.as_deref()).context("cannot set up the terminal")?;
    let mut app = App::new(options.directory.clone(), options.model.clone(), options.agent.clone());
    let (tx, mut outcomes) = mpsc::channel::<Outcome>(256);
    let actions = app.outcome(opened);
    for warning in &options.warnings {
        app.convo.notice(Notice::warning(warning.clone()));
    }
    let mut actions = actions;
    if let Some(text) = &options.prompt {
        actions.extend(app.send_text(text));
    }
    let ctx = Ctx { client: client.clone(), tx, directory: options.directory.clone() };
    for action in actions {
        ctx.spawn(action);
    }
    let mut input = crossterm::event::EventStream::new();
    let mut view = View::default();
    let mut signals = Signals::new();
    let mut dirty = true;
    let mut last_draw = Instant::now() - FRAME;
    loop {
        if dirty && last_draw.elapsed() >= FRAME {
            guard.terminal.draw(|frame| draw(frame, &mut app, &mut view))?;
            last_draw = Instant::now();
            dirty = false;
        }
        let retrying = matches!(app.state, RunState::Retry { .. });
        let actions = tokio::select! {
            event = input.next() => match event {
                Some(Ok(event)) => app.terminal_event(event),
                Some(Err(_)) | None => break,
            },
            Some(incoming) = feed.recv() => app.incoming(incoming),
            Some(outcome) = outcomes.recv() => app.outcome(outcome),
            _ = tokio::time::sleep_until(last_draw + FRAME), if dirty => continue,
            // The retry countdown is the only thing that changes without an event.
            _ = tokio::time::sleep(Duration::from_secs(1)), if retrying => Vec::new(),
            _ = signals.next() => break,
        };
        dirty = true;
        let mut actions = actions;
        actions.extend(app.lookups());
        for action in actions {
            if action == Action::Quit {
                app.quit = true;
            } else {
                ctx.spawn(action);
            }
        }
        if app.quit {
            break;
        }
    }
    let session = app.session_id().cloned();
    let _ = tokio::time::timeout(QUIT_WAIT, quit(&ctx, &app, options.on_quit)).await;
    drop(guard);
    if let Some(id) = session.filter(|_| app.convo.has_messages()) {
        eprintln!("session {id} · continue it with: {} --session {id}", options.command);
    }
    Ok(())
}

async fn quit(ctx: &Ctx, app: &App, on_quit: OnQuit) {
    for action in app.on_quit() {
        if let Action::DeleteSession(id) = action {
            let _ = ctx.client.delete_session(&id).await;
        }
    }
    if let (Some(id), OnQuit::Interrupt, true) = (app.session_id(), on_quit, app.busy()) {
        let _ = ctx.client.abort(id).await;
    }
}

/// Opens the first session, checking the model before anything is created.
async fn open_first(client: &dyn Client, options: &Options) -> anyhow::Result<Outcome> {
    let target = match &options.start {
        Start::New => None,
        Start::Session(id) => Some(id.clone()),
        Start::Continue => {
            let sessions = client.sessions(&options.directory).await?;
            let session = sessions.into_iter().find(|s| s.parent_id.is_none()).with_context(|| {
                format!("no session to continue in {}: start one with codeloop", options.directory.display())
            })?;
            Some(session.id)
        }
    };
    if let Some(id) = &target {
        let session = client.session(id).await?;
        client.check_model(options.model.as_ref().or(session.model.as_ref())).await?;
    } else {
        client.check_model(options.model.as_ref()).await?;
    }
    open(client, &options.directory, target, options.model.as_ref(), options.agent.as_deref()).await
}

async fn open(
    client: &dyn Client,
    directory: &std::path::Path,
    target: Option<SessionId>,
    model: Option<&ModelRef>,
    agent: Option<&str>,
) -> anyhow::Result<Outcome> {
    let (session, created) = match target {
        Some(id) => (client.session(&id).await?, false),
        None => (client.create_session(directory, agent, model).await?, true),
    };
    let history = kept_history(client, &session.id).await?;
    let (permissions, questions) = client.pending(&session.id).await.unwrap_or_default();
    let elicitations = client.pending_elicitations(&session.id).await.unwrap_or_default();
    let status = client.status(&session.id).await;
    Ok(Outcome::Opened { session, history, permissions, questions, elicitations, status, created })
}

/// What actions need: the client, where to send their outcomes, the directory.
struct Ctx {
    client: Arc<dyn Client>,
    tx: mpsc::Sender<Outcome>,
    directory: PathBuf,
}

impl Ctx {
    fn spawn(&self, action: Action) {
        let client = self.client.clone();
        let tx = self.tx.clone();
        let directory = self.directory.clone();
        tokio::spawn(async move {
            tracing::debug!(?action, "action");
            if let Some(outcome) = perform(client.as_ref(), &directory, action).await {
                let _ = tx.send(outcome).await;
            }
        });
    }
}

/// Carries out one action; errors become notices.
async fn perform(client: &dyn Client, directory: &std::path::Path, action: Action) -> Option<Outcome> {
    let error = |e: anyhow::Error| Some(Outcome::Notice(Notice::error(format!("{e:#}"))));
    match action {
        Action::Open(target) => match open(client, directory, target, None, None).await {
            Ok(outcome) => Some(outcome),
            Err(e) => error(e),
        },
        Action::Prompt(id, prompt) => match client.prompt(&id, prompt).await {
            Ok(()) => None,
            Err(e) => Some(Outcome::PromptFailed(format!("{e:#}"))),
        },
        Action::Abort(id) => client.abort(&id).await.err().and_then(error),
        Action::ReplyPermission(id, answer) => {
            client.reply_permission(&id, answer).await.err().and_then(error)
        }
        Action::ReplyQuestion(id, answers) => client.reply_question(&id, answers).await.err().and_then(error),
        Action::RejectQuestion(id) => client.reject_question(&id).await.err().and_then(error),
        Action::AnswerElicitation(session, id, reply) => {
            client.answer_elicitation(&session, &id, reply).await.err().and_then(error)
        }
        Action::Jobs(id, what) => app::perform_jobs(client, id, what).await,
        Action::ListSessions => match client.sessions(directory).await {
            Ok(sessions) => {
                Some(Outcome::Sessions(sessions.into_iter().filter(|s| s.parent_id.is_none()).collect()))
            }
            Err(e) => error(e),
        },
        Action::DeleteSession(id) => {
            let _ = client.delete_session(&id).await;
            None
        }
        Action::Revert(id, message) => match client.revert(&id, &message).await {
            Ok(session) => {
                let files = session.revert.as_ref().map_or(0, |r| r.files.len());
                let mut note =
                    format!("undid the last turn: {files} file(s) restored · /redo brings it back");
                // What acted outside the project is not undone (DESIGN.md §5m): named, so no one assumes it was.
                let kept = session.revert.as_ref().map(|r| r.not_undone.as_slice()).unwrap_or_default();
                if !kept.is_empty() {
                    let names: Vec<String> =
                        kept.iter().take(3).map(|c| format!("{} {}", c.tool, c.title)).collect();
                    let more = if kept.len() > 3 { ", …" } else { "" };
                    note.push_str(&format!(
                        " · NOT undone, acted outside the project: {}{more}",
                        names.join(", ")
                    ));
                }
                reload(client, session, note).await
            }
            Err(e) => error(e),
        },
        Action::Unrevert(id) => match client.unrevert(&id).await {
            Ok(session) => {
                reload(client, session, "redone: the turn and its files are back".to_owned()).await
            }
            Err(e) => error(e),
        },
        Action::Compact(id, focus) => match client.compact(&id, focus).await {
            Ok(()) => {
                Some(Outcome::Notice(Notice::info("compacted: the next message starts from the summary")))
            }
            Err(e) => Some(Outcome::PromptFailed(format!("{e:#}"))),
        },
        Action::CheckModel(model) => match client.check_model(Some(&model)).await {
            Ok(()) => Some(Outcome::ModelChosen(model)),
            Err(e) => error(e),
        },
        Action::CheckAgent(agent) => match client.check_agent(&agent).await {
            Ok(()) => Some(Outcome::AgentChosen(agent)),
            Err(e) => error(e),
        },
        Action::Export(id) => match export(client, directory, &id).await {
            Ok(path) => {
                Some(Outcome::Notice(Notice::info(format!("exported the session to {}", path.display()))))
            }
            Err(e) => error(e),
        },
        // The view fell behind the event stream: what it shows may be stale, so a failed reload says so.
        Action::Reload(id) => {
            let loaded = async {
                Ok::<_, anyhow::Error>((client.session(&id).await?, kept_history(client, &id).await?))
            };
            match loaded.await {
                Ok((session, history)) => Some(Outcome::Reloaded(session, history, None)),
                Err(e) => Some(Outcome::Notice(Notice::error(format!(
                    "the view fell behind and could not reload ({e:#}): what it shows may be out of date; \
                     /sessions reopens this one"
                )))),
            }
        }
        Action::Window(model) => {
            let window = client.context_window(&model).await;
            Some(Outcome::Window(model, window))
        }
        Action::LoadCommands => Some(Outcome::Commands(client.commands(directory).await)),
        Action::RunCommand(id, name, arguments, effort) => {
            match client.run_command(&id, &name, &arguments, effort).await {
                Ok(()) => None,
                Err(e) => Some(Outcome::PromptFailed(format!("{e:#}"))),
            }
        }
        Action::Quit => None,
    }
}

/// What one page read from the store holds at most when a session opens: messages, and parts (a page
/// of a few very long messages is as light as one of many short ones; one message is always read whole).
const OPEN_PAGE: Page = Page { before: None, limit: 50, max_parts: Some(500) };

/// A session's history as the UI keeps it, read a page at a time and compacted page by page, so only
/// one page is ever held in full.
async fn kept_history(client: &dyn Client, id: &SessionId) -> anyhow::Result<Vec<Kept>> {
    let fetch = |page: Page| async move { client.history_page(id, page).await };
    client::read_pages(OPEN_PAGE, fetch, Kept::new, |m| m.info.id()).await
}

async fn reload(client: &dyn Client, session: Session, note: String) -> Option<Outcome> {
    match kept_history(client, &session.id).await {
        Ok(history) => Some(Outcome::Reloaded(session, history, Some(note))),
        Err(e) => Some(Outcome::Notice(Notice::error(format!("{e:#}")))),
    }
}

/// Writes `codeloop-<session>.json` in the directory the UI was opened in.
async fn export(client: &dyn Client, directory: &std::path::Path, id: &SessionId) -> anyhow::Result<PathBuf> {
    let session = client.session(id).await?;
    let history = client.history(id).await?;
    let json = serde_json::to_string_pretty(&export_json(&session, &history))?;
    let path = directory.join(format!("codeloop-{id}.json"));
    tokio::fs::write(&path, json).await.with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// SIGTERM, SIGHUP and SIGINT end the UI normally (so the terminal is restored).
struct Signals {
    streams: Vec<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let kinds = [SignalKind::terminate(), SignalKind::hangup(), SignalKind::interrupt()];
        Signals { streams: kinds.into_iter().filter_map(|k| signal(k).ok()).collect() }
    }

    async fn next(&mut self) {
        if self.streams.is_empty() {
            return std::future::pending().await;
        }
        let waits = self.streams.iter_mut().map(|s| Box::pin(s.recv()));
        futures::future::select_all(waits).await;
    }
}
