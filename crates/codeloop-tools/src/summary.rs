//! How a call reads in one line, for every client that shows tool activity (the CLI's activity lines,
//! the terminal UI's cards, ACP titles): the tools know their own argument names, so this lives here.

use serde_json::Value;

use crate::text::ellipsize;

/// The command, path, pattern or URL a call works on; for calls without a known field (MCP tools…),
/// `key=value` pairs with strings unquoted. One line, at most 100 characters.
pub fn call_summary(tool: &str, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str).map(str::to_owned);
    let text = match tool {
        "bash" => field("command"),
        "read" | "write" | "edit" => field("filePath"),
        "grep" | "glob" => field("pattern"),
        "skill" => field("name"),
        "todowrite" => Some("todo list".into()),
        "webfetch" => field("url"),
        "task" => field("description").map(|d| match field("subagent_type") {
            Some(agent) => format!("{agent}: {d}"),
            None => d,
        }),
        "apply_patch" => {
            field("patchText").or_else(|| field("patch_text")).map(|patch| patch_files(&patch).join(", "))
        }
        _ => None,
    }
    .unwrap_or_else(|| key_values(input));
    ellipsize(text.lines().next().unwrap_or(""), 100)
}

/// The files a patch touches, from its `*** Add/Update/Delete File:` lines.
pub fn patch_files(patch: &str) -> Vec<&str> {
    patch
        .lines()
        .filter_map(|line| {
            ["*** Add File: ", "*** Update File: ", "*** Delete File: "]
                .iter()
                .find_map(|prefix| line.strip_prefix(prefix))
        })
        .map(str::trim)
        .collect()
}

/// `key=value` pairs, strings unquoted, instead of raw JSON.
fn key_values(input: &Value) -> String {
    let Some(map) = input.as_object() else { return input.to_string() };
    let pairs: Vec<String> = map
        .iter()
        .map(|(key, value)| match value {
            Value::String(text) => format!("{key}={}", text.lines().next().unwrap_or("")),
            other => format!("{key}={other}"),
        })
        .collect();
    pairs.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_read_as_their_subject() {
        assert_eq!(call_summary("bash", &json!({"command": "cargo test\nmore"})), "cargo test");
        assert_eq!(
            call_summary("task", &json!({"description": "find x", "subagent_type": "explore"})),
            "explore: find x"
        );
        let patch = "*** Begin Patch\n*** Update File: a.rs\n@@\n*** Add File: b.rs\n+x\n*** End Patch";
        assert_eq!(call_summary("apply_patch", &json!({"patchText": patch})), "a.rs, b.rs");
        assert_eq!(call_summary("fs_read", &json!({"path": "x\nmore"})), "path=x");
        assert_eq!(call_summary("fs_stat", &json!({"n": 2})), "n=2");
        assert_eq!(call_summary("fs_list", &json!({})), "");
    }
}
