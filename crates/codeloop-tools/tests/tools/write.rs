//! write: creates files and parents, asks `edit` with a diff, keeps a BOM, and does nothing when denied.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::Env;

#[tokio::test]
async fn write_creates_parents_and_asks_edit_with_a_diff() {
    let env = Env::new();
    let out = env.ok("write", json!({"filePath": "deep/dir/new.txt", "content": "hello\n"})).await;
    assert_eq!(out.output, "Wrote file successfully.");
    assert_eq!(env.read("deep/dir/new.txt"), "hello\n");
    assert_eq!(out.metadata["exists"], json!(false));
    let asks = env.asks_for("edit");
    assert_eq!(asks[0].patterns, vec!["deep/dir/new.txt"]);
    assert_eq!(asks[0].always, vec!["*"]);
    let diff = asks[0].metadata["diff"].as_str().unwrap();
    assert!(diff.contains("+hello"), "{diff}");
}

#[tokio::test]
async fn write_keeps_an_existing_bom() {
    let env = Env::new();
    env.write("bom.txt", "\u{feff}old\n");
    let out = env.ok("write", json!({"filePath": "bom.txt", "content": "new\n"})).await;
    assert_eq!(out.metadata["exists"], json!(true));
    assert_eq!(env.read("bom.txt"), "\u{feff}new\n");
}

#[tokio::test]
async fn denied_write_leaves_the_file_untouched() {
    let env = Env::new();
    env.write("keep.txt", "original");
    env.deny("edit");
    assert!(env.run("write", json!({"filePath": "keep.txt", "content": "changed"})).await.is_err());
    assert_eq!(env.read("keep.txt"), "original");
}
