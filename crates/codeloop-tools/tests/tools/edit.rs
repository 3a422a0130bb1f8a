//! edit: exact and fuzzy replacement, uniqueness, line endings, BOM, file creation, permission.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::Env;

async fn edit(
    env: &Env,
    file: &str,
    old: &str,
    new: &str,
) -> Result<codeloop_tools::ToolOutput, codeloop_tools::ToolFailure> {
    env.run("edit", json!({"filePath": file, "oldString": old, "newString": new})).await
}

#[tokio::test]
async fn edit_replaces_an_exact_match_and_reports_the_diff() {
    let env = Env::new();
    env.write("a.rs", "fn a() {}\nfn b() {}\n");
    let out = edit(&env, "a.rs", "fn b() {}", "fn c() {}").await.unwrap();
    assert_eq!(out.output, "Edit applied successfully.");
    assert_eq!(env.read("a.rs"), "fn a() {}\nfn c() {}\n");
    assert_eq!(out.metadata["filediff"]["additions"], json!(1));
    assert_eq!(out.metadata["filediff"]["deletions"], json!(1));
    assert!(out.metadata["diff"].as_str().unwrap().contains("-fn b() {}\n+fn c() {}"));
    let asks = env.asks_for("edit");
    assert_eq!(asks[0].patterns, vec!["a.rs"]);
    assert_eq!(asks[0].always, vec!["*"]);
    assert_eq!(asks[0].metadata["diff"], out.metadata["diff"]);
}

#[tokio::test]
async fn edit_falls_back_to_fuzzy_strategies() {
    let env = Env::new();
    // line-trimmed: indentation differs.
    env.write("t.py", "def f():\n    x = 1\n    y = 2\n");
    edit(&env, "t.py", "x = 1\ny = 2", "    z = 3").await.unwrap();
    assert_eq!(env.read("t.py"), "def f():\n    z = 3\n");

    // block-anchor: first/last lines match, middle line slightly off.
    env.write("b.rs", "fn main() {\n    let total = compute(a, b);\n    println!(\"{total}\");\n}\n");
    edit(
        &env,
        "b.rs",
        "fn main() {\n    let total = compute(a,b);\n    println!(\"{total}\");\n}",
        "fn main() {}",
    )
    .await
    .unwrap();
    assert_eq!(env.read("b.rs"), "fn main() {}\n");

    // whitespace-normalised.
    env.write("w.txt", "let   x  =  1;\n");
    edit(&env, "w.txt", "let x = 1;", "let x = 2;").await.unwrap();
    assert_eq!(env.read("w.txt"), "let x = 2;\n");

    // escape-normalised: the model escaped a tab and quotes.
    env.write("e.txt", "say(\"a\tb\")\n");
    edit(&env, "e.txt", "say(\\\"a\\tb\\\")", "said()").await.unwrap();
    assert_eq!(env.read("e.txt"), "said()\n");

    // surrounding blank lines are ignored.
    env.write("tb.txt", "one\ntwo\nthree\n");
    edit(&env, "tb.txt", "\n\ntwo\n\n", "TWO").await.unwrap();
    assert_eq!(env.read("tb.txt"), "one\nTWO\nthree\n");

    // context-aware: anchors and half of the middle lines agree.
    env.write("c.txt", "begin\n  a\n  b\n  c\n  d\nend\n");
    edit(&env, "c.txt", "begin\na\nb\nX\nY\nend", "replaced").await.unwrap();
    assert_eq!(env.read("c.txt"), "replaced\n");
}

#[tokio::test]
async fn edit_requires_a_unique_match_unless_replace_all() {
    let env = Env::new();
    env.write("m.txt", "x = 1\nx = 1\ny = 0\nx = 1\n");
    let message =
        env.fail("edit", json!({"filePath": "m.txt", "oldString": "x = 1", "newString": "x = 2"})).await;
    assert_eq!(
        message,
        "Found 3 matches for oldString, starting at lines 1, 2, 4. Add surrounding lines to oldString so that it \
         matches only the place you mean, or set replaceAll to true to replace every match."
    );
    assert_eq!(env.read("m.txt"), "x = 1\nx = 1\ny = 0\nx = 1\n");
    env.ok(
        "edit",
        json!({"filePath": "m.txt", "oldString": "x = 1", "newString": "x = 2", "replaceAll": true}),
    )
    .await;
    assert_eq!(env.read("m.txt"), "x = 2\nx = 2\ny = 0\nx = 2\n");
}

#[tokio::test]
async fn edit_reports_missing_text_and_identical_strings() {
    let env = Env::new();
    env.write("f.txt", "abc\n");
    let message = env.fail("edit", json!({"filePath": "f.txt", "oldString": "zzz", "newString": "y"})).await;
    assert_eq!(
        message,
        "Could not find oldString in the file. It must match exactly, including whitespace, indentation, and line \
         endings. Read the file again and copy the lines as they are now, without the `N: ` line-number prefixes."
    );
    let same = env.fail("edit", json!({"filePath": "f.txt", "oldString": "abc", "newString": "abc"})).await;
    assert_eq!(same, "No changes to apply: oldString and newString are identical.");
}

#[tokio::test]
async fn edit_keeps_crlf_line_endings_and_the_bom() {
    let env = Env::new();
    env.write("win.txt", "\u{feff}first\r\nsecond\r\nthird\r\n");
    edit(&env, "win.txt", "first\nsecond", "1st\n2nd").await.unwrap();
    assert_eq!(env.read("win.txt"), "\u{feff}1st\r\n2nd\r\nthird\r\n");
}

#[tokio::test]
async fn edit_with_empty_old_string_creates_a_new_file_only() {
    let env = Env::new();
    edit(&env, "new/file.txt", "", "content\n").await.unwrap();
    assert_eq!(env.read("new/file.txt"), "content\n");
    let message =
        env.fail("edit", json!({"filePath": "new/file.txt", "oldString": "", "newString": "again"})).await;
    assert!(message.starts_with("File already exists"), "{message}");
}

#[tokio::test]
async fn denied_edit_leaves_the_file_untouched() {
    let env = Env::new();
    env.write("keep.txt", "original\n");
    env.deny("edit");
    assert!(edit(&env, "keep.txt", "original", "changed").await.is_err());
    assert_eq!(env.read("keep.txt"), "original\n");
}

#[tokio::test]
async fn edit_of_a_missing_file_fails() {
    let env = Env::new();
    let message = env.fail("edit", json!({"filePath": "nope.txt", "oldString": "a", "newString": "b"})).await;
    assert!(
        message.starts_with(&format!("File not found: {}. ", env.path("nope.txt").display())),
        "{message}"
    );
}

/// "café = 1\nnaïve = 2\n" in Latin-1: é and ï are single bytes that are not UTF-8.
const LATIN1: &[u8] = b"caf\xe9 = 1\nna\xefve = 2\n";

#[tokio::test]
async fn edit_refuses_a_file_that_is_not_utf8_and_leaves_every_byte() {
    let env = Env::new();
    let path = env.write("legacy.txt", LATIN1);
    let message = match edit(&env, "legacy.txt", "= 2", "= 3").await {
        Err(codeloop_tools::ToolFailure::Failed(message)) => message,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(
        message,
        format!(
            "{} is not UTF-8 text (byte 0xE9 at offset 3; Latin-1 or another legacy encoding?). This tool would \
             rewrite those bytes, so it leaves the file alone; edit it with bash (e.g. sed), which keeps the \
             bytes it does not change",
            path.display()
        )
    );
    assert_eq!(std::fs::read(&path).unwrap(), LATIN1);
    assert!(env.asks_for("edit").is_empty(), "nothing to ask about");
}
