//! How a codeloop tool call looks to an ACP client: kind, title, locations and content per state.
//!
//! Owns: the mapping from a stored [`ToolPart`] to `tool_call` / `tool_call_update` fields — diffs for
//! edits, output for commands, the files a call touches.
//! Must not: decide when to send them ([`crate::stream`] does).

use codeloop_tools::patch_files;
use std::path::{Path, PathBuf};

use codeloop_types::{ToolPart, ToolState};
use serde_json::{Value, json};

use crate::protocol::{
    ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolKind,
};

/// Live command output shown while a call runs: its tail, so a chatty command costs little per update.
const LIVE_OUTPUT_CHARS: usize = 4_000;
/// Output shown in a finished call's content (the full text is in `rawOutput`).
const OUTPUT_CHARS: usize = 20_000;

pub fn kind(tool: &str) -> ToolKind {
    match tool {
        "read" | "skill" => ToolKind::Read,
        "edit" | "write" | "apply_patch" => ToolKind::Edit,
        "grep" | "glob" | "list" => ToolKind::Search,
        "bash" => ToolKind::Execute,
        "webfetch" => ToolKind::Fetch,
        "todowrite" | "task" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

pub fn status(state: &ToolState) -> ToolCallStatus {
    match state {
        ToolState::Pending(_) => ToolCallStatus::Pending,
        ToolState::Running(_) => ToolCallStatus::InProgress,
        ToolState::Completed(_) => ToolCallStatus::Completed,
        ToolState::Error(_) => ToolCallStatus::Failed,
    }
}

pub fn input(state: &ToolState) -> &Value {
    match state {
        ToolState::Pending(s) => &s.input,
        ToolState::Running(s) => &s.input,
        ToolState::Completed(s) => &s.input,
        ToolState::Error(s) => &s.input,
    }
}

fn field<'a>(input: &'a Value, name: &str) -> Option<&'a str> {
    input.get(name).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// `path` relative to `cwd` when inside it, for titles.
fn shown(path: &str, cwd: &Path) -> String {
    Path::new(path).strip_prefix(cwd).map(|p| p.display().to_string()).unwrap_or_else(|_| path.to_owned())
}

fn absolute(path: &str, cwd: &Path) -> PathBuf {
    let path = Path::new(path);
    if path.is_absolute() { path.to_owned() } else { cwd.join(path) }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// A short human title: "Read src/main.rs", "`cargo test`", "Search `fn main`".
pub fn title(tool: &ToolPart, cwd: &Path) -> String {
    let input = input(&tool.state);
    let path = || field(input, "filePath").map(|p| shown(p, cwd));
    let title = match tool.tool.as_str() {
        "bash" => field(input, "command").map(|c| format!("`{}`", first_line(c))),
        "read" => path().map(|p| format!("Read {p}")),
        "edit" => path().map(|p| format!("Edit {p}")),
        "write" => path().map(|p| format!("Write {p}")),
        "grep" => field(input, "pattern").map(|p| format!("Search `{p}`")),
        "glob" => field(input, "pattern").map(|p| format!("Find `{p}`")),
        "webfetch" => field(input, "url").map(|u| format!("Fetch {u}")),
        "todowrite" => Some("Update the plan".to_owned()),
        "task" => field(input, "description").map(|d| format!("Task: {d}")),
        "skill" => field(input, "name").map(|n| format!("Skill {n}")),
        "apply_patch" => patch_text(input).map(|p| format!("Patch {}", patch_files(p).join(", "))),
        _ => None,
    };
    let title = title.or_else(|| match &tool.state {
        ToolState::Running(running) => running.title.clone(),
        ToolState::Completed(completed) if !completed.title.is_empty() => Some(completed.title.clone()),
        _ => None,
    });
    codeloop_tools::ellipsize(&title.unwrap_or_else(|| tool.tool.clone()), 120)
}

fn patch_text(input: &Value) -> Option<&str> {
    field(input, "patchText").or_else(|| field(input, "patch_text"))
}

/// The files (and line) a call reads or changes, for "follow the agent" in editors.
pub fn locations(tool: &ToolPart, cwd: &Path) -> Vec<ToolCallLocation> {
    let input = input(&tool.state);
    match tool.tool.as_str() {
        "read" | "edit" | "write" => field(input, "filePath")
            .map(|p| {
                let line = input.get("offset").and_then(Value::as_u64).and_then(|l| u32::try_from(l).ok());
                vec![ToolCallLocation { path: absolute(p, cwd), line }]
            })
            .unwrap_or_default(),
        "grep" | "glob" | "list" => field(input, "path")
            .map(|p| vec![ToolCallLocation { path: absolute(p, cwd), line: None }])
            .unwrap_or_default(),
        "apply_patch" => patch_text(input)
            .map(|p| {
                patch_files(p)
                    .into_iter()
                    .map(|f| ToolCallLocation { path: absolute(f, cwd), line: None })
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// What the client shows inside the call: the proposed or applied diff of an edit, a command's output
/// (live while it runs), a result's text, or the error.
pub fn content(tool: &ToolPart, cwd: &Path) -> Vec<ToolCallContent> {
    let input = input(&tool.state);
    if let Some(diff) = diff(tool, input, cwd) {
        let mut content = vec![diff];
        if let ToolState::Error(error) = &tool.state {
            content.push(ToolCallContent::text(error.error.clone()));
        }
        return content;
    }
    match &tool.state {
        ToolState::Pending(_) => Vec::new(),
        ToolState::Running(running) => running
            .metadata
            .as_ref()
            .and_then(|m| m.get("output"))
            .and_then(Value::as_str)
            .filter(|o| !o.is_empty())
            .map(|output| vec![ToolCallContent::text(fenced(tail(output, LIVE_OUTPUT_CHARS)))])
            .unwrap_or_default(),
        ToolState::Completed(completed) => {
            if tool.tool == "apply_patch"
                && let Some(diff) = completed.metadata.get("diff").and_then(Value::as_str)
            {
                return vec![ToolCallContent::text(format!("```diff\n{}\n```", diff.trim_end()))];
            }
            if completed.output.is_empty() || tool.tool == "todowrite" {
                return Vec::new();
            }
            let output = codeloop_tools::ellipsize(&completed.output, OUTPUT_CHARS);
            let text = if tool.tool == "bash" { fenced(&output) } else { output };
            vec![ToolCallContent::text(text)]
        }
        ToolState::Error(error) => vec![ToolCallContent::text(error.error.clone())],
    }
}

/// `edit` and `write` as a diff the client can render and apply: the replaced text and its
/// replacement, or a whole new file.
fn diff(tool: &ToolPart, input: &Value, cwd: &Path) -> Option<ToolCallContent> {
    let path = absolute(field(input, "filePath")?, cwd);
    match tool.tool.as_str() {
        "edit" => Some(ToolCallContent::Diff {
            path,
            old_text: Some(input.get("oldString").and_then(Value::as_str).unwrap_or("").to_owned()),
            new_text: input.get("newString").and_then(Value::as_str)?.to_owned(),
        }),
        "write" => Some(ToolCallContent::Diff {
            path,
            old_text: None,
            new_text: input.get("content").and_then(Value::as_str)?.to_owned(),
        }),
        _ => None,
    }
}

fn tail(text: &str, chars: usize) -> &str {
    let count = text.chars().count();
    if count <= chars {
        return text;
    }
    let skip = text.char_indices().nth(count - chars).map(|(i, _)| i).unwrap_or(0);
    &text[skip..]
}

fn fenced(text: &str) -> String {
    // A fence longer than any backtick run inside keeps the output verbatim.
    let mut fence = "```".to_owned();
    while text.contains(&fence) {
        fence.push('`');
    }
    format!("{fence}\n{}\n{fence}", text.trim_end_matches('\n'))
}

/// `rawOutput` of a finished call.
pub fn raw_output(state: &ToolState) -> Option<Value> {
    match state {
        ToolState::Completed(c) => Some(json!({"output": c.output, "metadata": c.metadata})),
        ToolState::Error(e) => Some(json!({"error": e.error})),
        ToolState::Pending(_) | ToolState::Running(_) => None,
    }
}

/// The whole call, as first announced (or replayed from history).
pub fn tool_call(id: &str, tool: &ToolPart, cwd: &Path) -> ToolCall {
    let input = input(&tool.state);
    ToolCall {
        tool_call_id: id.to_owned(),
        title: title(tool, cwd),
        kind: kind(&tool.tool),
        status: status(&tool.state),
        content: content(tool, cwd),
        locations: locations(tool, cwd),
        raw_input: (!is_empty(input)).then(|| input.clone()),
        raw_output: raw_output(&tool.state),
    }
}

/// Every field, as an update (the shape `session/request_permission` carries).
pub fn full_update(id: &str, tool: &ToolPart, cwd: &Path) -> ToolCallUpdate {
    let call = tool_call(id, tool, cwd);
    ToolCallUpdate {
        tool_call_id: call.tool_call_id,
        title: Some(call.title),
        kind: Some(call.kind),
        status: Some(call.status),
        content: Some(call.content),
        locations: Some(call.locations),
        raw_input: call.raw_input,
        raw_output: call.raw_output,
    }
}

fn is_empty(input: &Value) -> bool {
    input.is_null() || input.as_object().is_some_and(|o| o.is_empty())
}

#[cfg(test)]
mod tests {
    use codeloop_types::{ToolCompleted, ToolTime};
    use pretty_assertions::assert_eq;

    use super::*;

    fn part(tool: &str, state: ToolState) -> ToolPart {
        ToolPart { call_id: "call_1".into(), tool: tool.into(), state, metadata: None, ignored: false }
    }

    fn running(input: Value, metadata: Option<Value>) -> ToolState {
        serde_json::from_value(
            json!({"status": "running", "input": input, "metadata": metadata, "time": {"start": 1}}),
        )
        .unwrap()
    }

    #[test]
    fn an_edit_shows_its_diff_and_location() {
        let cwd = Path::new("/p");
        let edit =
            part("edit", running(json!({"filePath": "src/a.rs", "oldString": "x", "newString": "y"}), None));
        let call = tool_call("prt_1", &edit, cwd);
        assert_eq!(call.title, "Edit src/a.rs");
        assert_eq!(call.kind, ToolKind::Edit);
        assert_eq!(call.status, ToolCallStatus::InProgress);
        assert_eq!(
            call.content,
            vec![ToolCallContent::Diff {
                path: "/p/src/a.rs".into(),
                old_text: Some("x".into()),
                new_text: "y".into()
            }]
        );
        assert_eq!(call.locations, vec![ToolCallLocation { path: "/p/src/a.rs".into(), line: None }]);
    }

    #[test]
    fn a_command_shows_live_then_final_output() {
        let cwd = Path::new("/p");
        let live = part("bash", running(json!({"command": "ls\n-la"}), Some(json!({"output": "a\nb\n"}))));
        assert_eq!(title(&live, cwd), "`ls`");
        assert_eq!(content(&live, cwd), vec![ToolCallContent::text("```\na\nb\n```")]);
        let done = part(
            "bash",
            ToolState::Completed(ToolCompleted {
                input: json!({"command": "ls"}),
                output: "a\n```\n".into(),
                title: "ls".into(),
                metadata: json!({}),
                attachments: Vec::new(),
                time: ToolTime { start: 1, end: 2, compacted: None },
            }),
        );
        assert_eq!(content(&done, cwd), vec![ToolCallContent::text("````\na\n```\n````")]);
        assert_eq!(status(&done.state), ToolCallStatus::Completed);
        assert_eq!(raw_output(&done.state).unwrap()["output"], "a\n```\n");
    }

    #[test]
    fn tails_keep_the_end_on_char_boundaries() {
        assert_eq!(tail("héllo", 3), "llo");
        assert_eq!(tail("hé", 5), "hé");
    }
}
