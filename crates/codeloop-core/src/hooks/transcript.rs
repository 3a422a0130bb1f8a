//! `transcript_path` (DESIGN.md §5d): one JSON Lines file per session, in Claude Code's line shapes, that
//! outlives the hook — a Stop or SessionEnd hook reads it line by line, and a hook may hand it to a
//! background job. It is written afresh from the stored history before the hooks of an event run
//! (replaced in one rename, so a reader never sees half a file), and goes with its session.
//!
//! Each line is one message: `{type: "user"|"assistant", message: {role, content}, uuid, parentUuid,
//! isSidechain, timestamp, sessionId, cwd}`; an assistant's tool calls are `tool_use` blocks (Claude's names
//! and arguments for Claude's tools), each result a `user` line with a `tool_result` block.
//!
//! Owns: the file's place and its lines. Must not: fire hooks or read anything but the history given.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use codeloop_types::{Message, MessageWithParts, PartKind, SessionId, ToolState, iso8601};
use serde_json::{Value, json};

/// The transcript of `session` in `dir`.
pub(crate) fn path(dir: &Path, session: &SessionId) -> PathBuf {
    dir.join(format!("{session}.jsonl"))
}

/// Writes the transcript of `history` to `path` (through a temp file renamed over it).
pub(crate) fn write(
    path: &Path,
    session: &SessionId,
    cwd: &Path,
    history: &[MessageWithParts],
) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let temp = path.with_extension(format!("jsonl.{}.tmp", std::process::id()));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&temp)?);
    for line in lines(session, cwd, history) {
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&temp, path)
}

fn lines(session: &SessionId, cwd: &Path, history: &[MessageWithParts]) -> Vec<Value> {
    let cwd = cwd.display().to_string();
    let mut out = Vec::with_capacity(history.len() * 2);
    let mut parent: Option<String> = None;
    let mut line = |kind: &str, uuid: String, time: i64, message: Value, parent: &mut Option<String>| {
        out.push(json!({
            "parentUuid": parent.clone(),
            "isSidechain": false,
            "type": kind,
            "message": message,
            "uuid": uuid,
            "timestamp": iso8601(time),
            "sessionId": session,
            "cwd": cwd,
        }));
        *parent = Some(uuid);
    };
    for message in history {
        match &message.info {
            Message::User(user) => {
                let text: Vec<&str> = message
                    .parts
                    .iter()
                    .filter_map(|p| match &p.kind {
                        PartKind::Text(text) if !text.synthetic => Some(text.text.as_str()),
                        _ => None,
                    })
                    .collect();
                let content = json!({"role": "user", "content": text.join("\n")});
                line("user", user.id.to_string(), user.time.created, content, &mut parent);
            }
            Message::Assistant(assistant) => {
                let mut blocks = Vec::new();
                let mut results = Vec::new();
                for part in &message.parts {
                    match &part.kind {
                        PartKind::Text(text) if !text.text.is_empty() => {
                            blocks.push(json!({"type": "text", "text": text.text}))
                        }
                        PartKind::Reasoning(reasoning) if !reasoning.text.is_empty() => {
                            blocks.push(json!({"type": "thinking", "thinking": reasoning.text}))
                        }
                        PartKind::Tool(tool) => {
                            let names = super::tool_names(&tool.tool, None);
                            let input =
                                super::claude::tool_input(&tool.tool, tool.state.input(), Path::new(&cwd));
                            blocks.push(json!({"type": "tool_use", "id": tool.call_id, "name": names[0], "input": input}));
                            let (content, is_error) = match &tool.state {
                                ToolState::Completed(done) => (done.output.clone(), false),
                                ToolState::Error(error) => (error.error.clone(), true),
                                _ => continue,
                            };
                            results.push((part.id.to_string(), json!({
                                "type": "tool_result", "tool_use_id": tool.call_id, "content": content, "is_error": is_error,
                            })));
                        }
                        _ => {}
                    }
                }
                let content =
                    json!({"role": "assistant", "model": assistant.model.model_id, "content": blocks});
                line("assistant", assistant.id.to_string(), assistant.time.created, content, &mut parent);
                let at = assistant.time.completed.unwrap_or(assistant.time.created);
                for (uuid, result) in results {
                    line("user", uuid, at, json!({"role": "user", "content": [result]}), &mut parent);
                }
            }
        }
    }
    out
}
