//! Seeing and bounding what runs spend (DESIGN.md §5h) through the binary: `run --max-cost` and
//! `[limits]`, and `codeloop stats` over known sessions.

use std::path::PathBuf;
use std::process::Output;

use codeloop_testkit::{FakeProvider, Reply, Script, ScriptUsage, Turn};
use serde_json::{Value, json};

use super::{Env, text};

/// A config whose model costs $1 000 per million input tokens (so 600 tokens cost $0.60), $2 000 per
/// million output tokens, and $100 per million cache reads.
fn priced_config(env: &Env, base_url: &str, extra: &str) -> PathBuf {
    let path = env.home.path().join("config.toml");
    std::fs::write(
        &path,
        format!(
            "model = \"fake/test\"\n[provider.fake]\nbase_url = \"{base_url}\"\n[provider.fake.models.test]\ncontext = 128000\noutput = 8000\ncost = {{ input = 1000.0, output = 2000.0, cache_read = 100.0, cache_write = 1250.0 }}\n{extra}"
        ),
    )
    .unwrap();
    path
}

async fn codeloop(env: &Env, config: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd = env.command(Some(config), args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

fn events(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn usage(input: u64) -> ScriptUsage {
    ScriptUsage { input, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_cost_stops_the_run_exits_one_and_names_the_limit() {
    let env = Env::new();
    std::fs::write(env.project.path().join("a.txt"), "hello\n").unwrap();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})).with_usage(usage(600))),
        Turn::from(Reply::text("never sent")),
    ]))
    .await
    .unwrap();
    let config = priced_config(&env, &fake.base_url(), "");
    let output = codeloop(
        &env,
        &config,
        &["run", "--max-cost", "0.5", "--format", "json", "--on-ask", "deny", "read a.txt"],
    )
    .await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("run_max_cost_usd"), "{stderr}");
    assert_eq!(fake.requests().len(), 1, "nothing is sent past the limit");
    let events = events(&output);
    let limit = events.iter().find(|e| e["type"] == "session.limit").expect("a session.limit event");
    assert_eq!(limit["properties"]["limit"], "run_max_cost_usd");
    assert_eq!(limit["properties"]["value"], 0.5);
    assert!((limit["properties"]["used"].as_f64().unwrap() - 0.6).abs() < 1e-9, "{limit}");
    let tool = events.iter().rev().find(|e| e["properties"]["part"]["type"] == "tool").unwrap();
    assert_eq!(tool["properties"]["part"]["state"]["status"], "completed", "the started tool finished");

    // A bad amount is refused before anything runs.
    let output = codeloop(&env, &config, &["run", "--max-cost", "lots", "hi"]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).1.contains("not an amount in USD"), "{}", text(&output).1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cost_limit_in_config_stops_the_next_run_before_it_sends() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::text("first").with_usage(usage(700))),
        Turn::from(Reply::text("never sent")),
    ]))
    .await
    .unwrap();
    let config = priced_config(&env, &fake.base_url(), "[limits]\nsession_max_cost_usd = 0.5\n");
    let output = codeloop(&env, &config, &["run", "hi"]).await;
    assert!(output.status.success(), "{}", text(&output).1);
    let output = codeloop(&env, &config, &["run", "--continue", "more"]).await;
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("session_max_cost_usd") && stderr.contains("0.7000 of 0.5000 USD"), "{stderr}");
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_adds_up_known_sessions_by_model_project_and_day() {
    let env = Env::new();
    std::fs::write(env.project.path().join("a.txt"), "hello\n").unwrap();
    let other = tempfile::tempdir().unwrap();
    let cached = ScriptUsage { input: 1_000, cached: 600, output: 100, ..Default::default() };
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"})).with_usage(cached)),
        Turn::from(Reply::text("It says hello.").with_usage(cached)),
        Turn::from(Reply::text("Elsewhere.").with_usage(ScriptUsage {
            input: 500,
            output: 50,
            ..Default::default()
        })),
    ]))
    .await
    .unwrap();
    let config = priced_config(&env, &fake.base_url(), "");
    assert!(codeloop(&env, &config, &["run", "read a.txt"]).await.status.success());
    let dir = other.path().to_str().unwrap();
    assert!(codeloop(&env, &config, &["run", "--dir", dir, "hi"]).await.status.success());

    let rows = |output: Output| -> Vec<Value> {
        assert!(output.status.success(), "{}", text(&output).1);
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let by_model = rows(codeloop(&env, &config, &["stats", "--json"]).await);
    assert_eq!(by_model.len(), 1, "{by_model:?}");
    let row = &by_model[0];
    assert_eq!(row["key"], "fake/test");
    assert_eq!(row["sessions"], 2);
    assert_eq!(row["input_tokens"], 2_500, "uncached, cache read and cache write");
    assert_eq!(row["output_tokens"], 250);
    assert_eq!(row["cache_read_tokens"], 1_200);
    assert_eq!(row["cache_write_tokens"], 0);
    assert!((row["cache_hit_rate"].as_f64().unwrap() - 0.48).abs() < 1e-9, "{row}");
    // 1 300 uncached × $1 000/M + 250 output × $2 000/M + 1 200 cache reads × $100/M.
    assert!((row["cost_usd"].as_f64().unwrap() - 1.92).abs() < 1e-9, "{row}");

    let by_project = rows(codeloop(&env, &config, &["stats", "--by", "project", "--json"]).await);
    let keys: Vec<&str> = by_project.iter().map(|r| r["key"].as_str().unwrap()).collect();
    let project = env.project.path().canonicalize().unwrap();
    assert_eq!(keys, [project.to_str().unwrap(), other.path().canonicalize().unwrap().to_str().unwrap()]);
    assert_eq!(by_project[0]["cache_read_tokens"], 1_200);
    assert_eq!(by_project[1]["input_tokens"], 500);
    assert_eq!(by_project[1]["cache_hit_rate"], 0.0);

    let by_day = rows(codeloop(&env, &config, &["stats", "--by", "day", "--days", "1", "--json"]).await);
    assert_eq!(by_day.len(), 1);
    assert_eq!(by_day[0]["key"], codeloop_types::date_of(codeloop_types::now_ms()));
    assert_eq!(by_day[0]["sessions"], 2);

    let table = codeloop(&env, &config, &["stats"]).await;
    let (stdout, _) = text(&table);
    assert!(stdout.contains("fake/test") && stdout.contains("48.0%"), "{stdout}");
}
