//! Providers where companies buy their models (DESIGN.md §5l), through the real binary against fakes that
//! check what codeloop sends: Azure OpenAI's deployment path, `api-version` and `api-key`.

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::json;

use super::{Env, text};

fn azure_config(env: &Env, fake: &FakeProvider, extra: &str) -> std::path::PathBuf {
    let origin = fake.base_url().trim_end_matches("/v1").to_owned();
    let path = env.home.path().join("config.toml");
    std::fs::write(
        &path,
        format!(
            "model = \"az/gpt-4o\"\n[provider.az]\napi = \"azure\"\nbase_url = \"{origin}\"\napi_key_env = \"AZ_TEST_KEY\"\n{extra}\n\
             [provider.az.models.gpt-4o]\ncontext = 128000\noutput = 8000\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_deployments_get_the_deployment_path_the_api_version_and_the_key() {
    let env = Env::new();
    std::fs::write(env.project.path().join("a.txt"), "hello from azure\n").unwrap();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("read", json!({"filePath": "a.txt"}))),
        Turn::from(Reply::text("It greets you.")),
    ]))
    .await
    .unwrap();
    fake.require_azure_key("k-right");
    let config = azure_config(&env, &fake, "deployment = \"prod-4o\"");
    let out = env.codeloop_with(Some(&config), &["run", "what is in a.txt?"], &[("AZ_TEST_KEY", "k-right")]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "It greets you.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, "/openai/deployments/prod-4o/chat/completions");
        assert_eq!(request.query, "api-version=2024-10-21");
        assert_eq!(request.header("api-key"), Some("k-right"));
        assert_eq!(request.header("authorization"), None, "the key goes in api-key only");
    }
    let tool_result =
        requests[1].body["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").cloned();
    assert!(tool_result.unwrap()["content"].as_str().unwrap().contains("hello from azure"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_without_a_deployment_uses_the_v1_path_and_a_wrong_key_says_which_variable() {
    let env = Env::new();
    let fake =
        FakeProvider::start(Script::new([Turn::from(Reply::text("v1 here"))]).repeating()).await.unwrap();
    fake.require_azure_key("k-right");
    let config = azure_config(&env, &fake, "");
    let out = env.codeloop_with(Some(&config), &["run", "hi"], &[("AZ_TEST_KEY", "k-right")]);
    assert!(out.status.success(), "{}", text(&out).1);
    let request = fake.last_request().unwrap();
    assert_eq!((request.path.as_str(), request.query.as_str()), ("/openai/v1/chat/completions", ""));
    assert_eq!(request.body["model"], "gpt-4o", "the v1 path names the model in the body");

    let out = env.codeloop_with(Some(&config), &["run", "hi"], &[("AZ_TEST_KEY", "k-wrong")]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("AZ_TEST_KEY"), "the error names the key's variable: {stderr}");

    let missing = env.home.path().join("missing.toml");
    std::fs::write(&missing, "model = \"az/gpt-4o\"\n[provider.az]\napi = \"azure\"\n").unwrap();
    let out = env.codeloop_with(Some(&missing), &["run", "hi"], &[("AZURE_OPENAI_API_KEY", "k")]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("needs resource = \"NAME\""), "{stderr}");
}

/// A loopback server answering every request with `body` (a vLLM-style model list).
fn model_list_server(body: &'static str) -> String {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_server_preset_lists_its_models_with_their_context_and_parses_calls_written_as_text() {
    let env = Env::new();
    let url = model_list_server(
        r#"{"object":"list","data":[{"id":"Qwen/Qwen2.5-Coder-7B-Instruct","object":"model","max_model_len":32768}]}"#,
    );
    let config = env.home.path().join("config.toml");
    std::fs::write(&config, format!("[provider.vllm]\nbase_url = \"{url}\"\n")).unwrap();
    let out = env.codeloop(Some(&config), &["models", "vllm"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(&format!("vllm ({url}) has:")), "{stdout}");
    let row = stdout.lines().find(|l| l.contains("vllm/Qwen/Qwen2.5-Coder-7B-Instruct")).unwrap_or_default();
    assert!(row.trim_end().ends_with("context 32,768"), "{stdout}");
    let out = env.codeloop(Some(&config), &["doctor"]);
    let (stdout, _) = text(&out);
    assert!(stdout.contains("1 model(s): Qwen/Qwen2.5-Coder-7B-Instruct"), "{stdout}");

    // A preset's model that writes its call as text gets it parsed, with no setting.
    std::fs::write(env.project.path().join("a.txt"), "hi\n").unwrap();
    let call = "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"filePath\": \"a.txt\"}}\n</tool_call>";
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::text(call)),
        Turn::from(Reply::text("It says hi.")),
    ]))
    .await
    .unwrap();
    std::fs::write(
        &config,
        format!(
            "model = \"ollama/qwen2.5-coder:7b\"\n[provider.ollama]\nbase_url = \"{}\"\n",
            fake.base_url()
        ),
    )
    .unwrap();
    let out = env.codeloop(Some(&config), &["run", "what is in a.txt?"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("→ read a.txt") && !stderr.contains("warning: the answer"), "{stderr}");
    assert!(stdout.contains("It says hi."), "{stdout}");
}

/// A deployment name is one path segment whatever it holds: no way out of the deployments path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_deployment_name_stays_one_path_segment() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("ok"))]).repeating()).await.unwrap();
    let config = azure_config(&env, &fake, "deployment = \"../../v1/x?api-version=1#\"");
    let out = env.codeloop_with(Some(&config), &["run", "hi"], &[("AZ_TEST_KEY", "k")]);
    assert!(out.status.success(), "{}", text(&out).1);
    let request = fake.last_request().unwrap();
    assert_eq!(request.path, "/openai/deployments/..%2F..%2Fv1%2Fx%3Fapi-version%3D1%23/chat/completions");
    assert_eq!(request.query, "api-version=2024-10-21");
}

/// `doctor` says where an Azure provider's key comes from, or what to set, without a model request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_checks_an_azure_providers_key_without_a_model_request() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("never"))])).await.unwrap();
    let config = azure_config(&env, &fake, "deployment = \"prod-4o\"");
    let out = env.codeloop_with(Some(&config), &["doctor"], &[("AZ_TEST_KEY", "k")]);
    let (stdout, _) = text(&out);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("✓ provider az: key found in $AZ_TEST_KEY"), "{stdout}");
    let out = env.codeloop(Some(&config), &["doctor"]);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("✗ provider az: $AZ_TEST_KEY is not set — export AZ_TEST_KEY=…"), "{stdout}");
    // Only the reachability probe (a GET): no model request, no token spent.
    assert!(fake.requests().iter().all(|r| r.method == "GET"), "{:?}", fake.requests());
}
