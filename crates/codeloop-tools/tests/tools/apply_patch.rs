//! apply_patch: add, update, delete, move; one ask for all files; nothing written when any hunk fails.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::Env;

#[tokio::test]
async fn apply_patch_adds_updates_deletes_and_moves() {
    let env = Env::new();
    env.write("src/lib.rs", "fn one() {}\nfn two() {}\nfn three() {}\n");
    env.write("old.txt", "bye\n");
    env.write("src/name.rs", "const NAME: &str = \"a\";\n");
    let patch = "*** Begin Patch
*** Add File: docs/new.md
+# New
+text
*** Update File: src/lib.rs
@@ fn one() {}
-fn two() {}
+fn two() { println!(\"2\"); }
 fn three() {}
*** Delete File: old.txt
*** Update File: src/name.rs
*** Move to: src/renamed.rs
@@
-const NAME: &str = \"a\";
+const NAME: &str = \"b\";
*** End Patch";
    let out = env.ok("apply_patch", json!({"patchText": patch})).await;
    assert_eq!(
        out.output,
        "Success. Updated the following files:\nA docs/new.md\nM src/lib.rs\nD old.txt\nM src/renamed.rs"
    );
    assert_eq!(env.read("docs/new.md"), "# New\ntext\n");
    assert_eq!(env.read("src/lib.rs"), "fn one() {}\nfn two() { println!(\"2\"); }\nfn three() {}\n");
    assert!(!env.path("old.txt").exists());
    assert!(!env.path("src/name.rs").exists());
    assert_eq!(env.read("src/renamed.rs"), "const NAME: &str = \"b\";\n");

    let asks = env.asks_for("edit");
    assert_eq!(asks.len(), 1);
    assert_eq!(
        asks[0].patterns,
        vec!["docs/new.md", "old.txt", "src/lib.rs", "src/name.rs", "src/renamed.rs"]
    );
    assert_eq!(asks[0].always, vec!["*"]);
}

#[tokio::test]
async fn apply_patch_writes_nothing_when_one_hunk_fails() {
    let env = Env::new();
    env.write("a.txt", "alpha\n");
    env.write("b.txt", "beta\n");
    let patch = "*** Begin Patch
*** Update File: a.txt
-alpha
+ALPHA
*** Add File: c.txt
+new
*** Update File: b.txt
-not in the file
+x
*** End Patch";
    let message = env.fail("apply_patch", json!({"patchText": patch})).await;
    assert!(
        message.starts_with("apply_patch verification failed: Failed to find expected lines in b.txt"),
        "{message}"
    );
    assert_eq!(env.read("a.txt"), "alpha\n");
    assert_eq!(env.read("b.txt"), "beta\n");
    assert!(!env.path("c.txt").exists());
    assert!(env.asks().is_empty());
}

#[tokio::test]
async fn apply_patch_rejects_a_malformed_envelope() {
    let env = Env::new();
    let message = env.fail("apply_patch", json!({"patchText": "*** Update File: a.txt\n-x\n+y"})).await;
    assert!(message.contains("*** Begin Patch"), "{message}");
    let empty = env.fail("apply_patch", json!({"patchText": "*** Begin Patch\n*** End Patch"})).await;
    assert!(empty.starts_with("patch rejected: empty patch. "), "{empty}");
}

#[tokio::test]
async fn denied_apply_patch_changes_nothing() {
    let env = Env::new();
    env.write("a.txt", "alpha\n");
    env.deny("edit");
    let patch = "*** Begin Patch\n*** Update File: a.txt\n-alpha\n+beta\n*** End Patch";
    assert!(env.run("apply_patch", json!({"patchText": patch})).await.is_err());
    assert_eq!(env.read("a.txt"), "alpha\n");
}

#[tokio::test]
async fn apply_patch_refuses_to_update_a_file_that_is_not_utf8_and_changes_nothing() {
    let env = Env::new();
    // "café = 1\nnaïve = 2\n" in Latin-1.
    let latin1: &[u8] = b"caf\xe9 = 1\nna\xefve = 2\n";
    let path = env.write("legacy.txt", latin1);
    env.write("other.txt", "keep\n");
    let patch = "*** Begin Patch
*** Update File: other.txt
@@
-keep
+changed
*** Update File: legacy.txt
@@
-na\u{fffd}ve = 2
+na\u{fffd}ve = 3
*** End Patch";
    let message = env.fail("apply_patch", json!({"patchText": patch})).await;
    assert!(
        message.starts_with(&format!("{} is not UTF-8 text (byte 0xE9 at offset 3", path.display())),
        "{message}"
    );
    assert!(message.contains("edit it with bash"), "{message}");
    assert_eq!(std::fs::read(&path).unwrap(), latin1);
    assert_eq!(env.read("other.txt"), "keep\n");

    // Deleting it reads it only for the diff: allowed.
    let patch = "*** Begin Patch\n*** Delete File: legacy.txt\n*** End Patch";
    env.ok("apply_patch", json!({"patchText": patch})).await;
    assert!(!path.exists());
}

#[tokio::test]
async fn the_example_in_the_description_is_a_patch_that_applies() {
    let env = Env::new();
    env.write(
        "src/greet.py",
        "def greet(name):\n    greeting = \"Hello\"\n    print(greeting + name)\n    return greeting\n",
    );
    env.write("old_notes.txt", "old\n");
    let tool = env.registry.get("apply_patch").unwrap();
    let description = codeloop_tools::Tool::description(tool.as_ref());
    let start = description.find("*** Begin Patch").unwrap();
    let end = description.find("*** End Patch").unwrap() + "*** End Patch".len();
    env.ok("apply_patch", json!({"patchText": &description[start..end]})).await;
    assert_eq!(env.read("docs/hello.md"), "# Hello\nA new file: every line starts with +.\n");
    assert_eq!(
        env.read("src/greet.py"),
        "def greet(name):\n    greeting = \"Hello\"\n    print(greeting + \", \" + name)\n    return greeting\n"
    );
    assert!(!env.path("old_notes.txt").exists());
}

#[tokio::test]
async fn no_tool_description_shows_a_format_line_with_an_inline_remark() {
    for spec in Env::new().registry.specs() {
        assert!(!spec.description.contains("(optional)"), "{}: {}", spec.name, spec.description);
    }
}

#[tokio::test]
async fn a_remark_after_a_marker_line_is_ignored() {
    let env = Env::new();
    env.write("a.txt", "one\ntwo\n");
    // What a small model wrote after seeing "*** End of File (optional)" in a format description.
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+2\n*** End of File (optional)\n*** End Patch (end)";
    env.ok("apply_patch", json!({"patchText": patch})).await;
    assert_eq!(env.read("a.txt"), "one\n2\n");
}
