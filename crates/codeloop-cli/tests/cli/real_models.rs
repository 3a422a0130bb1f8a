//! What a real model on the other end needs (issue 23), through the binary: the doom-loop brake under
//! `--on-ask allow`, the warning for a tool call written as text, and `codeloop models` saying which
//! edit tools and sampling each model gets.

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::json;

use super::defects::codeloop;
use super::{Env, text};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_ask_allow_does_not_answer_the_doom_loop_brake() {
    let env = Env::new();
    std::fs::write(env.project.path().join("a.txt"), "hi\n").unwrap();
    let edit = || {
        Turn::from(Reply::tool_call(
            "edit",
            json!({"filePath": "a.txt", "oldString": "not in the file", "newString": "x"}),
        ))
    };
    let fake =
        FakeProvider::start(Script::new([edit(), edit(), edit(), Turn::from(Reply::text("never sent"))]))
            .await
            .unwrap();
    let config = env.config(&fake.base_url(), "");
    let output = codeloop(&env, Some(&config), &["run", "--on-ask", "allow", "fix a.txt"]).await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: Stopped: doom loop detected: `edit` was called 3 times in a row"),
        "{stderr}"
    );
    assert!(stderr.contains("doom_loop = \"allow\""), "{stderr}");
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_warns_in_one_line_when_the_answer_is_a_tool_call_written_as_text() {
    let env = Env::new();
    let call = "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"filePath\": \"a.txt\"}}\n</tool_call>";
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text(call))])).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let output = codeloop(&env, Some(&config), &["run", "what is in a.txt?"]).await;
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let warnings: Vec<&str> =
        stderr.lines().filter(|l| l.starts_with("warning: the answer looks like")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("tool_call_text = \"parse\""), "{stderr}");

    // With parse, the same answer is a call: it runs and the model answers again.
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::text(call)),
        Turn::from(Reply::text("It says hi.")),
    ]))
    .await
    .unwrap();
    std::fs::write(env.project.path().join("a.txt"), "hi\n").unwrap();
    let config = env.config(&fake.base_url(), "tool_call_text = \"parse\"\n");
    let output = codeloop(&env, Some(&config), &["run", "what is in a.txt?"]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("→ read a.txt") && !stderr.contains("warning: the answer"), "{stderr}");
    assert!(stdout.contains("It says hi."), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_shows_the_edit_tools_and_sampling_of_each_model_and_config_sets_them() {
    let env = Env::new();
    let config = env.config(
        "http://127.0.0.1:9/v1",
        "tools = \"patch\"\ntemperature = 0.2\n[provider.fake.models.\"qwen2.5-coder\"]\ncontext = 32768\noutput = 4096\n",
    );
    let output = codeloop(&env, Some(&config), &["models"]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let row =
        |id: &str| stdout.lines().find(|l| l.starts_with(&format!("{id} "))).unwrap_or_default().to_owned();
    assert!(row("openai/gpt-5").contains(" patch  -"), "{stdout}");
    assert!(row("openai/gpt-5").ends_with(" none,low,medium,high"), "gpt-5's effort levels: {stdout}");
    assert!(row("openai/gpt-4.1").contains(" edit ") && row("openai/gpt-4.1").ends_with(" -"), "{stdout}");
    assert!(row("fake/qwen2.5-coder").contains(" edit   t=0.55 p=1 "), "{stdout}");
    assert!(row("fake/test").contains(" patch  t=0.2 "), "the config's own: {stdout}");
    assert!(stdout.contains("catalogue: https://github.com/anomalyco/models.dev"), "{stdout}");
    let json = codeloop(&env, Some(&config), &["models", "fake", "--format", "json"]).await;
    let list: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let qwen = list.as_array().unwrap().iter().find(|m| m["id"] == "fake/qwen2.5-coder").unwrap();
    assert_eq!(
        (&qwen["tools"], &qwen["temperature"], &qwen["top_p"]),
        (&json!("edit"), &json!(0.55), &json!(1.0))
    );
    let help = text(&codeloop(&env, None, &["models", "--help"]).await).0;
    assert!(help.contains("tools = \"edit\"") && help.contains("tool_call_text"), "{help}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_effort_is_sent_as_the_provider_takes_it_and_a_level_the_model_lacks_is_said_once() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new((0..3).map(|_| Turn::from(Reply::text("ok"))))).await.unwrap();
    let config = env.config(&fake.base_url(), "reasoning = true\neffort = \"low\"\n");
    let sent = |index: usize| fake.requests()[index].body.get("reasoning_effort").cloned();
    // A bare model id (here the one the config lists) is found on the provider that serves it.
    let output = codeloop(&env, Some(&config), &["run", "--model", "test", "hi"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert_eq!(sent(0), Some(json!("low")), "the model's config effort");
    assert_eq!(fake.requests()[0].body["model"], json!("test"));
    let output = codeloop(&env, Some(&config), &["run", "--effort", "high", "hi"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    assert_eq!(sent(1), Some(json!("high")));
    // `max` is not among the levels a reasoning model without a catalogue entry takes: not sent, said.
    let output = codeloop(&env, Some(&config), &["run", "--effort", "max", "hi"]).await;
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(sent(2), None);
    let warning: Vec<&str> = stderr.lines().filter(|l| l.contains("effort max is not sent")).collect();
    assert_eq!(warning.len(), 1, "{stderr}");
    assert!(warning[0].contains("low, medium, high"), "{stderr}");
    // An unknown level is refused before anything is sent, naming the levels.
    let output = codeloop(&env, Some(&config), &["run", "--effort", "xhigh", "hi"]).await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("none, low, medium, high, max"), "{stderr}");
    assert_eq!(fake.request_count(), 3);
}

/// Serves `routes` (path → status, body) over HTTP on 127.0.0.1 until the test ends; returns its origin.
async fn serve_files(routes: Vec<(&'static str, u16, String)>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head);
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
            let (status, body) = routes
                .iter()
                .find(|(p, ..)| *p == path)
                .map(|(_, status, body)| (*status, body.clone()))
                .unwrap_or((404, "not found".into()));
            let response = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    origin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_refresh_caches_a_checked_catalogue_and_a_broken_download_keeps_the_old_one() {
    let env = Env::new();
    let catalogue = json!({
        "anthropic": {"id": "anthropic", "name": "Anthropic", "env": ["ANTHROPIC_API_KEY"], "models": {
            "claude-next-9": {"id": "claude-next-9", "name": "Claude Next 9", "reasoning": true, "tool_call": true,
                "reasoning_options": [{"type": "effort", "values": ["low", "high", "max"]}],
                "limit": {"context": 2000000, "output": 256000},
                "cost": {"input": 4.0, "output": 20.0, "cache_read": 0.4,
                         "tiers": [{"tier": {"size": 200000}, "input": 8.0, "output": 30.0}]}},
            "no-limits": {"id": "no-limits", "name": "Broken entry"}
        }},
        "some-unknown-provider": {"name": "X", "models": {"m": {"id": "m", "limit": {"context": 1, "output": 1}}}}
    });
    let origin = serve_files(vec![
        ("/api.json", 200, catalogue.to_string()),
        ("/broken.json", 200, "<html>maintenance</html>".into()),
        ("/empty.json", 200, "{}".into()),
    ])
    .await;
    let config = env.config("http://127.0.0.1:9/v1", "");
    let url = format!("{origin}/api.json");
    let output = codeloop(&env, Some(&config), &["models", "--refresh", &url]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("catalogue refreshed: 1 models of 1 providers")
            && stderr.contains("1 entry without limits"),
        "{stderr}"
    );
    let row = stdout.lines().find(|l| l.starts_with("anthropic/claude-next-9 ")).unwrap_or_default();
    assert!(
        row.contains("2,000,000") && row.contains("4.00") && row.ends_with(" none,low,high,max"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("claude-sonnet-4-5 "),
        "the refreshed catalogue replaces the built-in one: {stdout}"
    );
    assert!(stdout.contains(&format!("catalogue: {url}, fetched 20")), "{stdout}");
    // Used from then on, by every command (the cache is in the data dir).
    let again = text(&codeloop(&env, Some(&config), &["models", "anthropic"]).await).0;
    assert!(again.contains("anthropic/claude-next-9 "), "{again}");
    // A broken, empty or missing download changes nothing and says why.
    for (path, why) in
        [("/broken.json", "not JSON"), ("/empty.json", "no usable model"), ("/gone.json", "HTTP 404")]
    {
        let output =
            codeloop(&env, Some(&config), &["models", "--refresh", &format!("{origin}{path}")]).await;
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(why) && stderr.contains("the catalogue in use is kept"), "{path}: {stderr}");
        let after = text(&codeloop(&env, Some(&config), &["models", "anthropic"]).await).0;
        assert!(after.contains("anthropic/claude-next-9 "), "{path}: {after}");
    }
    // A cache that went bad is ignored for the built-in one, with a warning.
    std::fs::write(env.data.path().join("catalogue.json"), "{ truncated").unwrap();
    let output = codeloop(&env, Some(&config), &["models", "anthropic"]).await;
    let (stdout, stderr) = text(&output);
    assert!(
        stdout.contains("anthropic/claude-sonnet-4-5 ") && stderr.contains("is invalid"),
        "{stdout}{stderr}"
    );
}
