//! The `codeloop-fake-provider` binary: prints its base URL first, then serves the script file.

use std::process::Stdio;

use pretty_assertions::assert_eq;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::support::{chat_text, post, post_sse, request_body};

const BIN: &str = env!("CARGO_BIN_EXE_codeloop-fake-provider");

#[tokio::test]
async fn binary_prints_the_base_url_then_serves_the_script() {
    let path = std::env::temp_dir().join(format!("codeloop-fake-provider-{}.json", std::process::id()));
    std::fs::write(&path, r#"{"turns": [{"reply": {"text": "from a file"}}]}"#).unwrap();
    let mut child = Command::new(BIN)
        .arg("--script")
        .arg(&path)
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).await.unwrap();
    let base_url = first.trim_end();
    assert!(base_url.starts_with("http://127.0.0.1:") && base_url.ends_with("/v1"), "{base_url:?}");

    let (_, events) = post_sse(&format!("{base_url}/chat/completions")).await;
    assert_eq!(chat_text(&events), "from a file");
    let exhausted = post(&format!("{base_url}/chat/completions"), &request_body(true)).await;
    assert_eq!(exhausted.status(), 400);

    child.kill().await.unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[tokio::test]
async fn binary_help_and_bad_arguments() {
    let help = Command::new(BIN).arg("--help").output().await.unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8(help.stdout).unwrap().contains("--script FILE"));

    let missing = Command::new(BIN).output().await.unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8(missing.stderr).unwrap().contains("missing --script"));

    let unreadable = Command::new(BIN).args(["--script", "/nonexistent/script.json"]).output().await.unwrap();
    assert_eq!(unreadable.status.code(), Some(1));
    assert!(
        String::from_utf8(unreadable.stderr).unwrap().contains("cannot read script /nonexistent/script.json")
    );
}
