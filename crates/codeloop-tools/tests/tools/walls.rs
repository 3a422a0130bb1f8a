//! The walls of the file tools (DESIGN.md §5a): real paths before every check, protected paths, atomic
//! writes that never go through a hard link, the session's own temp dir.

use codeloop_tools::{Grant, ToolFailure};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::Env;

/// A project with `inside/` links to a directory and a file outside it; external_directory is denied.
fn escaping_env() -> (Env, tempfile::TempDir) {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "outside secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), env.path("linkdir")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), env.path("link.txt")).unwrap();
    env.deny("external_directory");
    (env, outside)
}

fn is_denied(result: Result<codeloop_tools::ToolOutput, ToolFailure>) -> bool {
    matches!(result, Err(ToolFailure::Permission(_)))
}

#[tokio::test]
async fn a_symlink_out_of_the_project_is_outside_for_every_file_tool() {
    let (env, outside) = escaping_env();
    let secret = outside.path().join("secret.txt");
    assert!(is_denied(env.run("read", json!({"filePath": "link.txt"})).await));
    assert!(is_denied(env.run("read", json!({"filePath": "linkdir/secret.txt"})).await));
    assert!(is_denied(env.run("read", json!({"filePath": "linkdir"})).await));
    assert!(is_denied(env.run("write", json!({"filePath": "linkdir/new.txt", "content": "x"})).await));
    assert!(is_denied(env.run("write", json!({"filePath": "link.txt", "content": "x"})).await));
    let edit = json!({"filePath": "link.txt", "oldString": "outside", "newString": "pwned"});
    assert!(is_denied(env.run("edit", edit).await));
    let patch =
        "*** Begin Patch\n*** Update File: linkdir/secret.txt\n@@\n-outside secret\n+pwned\n*** End Patch";
    assert!(is_denied(env.run("apply_patch", json!({"patchText": patch})).await));
    assert!(is_denied(env.run("grep", json!({"pattern": "secret", "path": "linkdir"})).await));
    assert!(is_denied(env.run("glob", json!({"pattern": "*", "path": "linkdir"})).await));
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "outside secret\n");
    assert!(!outside.path().join("new.txt").exists());
    // Every ask named the real place, outside.
    let outside_real = outside.path().canonicalize().unwrap();
    for ask in env.asks_for("external_directory") {
        assert!(ask.patterns[0].starts_with(&*outside_real.to_string_lossy()), "{:?}", ask.patterns);
    }
}

#[tokio::test]
async fn walking_tools_do_not_follow_links_out_of_the_project() {
    let (env, _outside) = escaping_env();
    env.write("src/lib.rs", "secret in the project\n");
    let grep = env.ok("grep", json!({"pattern": "secret"})).await;
    assert!(grep.output.contains("lib.rs"), "{}", grep.output);
    assert!(!grep.output.contains("outside secret"), "{}", grep.output);
    let glob = env.ok("glob", json!({"pattern": "**/*.txt"})).await;
    assert!(!glob.output.contains("secret.txt"), "{}", glob.output);
}

#[tokio::test]
async fn a_link_to_an_env_file_is_read_as_the_env_file() {
    let env = Env::new();
    env.write(".env", "TOKEN=1\n");
    std::os::unix::fs::symlink(env.path(".env"), env.path("notes.txt")).unwrap();
    env.ok("read", json!({"filePath": "notes.txt"})).await;
    let asks = env.asks_for("read");
    assert_eq!(asks[0].patterns, vec![".env".to_string()]);
}

#[tokio::test]
async fn a_write_through_a_hard_link_leaves_the_outside_file_alone() {
    let env = Env::new();
    // A sibling of the project: the same file system, so the hard link can be made.
    let outside = tempfile::tempdir_in(env.root().parent().unwrap()).unwrap();
    let target = outside.path().join("victim.txt");
    std::fs::write(&target, "original\n").unwrap();
    std::fs::hard_link(&target, env.path("linked.txt")).unwrap();
    env.ok("write", json!({"filePath": "linked.txt", "content": "changed\n"})).await;
    assert_eq!(env.read("linked.txt"), "changed\n");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original\n");
    env.ok("edit", json!({"filePath": "linked.txt", "oldString": "changed", "newString": "edited"})).await;
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original\n");
}

#[tokio::test]
async fn writes_keep_the_file_mode() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let script = env.write("run.sh", "echo hi\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    env.ok("edit", json!({"filePath": "run.sh", "oldString": "hi", "newString": "ho"})).await;
    assert_eq!(std::fs::metadata(&script).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(env.read("run.sh"), "echo ho\n");
    let leftovers: Vec<_> = std::fs::read_dir(env.root())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".codeloop-write"))
        .collect();
    assert!(leftovers.is_empty());
}

#[tokio::test]
async fn protected_paths_are_only_granted_explicitly() {
    let env = Env::new();
    env.write("codeloop.toml", "model = \"a/b\"\n");
    env.write(".git/config", "[core]\n");
    env.ok("write", json!({"filePath": "codeloop.toml", "content": "x"})).await;
    env.ok("write", json!({"filePath": ".codeloop/config.toml", "content": "x"})).await;
    env.ok("edit", json!({"filePath": ".git/config", "oldString": "[core]", "newString": "[x]"})).await;
    env.ok("write", json!({"filePath": "src/main.rs", "content": "fn main() {}"})).await;
    let patch = "*** Begin Patch\n*** Add File: sub/codeloop.toml\n+x\n*** End Patch";
    env.ok("apply_patch", json!({"patchText": patch})).await;
    let grants: Vec<(String, Grant)> =
        env.asks_for("edit").into_iter().map(|a| (a.patterns.join(","), a.grant)).collect();
    assert_eq!(
        grants,
        vec![
            ("codeloop.toml".to_string(), Grant::Explicit),
            (".codeloop/config.toml".to_string(), Grant::Explicit),
            (".git/config".to_string(), Grant::Explicit),
            ("src/main.rs".to_string(), Grant::Rules),
            ("sub/codeloop.toml".to_string(), Grant::Explicit),
        ]
    );
}

#[tokio::test]
async fn the_session_temp_dir_is_part_of_the_project_but_the_system_temp_dir_is_not() {
    let mut env = Env::new();
    let temp = tempfile::tempdir().unwrap();
    env.temp_dir = Some(temp.path().to_path_buf());
    let inside = temp.path().join("scratch.txt");
    env.ok("write", json!({"filePath": inside.to_string_lossy(), "content": "x"})).await;
    assert!(env.asks_for("external_directory").is_empty());
    let elsewhere = tempfile::tempdir().unwrap();
    env.deny("external_directory");
    let other = elsewhere.path().join("x.txt");
    assert!(is_denied(env.run("write", json!({"filePath": other.to_string_lossy(), "content": "x"})).await));
    let out = env.ok("bash", json!({"command": "echo $TMPDIR"})).await;
    assert_eq!(out.output.trim(), temp.path().to_string_lossy());
}

#[tokio::test]
async fn a_directory_search_leaves_secrets_out_and_naming_one_asks_read() {
    let env = Env::new();
    env.write(".env", "API_TOKEN=hunter2\n");
    env.write("deploy/server.key", "hunter2 key\n");
    env.write("src/app.rs", "// hunter2 is the example password\n");
    env.write(".env.example", "API_TOKEN=hunter2-example\n");
    let out = env.ok("grep", json!({"pattern": "hunter2"})).await;
    assert!(out.output.contains("app.rs") && out.output.contains(".env.example"), "{}", out.output);
    assert!(
        !out.output.contains("API_TOKEN=hunter2\n") && !out.output.contains("hunter2 key"),
        "{}",
        out.output
    );
    assert!(out.output.contains("Not searched") && out.output.contains("server.key"), "{}", out.output);
    assert!(env.asks_for("read").is_empty());

    env.deny("read");
    assert!(is_denied(env.run("grep", json!({"pattern": "hunter2", "path": ".env"})).await));
    assert_eq!(env.asks_for("read")[0].patterns, vec![".env".to_string()]);
}

#[tokio::test]
async fn new_files_follow_the_umask_not_a_private_temp_mode() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.ok("write", json!({"filePath": "fresh.txt", "content": "x"})).await;
    let mode = std::fs::metadata(env.path("fresh.txt")).unwrap().permissions().mode() & 0o777;
    // 0666 less whatever umask the test runs under: readable by the owner's group at least when the
    // umask allows it, and never the 0600 of a temp file unless the umask says so.
    let umask = 0o666 & !mode;
    assert_eq!(mode, 0o666 & !umask);
    assert_ne!(mode & 0o044, 0, "group/other read bits kept under the usual 022 umask: {mode:o}");
}

#[tokio::test]
async fn a_repository_skill_that_links_outside_is_neither_listed_nor_loaded() {
    let env = Env::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("id_rsa"), "PRIVATE KEY").unwrap();
    std::fs::create_dir_all(env.path(".codeloop/skills/leak")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("id_rsa"), env.path(".codeloop/skills/leak/SKILL.md"))
        .unwrap();
    env.write(".codeloop/skills/fine/SKILL.md", "---\ndescription: ok\n---\nDo it.\n");
    let skills = codeloop_tools::list_skills(&[".codeloop/skills".into()], env.root());
    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, vec!["fine"]);
    let missing = env.fail("skill", json!({"name": "leak"})).await;
    assert!(missing.contains("not found") && !missing.contains("PRIVATE"), "{missing}");
    assert!(env.ok("skill", json!({"name": "fine"})).await.output.contains("Do it."));
}
