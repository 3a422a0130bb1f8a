//! `codeloop web` (DESIGN.md §5i): a server with a token, the page's address printed with the token in
//! the fragment, and a browser opened on a private file that forwards there (the token never goes on a
//! command line).

use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Env, Killed};

/// Starts `codeloop web ARGS` and returns it with the page address it printed and its stderr lines.
fn web(
    env: &Env,
    args: &[&str],
    vars: &[(&str, &str)],
) -> (Killed, String, std::sync::mpsc::Receiver<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_codeloop"));
    command
        .arg("web")
        .args(args)
        .current_dir(env.project.path())
        .env("CODELOOP_DATA_DIR", env.data.path())
        .env("HOME", env.home.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODELOOP_CONFIG")
        .env_remove("CODELOOP_SERVER_TOKEN")
        .env_remove("BROWSER")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .envs(vars.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut server = Killed(command.spawn().unwrap());
    let stdout = server.0.stdout.take().unwrap();
    let stderr = server.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = std::io::BufReader::new(stdout).lines();
    let first = lines.next().expect("codeloop web printed its address").unwrap();
    std::thread::spawn(move || for _ in lines {});
    let page = first.strip_prefix("codeloop web page: ").unwrap_or_else(|| panic!("{first}")).to_owned();
    (server, page, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_prints_the_page_with_a_fresh_token_in_the_fragment_and_the_server_wants_it() {
    let env = Env::new();
    let (_server, page, stderr) = web(&env, &["--no-open", "--port", "0"], &[]);
    let (base, token) = page.split_once("/#token=").unwrap_or_else(|| panic!("{page}"));
    assert!(base.starts_with("http://127.0.0.1:"), "{page}");
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    let listening = stderr.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(
        listening,
        format!("codeloop server listening on {base} (Authorization: Bearer <token> required)")
    );

    let http = reqwest::Client::new();
    let page_response = http.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page_response.status(), 200);
    assert!(
        page_response.headers()["content-security-policy"].to_str().unwrap().contains("default-src 'self'")
    );
    assert!(page_response.text().await.unwrap().contains("<title>codeloop</title>"));
    assert_eq!(http.get(format!("{base}/session")).send().await.unwrap().status(), 401);
    assert_eq!(http.get(format!("{base}/session")).bearer_auth(token).send().await.unwrap().status(), 200);
    // Another start makes another token.
    let (_other, again, _) = web(&env, &["--no-open", "--port", "0"], &[]);
    assert_ne!(again.split_once("#token=").unwrap().1, token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_opens_browser_on_a_private_forwarding_file_and_keeps_the_token_off_its_command_line() {
    let env = Env::new();
    let browser = env.home.path().join("browser.sh");
    let seen = env.home.path().join("browser-args.txt");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}.tmp && mv {0}.tmp {0}\n", seen.display()),
    )
    .unwrap();
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).unwrap();
    let token = "token-from-the-environment";
    let browser_var = format!("{} --new-window", browser.display());
    let (server, page, _stderr) =
        web(&env, &["--port", "0"], &[("CODELOOP_SERVER_TOKEN", token), ("BROWSER", browser_var.as_str())]);
    assert!(page.ends_with(&format!("/#token={token}")), "{page}");

    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen.exists() {
        assert!(Instant::now() < deadline, "the browser command was not run");
        std::thread::sleep(Duration::from_millis(20));
    }
    let args = std::fs::read_to_string(&seen).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(args[0], "--new-window");
    let file = args[1].strip_prefix("file://").unwrap_or_else(|| panic!("{args:?}"));
    assert!(!args.iter().any(|a| a.contains(token)), "the token is not on a command line: {args:?}");
    let forwarding = std::fs::read_to_string(file).unwrap();
    assert!(forwarding.contains(&format!("url={page}\"")), "{forwarding}");
    let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "only its owner can read the file with the token");
    assert!(file.starts_with(env.data.path().to_str().unwrap()), "{file}");

    // Stopped (as Ctrl+C does), the server takes the file with it.
    let pid = nix::unistd::Pid::from_raw(server.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let mut server = server;
    let status = server.0.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!std::path::Path::new(file).exists(), "the forwarding file is removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_project_says_what_a_project_brings_and_whether_it_is_trusted() {
    let env = Env::new();
    std::fs::write(
        env.project.path().join(".mcp.json"),
        r#"{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "server-fs"]}}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(env.project.path().join(".claude/agents")).unwrap();
    std::fs::write(
        env.project.path().join(".claude/agents/rev.md"),
        "---\ndescription: Reviews\n---\nReview.\n",
    )
    .unwrap();
    let (_server, page, _stderr) = web(&env, &["--no-open", "--port", "0"], &[]);
    let (base, token) = page.split_once("/#token=").unwrap();
    let get = || async {
        reqwest::Client::new()
            .get(format!("{base}/project"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    };
    let report = get().await;
    assert_eq!(report["trust"], "untrusted", "{report}");
    let brings = report["brings"].to_string();
    assert!(brings.contains("start `npx -y server-fs`") && brings.contains("agent `rev`"), "{report}");
    assert!(report["files"].to_string().contains(".mcp.json"), "{report}");
    let trusted = env.codeloop(None, &["trust"]);
    assert!(trusted.status.success());
    let report = get().await;
    assert_eq!(report["trust"], "trusted", "{report}");
    assert_eq!(report["brings"][0]["state"], "trusted", "{report}");
}
