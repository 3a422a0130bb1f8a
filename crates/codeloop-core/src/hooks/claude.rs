//! Claude Code's shapes for Claude Code's tool names (DESIGN.md §5d): what a hook reads as `tool_input` and
//! `tool_response` for `Bash`, `Read`, `Write` and `Edit` is what Claude Code 2.1 sends (recorded from the
//! real binary: `tests/engine/fixtures/claude-code-2.1.332`), so a guard written for Claude Code reads the
//! same keys here (`tool_input.new_string`, `tool_response.stdout`); an `updatedInput` in Claude's keys is
//! put back into codeloop's. Tools Claude Code does not have (Grep, Glob, apply_patch, …) keep codeloop's
//! shapes.
//!
//! Owns: the translation both ways, the per-tool responses and a failure's `error`. Must not: run hooks or
//! tools (the hooked tool call does), or read files beyond what a response needs.

use std::path::Path;

use codeloop_tools::ToolOutput;
use serde_json::{Map, Value, json};

/// What a file held before a Write or Edit, read only when a PostToolUse hook will see the response.
pub(crate) type Original = Option<String>;

/// The largest file whose text goes into a response (`originalFile`, `content`): beyond it the response
/// says nothing of the text rather than hold a huge file in memory.
const MAX_RESPONSE_FILE: u64 = 4 * 1024 * 1024;

/// The model's arguments as a hook sees them: Claude's keys for Claude's tools (`file_path` absolute,
/// `old_string`, `replace_all` …), codeloop's own arguments for the rest.
pub(crate) fn tool_input(tool: &str, input: &Value, cwd: &Path) -> Value {
    let get = |key: &str| input.get(key).cloned();
    let mut out = Map::new();
    match tool {
        "bash" => {
            // Claude's keys first; `workdir` and `escalate` are codeloop's own, kept when given.
            for key in ["command", "description", "timeout", "run_in_background", "workdir", "escalate"] {
                if let Some(value) = get(key).filter(|v| !v.is_null()) {
                    out.insert(key.to_owned(), value);
                }
            }
        }
        "read" | "write" | "edit" => {
            out.insert("file_path".into(), json!(absolute(input, cwd)));
            let keys: &[(&str, &str)] = match tool {
                "read" => &[("offset", "offset"), ("limit", "limit")],
                "write" => &[("content", "content")],
                _ => &[("old_string", "oldString"), ("new_string", "newString")],
            };
            for (claude, ours) in keys {
                if let Some(value) = get(ours).filter(|v| !v.is_null()) {
                    out.insert((*claude).to_owned(), value);
                }
            }
            if tool == "edit" {
                out.insert(
                    "replace_all".into(),
                    json!(get("replaceAll").and_then(|v| v.as_bool()).unwrap_or(false)),
                );
            }
        }
        _ => return input.clone(),
    }
    Value::Object(out)
}

/// A hook's `updatedInput` as codeloop's tool takes it: Claude's keys become codeloop's (`file_path` →
/// `filePath`, `old_string` → `oldString`, …); keys already codeloop's stay.
pub(crate) fn codeloop_input(tool: &str, updated: Value) -> Value {
    let renames: &[(&str, &str)] = match tool {
        "read" | "write" => &[("file_path", "filePath")],
        "edit" => &[
            ("file_path", "filePath"),
            ("old_string", "oldString"),
            ("new_string", "newString"),
            ("replace_all", "replaceAll"),
        ],
        _ => return updated,
    };
    let Value::Object(map) = updated else { return updated };
    let mut out = Map::new();
    for (key, value) in map {
        let key =
            renames.iter().find(|(claude, _)| *claude == key).map_or(key, |(_, ours)| (*ours).to_owned());
        out.insert(key, value);
    }
    Value::Object(out)
}

/// What the file at `input`'s path holds now (for a Write's or Edit's `originalFile`); `None` when there is
/// no such file, or it is not text of a sensible size.
pub(crate) fn read_original(tool: &str, input: &Value, cwd: &Path) -> Original {
    if !matches!(tool, "write" | "edit") {
        return None;
    }
    read_text(Path::new(&absolute(input, cwd)))
}

fn read_text(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_RESPONSE_FILE {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

/// The tool's result as a hook sees it in `tool_response`: Claude's shape for Bash, Read, Write and Edit,
/// else `{title, output, metadata}`.
pub(crate) fn tool_response(
    tool: &str,
    input: &Value,
    output: &ToolOutput,
    original: &Original,
    cwd: &Path,
) -> Value {
    let path = absolute(input, cwd);
    let text = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    match tool {
        "bash" => json!({
            "stdout": command_output(&output.output, &output.metadata),
            "stderr": "",
            "interrupted": output.metadata.get("exit").is_some_and(Value::is_null),
            "isImage": false,
            "noOutputExpected": false,
        }),
        "read" => match read_text(Path::new(&path)) {
            Some(content) => read_response(&path, &content, input),
            None => generic(output),
        },
        "write" => {
            let content = text("content");
            json!({
                "type": if original.is_some() { "update" } else { "create" },
                "filePath": path,
                "content": content,
                "structuredPatch": original.as_deref().map_or(Vec::new(), |before| structured_patch(before, &content)),
                "originalFile": original,
                "userModified": false,
            })
        }
        "edit" => {
            let after = read_text(Path::new(&path)).unwrap_or_default();
            json!({
                "filePath": path,
                "oldString": text("oldString"),
                "newString": text("newString"),
                "originalFile": original,
                "structuredPatch": original.as_deref().map_or(Vec::new(), |before| structured_patch(before, &after)),
                "userModified": false,
                "replaceAll": input.get("replaceAll").and_then(Value::as_bool).unwrap_or(false),
            })
        }
        _ => generic(output),
    }
}

/// A failed call's `error` for PostToolUseFailure: a Bash call that ran and exited non-zero reads as
/// Claude's `Exit code N` and its output; anything else is the failure's text.
pub(crate) fn failure_error(tool: &str, output: &ToolOutput) -> String {
    match (tool, output.metadata.get("exit").and_then(Value::as_i64)) {
        ("bash", Some(code)) => match command_output(&output.output, &output.metadata) {
            own if own.is_empty() => format!("Exit code {code}"),
            own => format!("Exit code {code}\n{own}"),
        },
        _ => output.output.clone(),
    }
}

/// Whether `line` is the bash tool's first line of a failed call.
fn is_status_line(line: &str) -> bool {
    line.strip_prefix("Exit code ").is_some_and(|code| code == "unknown" || code.parse::<i64>().is_ok())
        || line.starts_with("Timed out after ")
        || line == "Interrupted"
}

fn generic(output: &ToolOutput) -> Value {
    json!({"output": output.output, "title": output.title, "metadata": output.metadata})
}

/// `{type: "text", file: {filePath, content, numLines, startLine, totalLines}}` for the lines the call read.
fn read_response(path: &str, content: &str, input: &Value) -> Value {
    let lines: Vec<&str> = content.split('\n').collect();
    let start = input.get("offset").and_then(Value::as_u64).map_or(1, |o| o.max(1) as usize);
    let limit = input.get("limit").and_then(Value::as_u64).map_or(lines.len(), |l| l as usize);
    let shown: Vec<&str> = lines.iter().skip(start - 1).take(limit).copied().collect();
    json!({
        "type": "text",
        "file": {
            "filePath": path,
            "content": shown.join("\n"),
            "numLines": shown.len(),
            "startLine": start,
            "totalLines": lines.len(),
        }
    })
}

/// The command's own output: codeloop's notes to the model (the failure's first line, `<shell_metadata>`,
/// `<sandbox>`) and the placeholder of an empty output left out, the last newline trimmed (as Claude
/// Code's `stdout`).
fn command_output(text: &str, metadata: &Value) -> String {
    let failed =
        !matches!(metadata.get("exit").and_then(Value::as_i64), Some(0)) && metadata.get("exit").is_some();
    let text = match text.split_once('\n') {
        Some((first, rest)) if failed && is_status_line(first) => rest,
        _ => text,
    };
    let cut = ["\n\n<shell_metadata>", "\n\n<sandbox>", "\n\n<hook>"]
        .iter()
        .filter_map(|marker| text.find(marker))
        .min()
        .unwrap_or(text.len());
    let own = &text[..cut];
    if own == "(no output)" { String::new() } else { own.trim_end_matches('\n').to_owned() }
}

/// The change as Claude Code's `structuredPatch`: hunks with three lines of context, each
/// `{oldStart, oldLines, newStart, newLines, lines: [" ctx", "-old", "+new"]}`.
fn structured_patch(before: &str, after: &str) -> Vec<Value> {
    let diff = similar::TextDiff::from_lines(before, after);
    diff.grouped_ops(3)
        .iter()
        .map(|group| {
            let (first, last) = (&group[0], &group[group.len() - 1]);
            let (old, new) = (
                first.old_range().start..last.old_range().end,
                first.new_range().start..last.new_range().end,
            );
            let lines: Vec<String> = group
                .iter()
                .flat_map(|op| diff.iter_changes(op))
                .map(|change| {
                    let sign = match change.tag() {
                        similar::ChangeTag::Equal => ' ',
                        similar::ChangeTag::Delete => '-',
                        similar::ChangeTag::Insert => '+',
                    };
                    format!("{sign}{}", change.value().trim_end_matches('\n'))
                })
                .collect();
            json!({
                "oldStart": old.start + 1,
                "oldLines": old.len(),
                "newStart": new.start + 1,
                "newLines": new.len(),
                "lines": lines,
            })
        })
        .collect()
}

/// The call's path made absolute against the session directory, as Claude Code gives it.
fn absolute(input: &Value, cwd: &Path) -> String {
    let raw =
        input.get("filePath").or_else(|| input.get("file_path")).and_then(Value::as_str).unwrap_or_default();
    let path = Path::new(raw);
    if path.is_absolute() { raw.to_owned() } else { cwd.join(path).display().to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_arguments_read_as_claude_code_names_them_and_come_back_as_codeloops() {
        let input = json!({"filePath": "a.txt", "oldString": "two", "newString": "three"});
        let claude = tool_input("edit", &input, Path::new("/p"));
        assert_eq!(
            claude,
            json!({"file_path": "/p/a.txt", "old_string": "two", "new_string": "three", "replace_all": false})
        );
        let back = codeloop_input(
            "edit",
            json!({"file_path": "/p/b.txt", "old_string": "x", "new_string": "y", "replace_all": true}),
        );
        assert_eq!(
            back,
            json!({"filePath": "/p/b.txt", "oldString": "x", "newString": "y", "replaceAll": true})
        );
    }

    #[test]
    fn patches_are_hunks_with_context_as_claude_code_writes_them() {
        assert_eq!(
            structured_patch("one\ntwo\n", "one\nthree\n"),
            vec![
                json!({"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 2, "lines": [" one", "-two", "+three"]})
            ]
        );
        assert_eq!(
            structured_patch("one\nthree\n", "replaced\n"),
            vec![
                json!({"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 1, "lines": ["-one", "-three", "+replaced"]})
            ]
        );
    }

    #[test]
    fn a_commands_own_output_is_its_stdout() {
        let ok = json!({"exit": 0});
        assert_eq!(command_output("hello\nerr\n", &ok), "hello\nerr");
        assert_eq!(command_output("(no output)", &ok), "");
        assert_eq!(command_output("x\n\n<shell_metadata>\nUser aborted\n</shell_metadata>", &ok), "x");
        assert_eq!(command_output("Exit code 3\noops\n", &json!({"exit": 3})), "oops");
        assert_eq!(command_output("Exit code 3\nis printed", &ok), "Exit code 3\nis printed");
    }
}
