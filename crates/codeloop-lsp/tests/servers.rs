//! The client against real language servers (installed by `.ci/run`: `pylsp` and `basedpyright` from
//! PyPI). A server that is not installed skips its test unless `CODELOOP_REQUIRE_LSP=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::path::{Path, PathBuf};
use std::time::Duration;

use codeloop_lsp::{Server, ServerSpec, Waited, render};

fn find(program: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("CODELOOP_TEST_LSP_PATH").into_iter().chain(std::env::var_os("PATH"));
    let found = dirs
        .flat_map(|d| std::env::split_paths(&d).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file());
    if found.is_none() && std::env::var("CODELOOP_REQUIRE_LSP").as_deref() == Ok("1") {
        panic!("{program} is required (CODELOOP_REQUIRE_LSP=1) but not found");
    }
    found
}

async fn start(program: &Path, args: &[&str], root: &Path) -> std::sync::Arc<Server> {
    let spec = ServerSpec {
        name: "test".into(),
        command: std::iter::once(program.display().to_string())
            .chain(args.iter().map(|a| a.to_string()))
            .collect(),
        extensions: vec!["py".into()],
        ..Default::default()
    };
    let mut command = tokio::process::Command::new(program);
    command.args(args).current_dir(root);
    Server::start(&spec, root, command, Duration::from_secs(60)).await.unwrap()
}

#[tokio::test]
async fn pylsp_reports_an_undefined_name_and_clears_it_when_fixed() {
    let Some(pylsp) = find("pylsp") else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let file = root.join("app.py");
    std::fs::write(&file, "def main():\n    return undefined_name\n").unwrap();
    let server = start(&pylsp, &[], &root).await;
    let since = server.sync(&file, "python").await.unwrap();
    let Waited::Published(found) = server.wait_for(&file, since, Duration::from_secs(30)).await else {
        panic!("no diagnostics")
    };
    let lines = render::diagnostics_lines(&[(file.clone(), found)], render::Shown::Errors, 10, &root);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("app.py:2:12 error undefined name 'undefined_name'"), "{lines:?}");

    std::fs::write(&file, "def main():\n    return 1\n").unwrap();
    let since = server.sync(&file, "python").await.unwrap();
    assert_eq!(server.wait_for(&file, since, Duration::from_secs(30)).await, Waited::Published(vec![]));
    server.shutdown().await;
    assert!(server.gone().is_some());
}

#[tokio::test]
async fn basedpyright_finds_definitions_references_and_renames() {
    let Some(pyright) = find("basedpyright-langserver") else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("lib.py"), "def greet(name: str) -> str:\n    return 'hi ' + name\n").unwrap();
    let app = root.join("app.py");
    std::fs::write(&app, "from lib import greet\n\nprint(greet('a'))\nprint(greet('b'))\n").unwrap();
    let server = start(&pyright, &["--stdio"], &root).await;
    server.sync(&app, "python").await.unwrap();
    let text = std::fs::read_to_string(&app).unwrap();
    let uri = codeloop_lsp::uri::from_path(&app).unwrap();
    let at = serde_json::json!({"textDocument": {"uri": uri.as_str()}, "position": render::lsp_position(&text, 3, 7)});
    let wait = Duration::from_secs(30);
    let definition: lsp_types::GotoDefinitionResponse =
        server.call("textDocument/definition", at.clone(), wait).await.unwrap();
    let locations = match definition {
        lsp_types::GotoDefinitionResponse::Scalar(l) => vec![l],
        lsp_types::GotoDefinitionResponse::Array(l) => l,
        lsp_types::GotoDefinitionResponse::Link(links) => links
            .into_iter()
            .map(|l| lsp_types::Location { uri: l.target_uri, range: l.target_selection_range })
            .collect(),
    };
    assert_eq!(render::locations(&locations, &root), vec!["lib.py:1:5: def greet(name: str) -> str:"]);

    let mut refs = at.clone();
    refs["context"] = serde_json::json!({"includeDeclaration": true});
    let found: Vec<lsp_types::Location> = server.call("textDocument/references", refs, wait).await.unwrap();
    assert_eq!(
        render::locations(&found, &root),
        vec![
            "app.py:1:17: from lib import greet",
            "app.py:3:7: print(greet('a'))",
            "app.py:4:7: print(greet('b'))",
            "lib.py:1:5: def greet(name: str) -> str:",
        ]
    );

    let mut rename = at;
    rename["newName"] = "welcome".into();
    let edit: lsp_types::WorkspaceEdit = server.call("textDocument/rename", rename, wait).await.unwrap();
    let (diff, edits) = render::workspace_edit_diff(&edit, &root);
    assert_eq!(edits, 4, "{diff}");
    assert!(diff.contains("+def welcome(name: str) -> str:"), "{diff}");
    assert!(diff.contains("+print(welcome('b'))"), "{diff}");
    server.shutdown().await;
}
