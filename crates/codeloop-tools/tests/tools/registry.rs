//! The registry: specs, unknown tools, case repair, invalid arguments, output truncation and sweeping.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use codeloop_tools::{OutputLimits, Tool, ToolContext, ToolFailure, ToolOutput, sweep_tool_output};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::Env;

/// Prints `lines` numbered lines.
struct Lines {
    schema: Value,
}

#[async_trait]
impl Tool for Lines {
    fn name(&self) -> &str {
        "lines"
    }
    fn description(&self) -> &str {
        "test"
    }
    fn parameters(&self) -> &Value {
        &self.schema
    }
    async fn execute(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let n = args["lines"].as_u64().unwrap_or(0);
        let output = (1..=n).map(|i| format!("row {i}")).collect::<Vec<_>>().join("\n");
        Ok(ToolOutput { title: String::new(), output, metadata: Value::Null, attachments: Vec::new() })
    }
}

#[tokio::test]
async fn specs_are_sorted_exclude_invalid_and_stay_small() {
    let env = Env::new();
    let specs = env.registry.specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "apply_patch",
            "bash",
            "bash_kill",
            "bash_output",
            "edit",
            "glob",
            "grep",
            "question",
            "read",
            "skill",
            "todowrite",
            "webfetch",
            "write"
        ]
    );
    let total: usize = specs
        .iter()
        .map(|s| {
            json!({"name": s.name, "description": s.description, "parameters": s.parameters})
                .to_string()
                .len()
        })
        .sum();
    println!("total schema size: {total} bytes");
    assert!(total <= 14_000, "tool specs take {total} bytes");
    let read = specs.iter().find(|s| s.name == "read").unwrap();
    assert_eq!(read.parameters["required"], json!(["filePath"]));
    assert!(read.parameters.get("$schema").is_none());
}

#[tokio::test]
async fn unknown_tools_fail_with_the_available_list() {
    let env = Env::new();
    let err = env.run("frobnicate", json!({})).await.unwrap_err();
    let ToolFailure::Failed(message) = err else { panic!("expected Failed, got {err:?}") };
    assert!(
        message.starts_with(
            "Unknown tool \"frobnicate\". Available tools: apply_patch, bash, bash_kill, bash_output, edit,"
        ),
        "{message}"
    );
    assert!(!message.contains("invalid"));
}

#[tokio::test]
async fn tool_names_differing_only_by_case_are_repaired() {
    let env = Env::new();
    let out = env.ok("Bash", json!({"command": "echo hi"})).await;
    assert_eq!(out.output, "hi\n");
}

#[tokio::test]
async fn invalid_arguments_are_reported_as_such() {
    let env = Env::new();
    let err = env.run("read", json!({"path": "x"})).await.unwrap_err();
    assert!(
        matches!(&err, ToolFailure::InvalidArguments { tool, detail } if tool == "read" && detail.contains("filePath")),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("The read tool was called with invalid arguments: missing field `filePath`")
    );
}

#[tokio::test]
async fn the_invalid_tool_explains_the_error() {
    let env = Env::new();
    let out = env.ok("invalid", json!({"tool": "read", "error": "bad json"})).await;
    assert_eq!(out.output, "The arguments provided to the tool are invalid: bad json");
}

#[tokio::test]
async fn long_outputs_are_cut_and_spilled_to_a_file() {
    let mut env = Env::new();
    env.registry.register(Arc::new(Lines { schema: json!({"type": "object"}) }));
    env.limits = OutputLimits { max_lines: 10, max_bytes: 1_000, ..OutputLimits::default() };
    let out = env.ok("lines", json!({"lines": 25})).await;
    assert_eq!(out.metadata["truncated"], json!(true));
    let path = out.metadata["outputPath"].as_str().unwrap().to_string();
    assert!(path.starts_with(&env.output_dir.path().join("tool_").display().to_string()), "{path}");
    let expected_head = (1..=10).map(|i| format!("row {i}")).collect::<Vec<_>>().join("\n");
    assert_eq!(
        out.output,
        format!(
            "{expected_head}\n\n...15 lines truncated...\n\nThe tool call succeeded but the output was truncated. Full output saved to: {path}\n\
             Use Grep to search the full content or Read with offset/limit to view specific sections."
        )
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 25);

    let short = env.ok("lines", json!({"lines": 3})).await;
    assert_eq!(short.output, "row 1\nrow 2\nrow 3");
    assert_eq!(short.metadata, json!({"truncated": false}));
}

#[tokio::test]
async fn sweep_removes_only_old_spill_files() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("tool_old");
    let fresh = dir.path().join("tool_fresh");
    let other = dir.path().join("notes.txt");
    for path in [&old, &fresh, &other] {
        std::fs::write(path, "x").unwrap();
    }
    let eight_days_ago = SystemTime::now() - Duration::from_secs(8 * 24 * 3600);
    for path in [&old, &other] {
        std::fs::File::options().write(true).open(path).unwrap().set_modified(eight_days_ago).unwrap();
    }
    assert_eq!(sweep_tool_output(dir.path(), codeloop_tools::TOOL_OUTPUT_RETENTION).unwrap(), 1);
    assert!(!old.exists());
    assert!(fresh.exists() && other.exists());
    assert_eq!(sweep_tool_output(&dir.path().join("missing"), Duration::ZERO).unwrap(), 0);
}

#[test]
#[ignore = "prints the specs for inspection"]
fn print_specs() {
    for spec in codeloop_tools::ToolRegistry::builtin().specs() {
        println!(
            "{}",
            json!({"name": spec.name, "description": spec.description, "parameters": spec.parameters})
        );
    }
}

#[test]
fn tools_declare_their_permission_and_deadline() {
    let env = Env::new();
    let permission = |name: &str| env.registry.get(name).map(|t| t.permission().to_owned());
    assert_eq!(permission("write").as_deref(), Some("edit"));
    assert_eq!(permission("apply_patch").as_deref(), Some("edit"));
    assert_eq!(permission("edit").as_deref(), Some("edit"));
    assert_eq!(permission("bash").as_deref(), Some("bash"));

    let deadline = |name: &str, args: Value| env.registry.get(name).and_then(|t| t.deadline(&args));
    assert_eq!(deadline("read", json!({})), None);
    // bash: its own timeout (never below the 120 s default) plus a minute of grace.
    assert_eq!(deadline("bash", json!({})), Some(Duration::from_secs(180)));
    assert_eq!(deadline("bash", json!({"timeout": 1_000})), Some(Duration::from_secs(180)));
    assert_eq!(deadline("bash", json!({"timeout": 600_000})), Some(Duration::from_secs(660)));
}
