//! grep, glob, todowrite and skill: ignore files, hidden files, the 100-result cap, include filters.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::Env;

fn project_with_ignored_files(env: &Env) {
    env.write(".gitignore", "ignored/\n*.log\n");
    env.write("src/main.rs", "fn main() { needle(); }\n");
    env.write("src/lib.rs", "// needle here\npub fn x() {}\n");
    env.write("ignored/skip.rs", "needle\n");
    env.write("debug.log", "needle\n");
    env.write(".hidden/conf.rs", "needle\n");
    env.write(".git/config", "needle\n");
}

#[tokio::test]
async fn grep_respects_gitignore_searches_hidden_files_and_skips_dot_git() {
    let env = Env::new();
    project_with_ignored_files(&env);
    let out = env.ok("grep", json!({"pattern": "needle"})).await;
    let root = env.root().display();
    assert_eq!(
        out.output,
        format!(
            "Found 3 matches\n{root}/.hidden/conf.rs:\n  Line 1: needle\n\n{root}/src/lib.rs:\n  Line 1: // needle here\n\n\
             {root}/src/main.rs:\n  Line 1: fn main() {{ needle(); }}"
        )
    );
    assert_eq!(out.metadata["matches"], json!(3));
    let asks = env.asks_for("grep");
    assert_eq!(asks[0].patterns, vec!["needle"]);
}

#[tokio::test]
async fn grep_filters_with_include_and_reports_no_files() {
    let env = Env::new();
    project_with_ignored_files(&env);
    let out = env.ok("grep", json!({"pattern": "needle", "include": "main.*", "path": "src"})).await;
    assert!(out.output.starts_with("Found 1 matches\n"), "{}", out.output);
    let none = env.ok("grep", json!({"pattern": "haystack"})).await;
    assert_eq!(none.output, "No files found");
    let bad = env.fail("grep", json!({"pattern": "("})).await;
    assert!(bad.starts_with("Invalid regex pattern"), "{bad}");
    // An optional argument sent empty is left out, not a path or filter that matches nothing.
    let empty = env.ok("grep", json!({"pattern": "needle", "include": "", "path": ""})).await;
    assert!(empty.output.starts_with("Found "), "{}", empty.output);
    let globbed = env.ok("glob", json!({"pattern": "**/*.rs", "path": " "})).await;
    assert!(!globbed.output.starts_with("No files found"), "{}", globbed.output);
}

#[tokio::test]
async fn grep_caps_at_100_matches() {
    let env = Env::new();
    env.write("many.txt", "hit\n".repeat(150));
    let out = env.ok("grep", json!({"pattern": "hit"})).await;
    assert!(out.output.starts_with("Found 150 matches (showing first 100)\n"));
    assert_eq!(out.output.matches("  Line ").count(), 100);
    assert!(out.output.contains("(Results truncated: showing 100 of 150 matches (50 hidden)."));
    assert_eq!(out.metadata["truncated"], json!(true));
}

#[tokio::test]
async fn glob_respects_gitignore_and_skips_hidden_files() {
    let env = Env::new();
    project_with_ignored_files(&env);
    let out = env.ok("glob", json!({"pattern": "**/*.rs"})).await;
    let root = env.root().display();
    assert_eq!(out.output, format!("{root}/src/lib.rs\n{root}/src/main.rs"));
    let asks = env.asks_for("glob");
    assert_eq!(asks[0].patterns, vec!["**/*.rs"]);
    let none = env.ok("glob", json!({"pattern": "*.py"})).await;
    assert_eq!(none.output, "No files found");
}

#[tokio::test]
async fn glob_caps_at_100_files() {
    let env = Env::new();
    for i in 0..120 {
        env.write(&format!("f/{i:03}.txt"), "");
    }
    let out = env.ok("glob", json!({"pattern": "*.txt", "path": "f"})).await;
    assert_eq!(out.output.lines().filter(|l| l.ends_with(".txt")).count(), 100);
    assert!(out.output.ends_with(
        "(Results are truncated: showing first 100 results. Consider using a more specific path or pattern.)"
    ));
    assert_eq!(out.metadata["truncated"], json!(true));
}

#[tokio::test]
async fn todowrite_replaces_the_list_through_the_host() {
    let env = Env::new();
    let out = env
        .ok(
            "todowrite",
            json!({"todos": [
                {"content": "Write tests", "status": "in_progress", "priority": "high"},
                {"content": "Ship", "status": "pending", "priority": "low"},
                {"content": "Plan", "status": "completed", "priority": "medium"}
            ]}),
        )
        .await;
    assert_eq!(out.title, "2 todos");
    assert_eq!(env.host.todos.lock().unwrap().len(), 3);
    let listed: serde_json::Value = serde_json::from_str(&out.output).unwrap();
    assert_eq!(listed[0]["status"], json!("in_progress"));
}

#[tokio::test]
async fn skill_loads_skill_md_with_its_base_dir() {
    let env = Env::new();
    env.write(
        ".codeloop/skills/release/SKILL.md",
        "---\nname: release\ndescription: x\n---\n\nRun the release.\n",
    );
    env.write(".codeloop/skills/release/scripts/go.sh", "echo go\n");
    let out = env.ok("skill", json!({"name": "release"})).await;
    let base = env.path(".codeloop/skills/release");
    assert!(
        out.output.starts_with("<skill_content name=\"release\">\n# Skill: release\n\nRun the release.\n"),
        "{}",
        out.output
    );
    assert!(out.output.contains(&format!("Base directory for this skill: {}", base.display())));
    assert!(out.output.contains(&format!("<file>{}</file>", base.join("scripts/go.sh").display())));
    assert_eq!(env.asks_for("skill")[0].patterns, vec!["release"]);
    let missing = env.fail("skill", json!({"name": "nope"})).await;
    assert_eq!(missing, "Skill \"nope\" not found. Available skills: release");
}
