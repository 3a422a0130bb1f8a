//! `codeloop session list|show|export|delete|compact`. Stored text shown on a terminal has its control
//! sequences neutralised ([`crate::terminal`]); `--format json` and `export` print it exactly.

use std::collections::HashSet;
use std::process::ExitCode;

use clap::Subcommand;
use codeloop_core::permission::AskPolicy;
use codeloop_core::projection::hidden_ids;
use codeloop_store::{MessageWithParts, SessionFilter};
use codeloop_types::{Message, MessageId, PartKind, SessionId, ToolState, date_of};
use serde_json::json;

use crate::render::{group, summarize_input};
use crate::terminal::Target;
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
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Show a session's conversation, including tool calls and messages hidden from the model.
    Show { id: String },
    /// Print a session with every message and part as JSON.
    Export { id: String },
    /// Delete a session, its children and everything stored for them.
    Delete { id: String },
    /// Summarise a session now, so its next turn starts from the summary.
    Compact { id: String },
    /// Put back every file the session changed from MESSAGE on, and hide those messages (git projects).
    Revert { id: String, message: String },
    /// Undo the last revert.
    Unrevert { id: String },
}

pub async fn session(command: SessionCommand) -> anyhow::Result<ExitCode> {
    let config = env::load_config(None)?;
    let engine = env::open_engine(config, AskPolicy::Deny)?;
    // Titles, answers and tool output are the model's and the tools' text.
    let out = Target::stdout();
    match command {
        SessionCommand::List { all, dir, format } => {
            let directory = match dir {
                Some(dir) => Some(crate::project_dir(Some(dir))?.display().to_string()),
                None => None,
            };
            let sessions =
                engine.sessions(&SessionFilter { include_children: all, directory, ..Default::default() })?;
            if format == Format::Json {
                println!("{}", serde_json::to_string_pretty(&sessions)?);
                return Ok(ExitCode::SUCCESS);
            }
            if sessions.is_empty() {
                eprintln!("no sessions yet: start one with codeloop run \"…\"");
            }
            for s in sessions {
                let tokens = s.tokens.input + s.tokens.output + s.tokens.reasoning + s.tokens.cache.read;
                say(
                    out,
                    &format!(
                        "{}  {}  {:>10} tok  ${:.4}  {}  {}",
                        s.id,
                        date_of(s.time.updated),
                        group(tokens),
                        s.cost,
                        s.title,
                        s.directory
                    ),
                );
            }
        }
        SessionCommand::Show { id } => {
            let id = SessionId::from(id);
            let session = engine.session(&id)?;
            let history = engine.history(&id)?;
            let hidden = hidden_ids(&history);
            say(out, &format!("{}  {}", session.id, session.title));
            say(out, &format!("directory: {}", session.directory));
            if let Some(model) = &session.model {
                say(out, &format!("model: {model}"));
            }
            say(
                out,
                &format!(
                    "tokens: {} in · {} out · {} reasoning · {} cache read · {} cache write · cost ${:.4}",
                    group(session.tokens.input),
                    group(session.tokens.output),
                    group(session.tokens.reasoning),
                    group(session.tokens.cache.read),
                    group(session.tokens.cache.write),
                    session.cost
                ),
            );
            for message in &history {
                print_message(out, message, &hidden);
            }
        }
        SessionCommand::Export { id } => {
            let id = SessionId::from(id);
            let session = engine.session(&id)?;
            let history = engine.history(&id)?;
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
            println!("{}", serde_json::to_string_pretty(&json!({"info": session, "messages": messages}))?);
        }
        SessionCommand::Delete { id } => {
            let id = SessionId::from(id);
            if engine.delete_session(&id)? {
                eprintln!("deleted {id}");
            } else {
                anyhow::bail!("session {id} not found");
            }
        }
        SessionCommand::Compact { id } => {
            let id = SessionId::from(id);
            engine.session(&id)?;
            let outcome = engine.compact(&id).await?;
            engine.flush().await?;
            match &outcome.stop {
                codeloop_core::StopReason::Completed => eprintln!("compacted {id}"),
                _ => return Ok(crate::run::exit_code(&outcome)),
            }
        }
        SessionCommand::Revert { id, message } => {
            let id = SessionId::from(id);
            let session = engine.revert(&id, &codeloop_types::MessageId::from(message)).await?;
            let files = session
                .revert
                .as_ref()
                .and_then(|r| r.get("files"))
                .and_then(|f| f.as_array())
                .map_or(0, Vec::len);
            eprintln!(
                "reverted {id}: {files} file(s) restored; the next message continues from there (undo with codeloop session unrevert {id})"
            );
        }
        SessionCommand::Unrevert { id } => {
            let id = SessionId::from(id);
            engine.unrevert(&id).await?;
            eprintln!("unreverted {id}");
        }
    }
    engine.flush().await?;
    Ok(ExitCode::SUCCESS)
}

fn print_message(out: Target, message: &MessageWithParts, hidden: &HashSet<MessageId>) {
    let marker = if hidden.contains(message.info.id()) { "  [hidden from the model]" } else { "" };
    match &message.info {
        Message::User(_) => say(out, &format!("\n── user{marker}")),
        Message::Assistant(a) => {
            let mut line = format!("\n── assistant ({}", a.model);
            if a.summary {
                line.push_str(", summary");
            }
            if let Some(finish) = a.finish {
                line.push_str(&format!(", {}", finish.as_str()));
            }
            line.push_str(&format!(
                ", {} in / {} out, ${:.4})",
                group(a.tokens.input),
                group(a.tokens.output),
                a.cost
            ));
            say(out, &format!("{line}{marker}"));
            if let Some(error) = &a.error {
                say(out, &format!("  error: {}", error));
            }
        }
    }
    for part in &message.parts {
        match &part.kind {
            PartKind::Text(text) if !text.ignored => say(out, &text.text),
            PartKind::Reasoning(r) if !r.text.is_empty() => {
                say(out, &format!("  (thinking) {}", first_line(&r.text)))
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
                        say(out, &format!("  ✓ {} {input}{pruned}", tool.tool));
                        for line in done.output.lines().take(3) {
                            say(out, &format!("    {line}"));
                        }
                    }
                    ToolState::Error(error) => {
                        say(out, &format!("  ✗ {} {input}: {}", tool.tool, first_line(&error.error)))
                    }
                    other => say(out, &format!("  … {} {input} ({})", tool.tool, other.status())),
                }
            }
            PartKind::Compaction(c) => say(
                out,
                &format!(
                    "  [compaction request{}{}]",
                    if c.auto { ", automatic" } else { "" },
                    if c.overflow { ", overflow" } else { "" }
                ),
            ),
            PartKind::File(f) => {
                say(out, &format!("  [file {} {}]", f.mime, f.filename.as_deref().unwrap_or("")))
            }
            _ => {}
        }
    }
}

/// Prints one line of stored text: neutralised on a terminal, since it came from the model or a tool.
fn say(out: Target, text: &str) {
    println!("{}", out.show(text));
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}
