//! `codeloop session list|show|export|delete|compact|revert|unrevert`. Stored text shown on a terminal has
//! its control sequences neutralised ([`crate::terminal`]); `--format json` and `export` print it exactly.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use codeloop_core::SessionCommand as Command;
use codeloop_core::permission::AskPolicy;
use codeloop_core::projection::hidden_ids;
use codeloop_types::{Message, MessageId, PartKind, Session, SessionId, Tokens, ToolState, date_of};
use codeloop_types::{MessageWithParts, SessionFilter};
use serde_json::json;

use crate::render::{group, summarize_input};
use crate::terminal::Neutralising;
use crate::{Format, env};

#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// List sessions, most recently updated first.
    List {
        /// Include child (subagent) sessions.
        #[arg(long)]
        all: bool,
        /// Only sessions in this directory.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// text: one line per session; json: the full session records.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Show a session's conversation with message ids, tool calls and messages hidden from the model.
    Show {
        /// The session id (ses_…), as `codeloop session list` shows it.
        id: String,
    },
    /// Print a session with every message and part as JSON.
    Export {
        /// The session id (ses_…), as `codeloop session list` shows it.
        id: String,
    },
    /// Delete a session, its children and everything stored for them.
    Delete {
        /// The session id (ses_…), as `codeloop session list` shows it.
        id: String,
    },
    /// Summarise a session now, so its next turn starts from the summary.
    Compact {
        /// The session id (ses_…), as `codeloop session list` shows it.
        id: String,
    },
    /// Put back every file the session changed from MESSAGE on, and hide those messages (git projects).
    Revert {
        /// The session id (ses_…), as `codeloop session list` shows it.
        id: String,
        /// The first message to undo (msg_…), as `codeloop session show` shows it.
        message: String,
    },
    /// Undo the last revert (until a new message makes it final).
    Unrevert {
        /// The session id (ses_…), as `codeloop session list` shows it.
        id: String,
    },
    /// List a session's background jobs (running, exited, killed, lost), or end one with --kill.
    Jobs {
        /// The session id (ses_…), as `codeloop session list` shows it.
        id: String,
        /// End this job (job_…): TERM, then KILL after 2 s. Only the codeloop process that runs it can.
        #[arg(long)]
        kill: Option<String>,
        /// text: one line per job; json: `[{id, command, state, exit_code?, started, ended?}]`.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

pub async fn session(command: SessionCommand) -> anyhow::Result<ExitCode> {
    let config = env::load_config(session_directory(&command)?.as_deref())?;
    let engine = env::open_engine(config, AskPolicy::Deny)?;
    match command {
        SessionCommand::List { all, dir, format } => {
            let directory = match dir {
                Some(dir) => Some(crate::project_dir(Some(dir))?.display().to_string()),
                None => None,
            };
            let sessions = engine
                .sessions(SessionFilter { include_children: all, directory, ..Default::default() })
                .await?;
            if format == Format::Json {
                writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&sessions)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            if sessions.is_empty() {
                eprintln!("no sessions yet: start one with codeloop run \"…\"");
            }
            let mut out = Neutralising::stdout();
            for s in sessions {
                let tokens = s.tokens.input + s.tokens.output + s.tokens.reasoning + s.tokens.cache.read;
                writeln!(
                    out,
                    "{}  {}  {:>10} tok  ${:.4}  {}  {}",
                    s.id,
                    date_of(s.time.updated),
                    format!("{}{}", approx(&s.tokens), group(tokens)),
                    s.cost,
                    s.title,
                    s.directory
                )?;
            }
        }
        SessionCommand::Show { id } => {
            let id = SessionId::from(id);
            let session = engine.session(&id).await?;
            let history = engine.history(&id).await?;
            let hidden = hidden_ids(&history);
            // Titles, answers and tool output are the model's and the tools' text.
            let mut out = Neutralising::stdout();
            let approx = approx(&session.tokens);
            writeln!(out, "{}  {}", session.id, session.title)?;
            writeln!(out, "directory: {}", session.directory)?;
            if let Some(model) = &session.model {
                writeln!(out, "model: {model}")?;
            }
            writeln!(
                out,
                "tokens: {approx}{} in · {approx}{} out · {} reasoning · {} cache read · {} cache write · cost ${:.4}",
                group(session.tokens.input),
                group(session.tokens.output),
                group(session.tokens.reasoning),
                group(session.tokens.cache.read),
                group(session.tokens.cache.write),
                session.cost
            )?;
            let reverted_from = reverted_from(&session);
            if let Some(from) = &reverted_from {
                writeln!(
                    out,
                    "reverted from {from}: the next message continues from there (undo with codeloop session unrevert {id})"
                )?;
            }
            for message in &history {
                let marker = if reverted_from.as_ref().is_some_and(|from| message.info.id() >= from) {
                    "  [reverted]"
                } else if hidden.contains(message.info.id()) {
                    "  [hidden from the model]"
                } else {
                    ""
                };
                print_message(&mut out, message, marker)?;
            }
        }
        SessionCommand::Export { id } => {
            let id = SessionId::from(id);
            let session = engine.session(&id).await?;
            let history = engine.history(&id).await?;
            let hidden = hidden_ids(&history);
            let messages: Vec<serde_json::Value> = history
                .iter()
                .map(|m| {
                    let mut value = json!({"info": m.info, "parts": m.parts});
                    if hidden.contains(m.info.id()) {
                        value["hidden"] = json!(true);
                    }
                    value
                })
                .collect();
            let export = serde_json::to_string_pretty(&json!({"info": session, "messages": messages}))?;
            writeln!(std::io::stdout().lock(), "{export}")?;
        }
        SessionCommand::Jobs { id, kill, format } => {
            let id = SessionId::from(id);
            if let Some(job) = kill {
                let outcome =
                    engine.submit(Command::KillJob { session: id.clone(), job: job.as_str().into() }).await?;
                if let codeloop_core::CommandOutcome::Job(job) = outcome {
                    eprintln!("{} {}", job.id, job.state);
                }
                return Ok(ExitCode::SUCCESS);
            }
            let jobs = engine.jobs(&id).await?;
            if format == Format::Json {
                writeln!(std::io::stdout().lock(), "{}", serde_json::to_string_pretty(&jobs)?)?;
                return Ok(ExitCode::SUCCESS);
            }
            if jobs.is_empty() {
                eprintln!("no background jobs in {id}");
            }
            let mut out = Neutralising::stdout();
            for job in jobs {
                let code = job.exit_code.map(|c| format!(" (exit {c})")).unwrap_or_default();
                writeln!(out, "{}  {}{code}  {}  {}", job.id, job.state, date_of(job.started), job.command)?;
            }
        }
        SessionCommand::Delete { id } => {
            let id = SessionId::from(id);
            if engine.delete_session(&id).await? {
                eprintln!("deleted {id}");
            } else {
                anyhow::bail!("session {id} not found");
            }
        }
        SessionCommand::Compact { id } => {
            let id = SessionId::from(id);
            let outcome = engine.submit(Command::Compact { session: id.clone(), focus: None }).await?;
            let outcome = outcome.into_run().context("the compaction did not run")?;
            engine.flush().await?;
            match &outcome.stop {
                codeloop_core::StopReason::Completed => eprintln!("compacted {id}"),
                _ => return Ok(crate::run::exit_code(&outcome)),
            }
        }
        SessionCommand::Revert { id, message } => {
            let id = SessionId::from(id);
            let command =
                Command::Revert { session: id.clone(), message: codeloop_types::MessageId::from(message) };
            let codeloop_core::CommandOutcome::Session(session) = engine.submit(command).await? else {
                anyhow::bail!("the revert of {id} did not change the session");
            };
            let files = session.revert.as_ref().map_or(0, |r| r.files.len());
            eprintln!(
                "reverted {id}: {files} file(s) restored; the next message continues from there (undo with codeloop session unrevert {id})"
            );
            // What acted outside the project stays done: said, so no one believes it undone.
            let not_undone = session.revert.as_ref().map(|r| r.not_undone.as_slice()).unwrap_or_default();
            if !not_undone.is_empty() {
                eprintln!("not undone (these acted outside the project files):");
                for call in not_undone {
                    let title = crate::terminal::for_stderr(&call.title);
                    eprintln!(
                        "  {} {} ({}, {})",
                        call.tool,
                        title,
                        call.call_id,
                        codeloop_types::iso8601(call.time)
                    );
                }
            }
        }
        SessionCommand::Unrevert { id } => {
            let id = SessionId::from(id);
            if engine.session(&id).await?.revert.is_none() {
                anyhow::bail!(
                    "session {id} has no revert to undo (a message sent after a revert makes it final)"
                );
            }
            engine.submit(Command::Unrevert { session: id.clone() }).await?;
            eprintln!("unreverted {id}");
        }
    }
    engine.flush().await?;
    Ok(ExitCode::SUCCESS)
}

/// The directory of the session a command names, so that its project's config (providers, compaction,
/// snapshots) applies as it does for `run` there. `None` for `list`, an unknown session, or a directory
/// that is gone.
fn session_directory(command: &SessionCommand) -> anyhow::Result<Option<PathBuf>> {
    let id = match command {
        SessionCommand::List { .. } => return Ok(None),
        SessionCommand::Show { id }
        | SessionCommand::Export { id }
        | SessionCommand::Delete { id }
        | SessionCommand::Compact { id }
        | SessionCommand::Revert { id, .. }
        | SessionCommand::Unrevert { id }
        | SessionCommand::Jobs { id, .. } => SessionId::from(id.as_str()),
    };
    let store = env::open_store()?;
    let session = store.get_session(&id)?;
    Ok(session.map(|s| PathBuf::from(s.directory)).filter(|dir| dir.is_dir()))
}

/// "~" before token counts that are estimates (the provider sent no usage).
fn approx(tokens: &Tokens) -> &'static str {
    if tokens.estimated { "~" } else { "" }
}

/// The first message a pending revert hides.
fn reverted_from(session: &Session) -> Option<MessageId> {
    session.revert.as_ref().map(|revert| revert.message_id.clone())
}

/// One message with its id (what `session revert` takes) and `marker` after its heading.
fn print_message(out: &mut impl Write, message: &MessageWithParts, marker: &str) -> std::io::Result<()> {
    let id = message.info.id();
    match &message.info {
        Message::User(_) => writeln!(out, "\n── user {id}{marker}")?,
        Message::Assistant(a) => {
            let mut line = format!("\n── assistant {id} ({}", a.model);
            if a.summary {
                line.push_str(", summary");
            }
            if let Some(finish) = a.finish {
                line.push_str(&format!(", {}", finish.as_str()));
            }
            let approx = approx(&a.tokens);
            line.push_str(&format!(
                ", {approx}{} in / {approx}{} out, ${:.4})",
                group(a.tokens.input),
                group(a.tokens.output),
                a.cost
            ));
            writeln!(out, "{line}{marker}")?;
            if let Some(error) = &a.error {
                writeln!(out, "  error: {}", error)?;
            }
        }
    }
    for part in &message.parts {
        match &part.kind {
            PartKind::Text(text) if !text.ignored => match text.carried_label() {
                // A restored file's text is on disk and in the export; its name is enough here.
                Some(label)
                    if text.metadata.as_ref().and_then(|m| m.get("carried")) == Some(&"files".into()) =>
                {
                    writeln!(out, "  ↳ {label}")?
                }
                Some(label) => writeln!(out, "  ↳ {label}\n{}", text.text)?,
                None => writeln!(out, "{}", text.text)?,
            },
            PartKind::Reasoning(r) if !r.text.is_empty() => {
                writeln!(out, "  (thinking) {}", first_line(&r.text))?
            }
            PartKind::Tool(tool) => {
                let input = summarize_input(&tool.tool, tool.state.input());
                match &tool.state {
                    ToolState::Completed(done) => {
                        let pruned = if done.time.compacted.is_some() {
                            " [output cleared for the model]"
                        } else {
                            ""
                        };
                        writeln!(out, "  ✓ {} {input}{pruned}", tool.tool)?;
                        for line in done.output.lines().take(3) {
                            writeln!(out, "    {line}")?;
                        }
                    }
                    ToolState::Error(error) => {
                        let outcome =
                            error.metadata.as_ref().and_then(|m| m.get("outcome")).and_then(|o| o.as_str());
                        match outcome {
                            // Not a failure: it started, then was cut short, and may have acted.
                            Some(codeloop_types::OUTCOME_UNKNOWN) => writeln!(
                                out,
                                "  ■ {} {input}: interrupted after it started, outcome unknown (it may have acted; call {})",
                                tool.tool, tool.call_id
                            )?,
                            _ => writeln!(out, "  ✗ {} {input}: {}", tool.tool, first_line(&error.error))?,
                        }
                    }
                    other => writeln!(out, "  … {} {input} ({})", tool.tool, other.status())?,
                }
            }
            PartKind::Compaction(c) => writeln!(
                out,
                "  [compaction request{}{}]",
                if c.auto { ", automatic" } else { "" },
                if c.overflow { ", overflow" } else { "" }
            )?,
            PartKind::File(f) => {
                writeln!(out, "  [file {} {}]", f.mime, f.filename.as_deref().unwrap_or(""))?
            }
            _ => {}
        }
    }
    Ok(())
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
