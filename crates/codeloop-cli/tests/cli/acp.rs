//! `codeloop acp` as an editor sees it: a real subprocess driven by a hand-written JSON-RPC client over
//! its stdin/stdout, against the scripted provider. Every wait is bounded by a deadline; nothing sleeps.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use codeloop_testkit::{FakeProvider, Reply, Script, Turn};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::Env;

/// Longest wait for any one message (a debug build on a busy 2-core machine).
const DEADLINE: Duration = Duration::from_secs(30);

struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Client {
    fn spawn(env: &Env, config: &Path, args: &[&str]) -> Client {
        let mut command = tokio::process::Command::from(env.command(Some(config), &["acp"]));
        command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        command.kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Client { child, stdin, stdout, next_id: 100 }
    }

    async fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn send(&mut self, message: Value) {
        self.send_line(&message.to_string()).await;
    }

    async fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    /// The next message; every line on stdout must be one JSON-RPC message.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(DEADLINE, self.stdout.next_line())
            .await
            .expect("no message from codeloop acp within the deadline")
            .unwrap()
            .expect("codeloop acp closed stdout");
        let message: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"));
        assert_eq!(message["jsonrpc"], "2.0", "{message}");
        message
    }

    /// Messages up to the response to `id`: (everything before it, the response).
    async fn until_response(&mut self, id: u64) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let message = self.next().await;
            if message["id"] == json!(id) && message.get("method").is_none() {
                return (before, message);
            }
            before.push(message);
        }
    }

    /// Sends a request and returns its result, failing on an error.
    async fn call(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = self.request(method, params).await;
        let (before, response) = self.until_response(id).await;
        assert!(response.get("error").is_none(), "{method} failed: {response}");
        (before, response["result"].clone())
    }

    /// Messages until one matches, returning it with those before it.
    async fn until(&mut self, matches: impl Fn(&Value) -> bool) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let message = self.next().await;
            if matches(&message) {
                return (before, message);
            }
            before.push(message);
        }
    }

    async fn initialize(&mut self) -> Value {
        self.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}})).await.1
    }

    async fn new_session(&mut self, cwd: &Path) -> (String, Value) {
        let (_, result) = self.call("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
        (result["sessionId"].as_str().unwrap().to_owned(), result)
    }

    fn prompt_params(session: &str, text: &str) -> Value {
        json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
    }

    async fn answer(&mut self, request: &Value, option: &str) {
        let id = request["id"].clone();
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": {"outcome": "selected", "optionId": option}}}))
            .await;
    }

    /// Closes stdin and waits for a clean exit.
    async fn finish(mut self) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(DEADLINE, self.child.wait()).await.unwrap().unwrap();
        assert!(status.success(), "codeloop acp exited with {status}");
    }
}

fn updates<'a>(messages: &'a [Value], kind: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["update"]["sessionUpdate"] == kind)
        .map(|m| &m["params"]["update"])
        .collect()
}

fn chunks(messages: &[Value], kind: &str) -> String {
    updates(messages, kind).iter().map(|u| u["content"]["text"].as_str().unwrap_or("")).collect()
}

fn requests<'a>(messages: &'a [Value], method: &str) -> Vec<&'a Value> {
    messages.iter().filter(|m| m["method"] == method && m.get("id").is_some()).collect()
}

/// Every update about one tool call, in order (the `tool_call` first).
fn tool_updates<'a>(messages: &'a [Value], id: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["update"]["toolCallId"] == id)
        .map(|m| &m["params"]["update"])
        .collect()
}

fn last_status(messages: &[Value], id: &str) -> Option<String> {
    latest(messages, id, "status").as_str().map(str::to_owned)
}

/// A tool call's field as the client sees it after every update (updates carry only what changed).
fn latest(messages: &[Value], id: &str, field: &str) -> Value {
    tool_updates(messages, id).iter().rev().find_map(|u| u.get(field).cloned()).unwrap_or(Value::Null)
}

const ASK_BASH: &str = "[permission]\nbash = \"ask\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_text_turn_streams_chunks_and_ends_the_turn() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(
        Reply::text("Hello from codeloop.").with_text_chunks(3).with_reasoning("Thinking it over."),
    )]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let mut client = Client::spawn(&env, &config, &[]);
    let init = client.initialize().await;
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(init["agentCapabilities"]["promptCapabilities"]["embeddedContext"], true);
    let (session, created) = client.new_session(env.project.path()).await;
    assert!(session.starts_with("ses_"), "{created}");
    assert_eq!(created["modes"]["currentModeId"], "build");
    let modes: Vec<&str> = created["modes"]["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(modes.contains(&"build") && modes.contains(&"plan"), "{modes:?}");

    let sent = Instant::now();
    let id = client.request("session/prompt", Client::prompt_params(&session, "say hello")).await;
    let (before_chunk, first) =
        client.until(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk").await;
    let latency = sent.elapsed();
    let (mut rest, response) = client.until_response(id).await;
    rest.insert(0, first);
    rest.splice(0..0, before_chunk);
    eprintln!("acp: first agent_message_chunk {} ms after session/prompt", latency.as_millis());
    assert_eq!(response["result"], json!({"stopReason": "end_turn"}));
    assert_eq!(chunks(&rest, "agent_message_chunk"), "Hello from codeloop.");
    assert_eq!(chunks(&rest, "agent_thought_chunk"), "Thinking it over.");
    assert!(updates(&rest, "user_message_chunk").is_empty(), "the prompt is not echoed live");
    assert!(rest.iter().all(|m| m["params"]["sessionId"] == session.as_str()), "{rest:?}");
    client.finish().await;
}

/// A session whose first prompt waits on the permission to run bash with `call` (the fake model then
/// answers `then`); `args` go to `codeloop acp`.
struct Asking {
    fake: FakeProvider,
    client: Client,
    session: String,
    prompt: u64,
    before: Vec<Value>,
    ask: Value,
}

async fn asking(env: &Env, call: Value, then: &str, args: &[&str]) -> Asking {
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("bash", call)),
        Turn::from(Reply::text(then)),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), ASK_BASH);
    let mut client = Client::spawn(env, &config, args);
    client.initialize().await;
    let (session, _) = client.new_session(env.project.path()).await;
    let prompt = client.request("session/prompt", Client::prompt_params(&session, "go")).await;
    let (before, ask) = client.until(|m| m["method"] == "session/request_permission").await;
    Asking { fake, client, session, prompt, before, ask }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_permission_allowed_once_runs_the_command_and_reports_its_output() {
    let env = Env::new();
    let Asking { fake: _fake, mut client, session: _, prompt: id, before, ask } = asking(
        &env,
        json!({"command": "echo hi > out.txt && echo made", "description": "make out.txt"}),
        "Made it.",
        &[],
    )
    .await;
    let call = ask["params"]["toolCall"]["toolCallId"].as_str().unwrap().to_owned();
    assert_eq!(
        tool_updates(&before, &call)[0]["sessionUpdate"],
        "tool_call",
        "the call is announced before the ask"
    );
    assert_eq!(ask["params"]["toolCall"]["kind"], "execute");
    let kinds: Vec<&str> =
        ask["params"]["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once", "reject_always"]);
    client.answer(&ask, "allow_once").await;
    // The same answer again: the engine gets it once, the duplicate is ignored.
    client.answer(&ask, "allow_once").await;
    let (after, response) = client.until_response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(std::fs::read_to_string(env.project.path().join("out.txt")).unwrap(), "hi\n");
    assert_eq!(last_status(&after, &call).as_deref(), Some("completed"));
    let content = latest(&after, &call, "content");
    assert!(content[0]["content"]["text"].as_str().unwrap().contains("made"), "{content}");
    assert_eq!(latest(&after, &call, "rawOutput")["output"], "made\n");
    assert_eq!(chunks(&after, "agent_message_chunk"), "Made it.");
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_permission_rejected_fails_the_call_and_ends_the_turn() {
    let env = Env::new();
    let Asking { fake, mut client, session: _, prompt: id, before: _, ask } =
        asking(&env, json!({"command": "echo no > out.txt"}), "Should not be asked for.", &[]).await;
    let call = ask["params"]["toolCall"]["toolCallId"].as_str().unwrap().to_owned();
    client.answer(&ask, "reject_once").await;
    let (after, response) = client.until_response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert_eq!(last_status(&after, &call).as_deref(), Some("failed"));
    assert!(!env.project.path().join("out.txt").exists());
    assert_eq!(fake.request_count(), 1, "a rejection stops the run");
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_permission_always_is_not_asked_again_and_reject_always_is_remembered() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "echo one"}))),
        Turn::from(Reply::text("First.")),
        Turn::from(Reply::tool_call("bash", json!({"command": "echo two"}))),
        Turn::from(Reply::text("Second.")),
        // Rejected: the run stops here, without another request.
        Turn::from(Reply::tool_call("bash", json!({"command": "touch x"}))),
        Turn::from(Reply::tool_call("bash", json!({"command": "touch y"}))),
        Turn::from(Reply::text("Fourth.")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), ASK_BASH);
    let mut client = Client::spawn(&env, &config, &[]);
    client.initialize().await;
    let (session, _) = client.new_session(env.project.path()).await;

    let id = client.request("session/prompt", Client::prompt_params(&session, "one")).await;
    let (_, ask) = client.until(|m| m["method"] == "session/request_permission").await;
    client.answer(&ask, "allow_always").await;
    let (_, response) = client.until_response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let (during, response) = client.call("session/prompt", Client::prompt_params(&session, "two")).await;
    assert_eq!(response["stopReason"], "end_turn");
    assert!(
        requests(&during, "session/request_permission").is_empty(),
        "`echo *` is allowed now: {during:?}"
    );
    assert_eq!(chunks(&during, "agent_message_chunk"), "Second.");

    let id = client.request("session/prompt", Client::prompt_params(&session, "three")).await;
    let (_, ask) = client.until(|m| m["method"] == "session/request_permission").await;
    client.answer(&ask, "reject_always").await;
    let (_, response) = client.until_response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    // `touch *` is rejected without asking; the model is told and the turn goes on.
    let (during, response) = client.call("session/prompt", Client::prompt_params(&session, "four")).await;
    assert_eq!(response["stopReason"], "end_turn");
    assert!(requests(&during, "session/request_permission").is_empty(), "{during:?}");
    assert!(!env.project.path().join("y").exists());
    assert_eq!(chunks(&during, "agent_message_chunk"), "Fourth.");
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_cancel_stops_a_running_sleep_and_answers_cancelled_promptly() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("bash", json!({"command": "sleep 30"}))),
        Turn::from(Reply::tool_call("bash", json!({"command": "sleep 31"}))),
        Turn::from(Reply::text("After the cancel.")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let mut client = Client::spawn(&env, &config, &[]);
    client.initialize().await;
    let (session, _) = client.new_session(env.project.path()).await;
    let id = client.request("session/prompt", Client::prompt_params(&session, "wait")).await;
    let (_, running) = client.until(|m| m["params"]["update"]["status"] == "in_progress").await;
    let call = running["params"]["update"]["toolCallId"].as_str().unwrap().to_owned();
    let cancelled = Instant::now();
    client
        .send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
        .await;
    let (after, response) = client.until_response(id).await;
    let took = cancelled.elapsed();
    eprintln!("acp: cancel answered after {} ms", took.as_millis());
    assert_eq!(response["result"]["stopReason"], "cancelled");
    assert!(took < Duration::from_secs(5), "cancel took {took:?}");
    assert_eq!(
        last_status(&after, &call).as_deref(),
        Some("failed"),
        "the call ends with one result: {after:?}"
    );
    // `$/cancel_request` on the prompt request does the same.
    let id = client.request("session/prompt", Client::prompt_params(&session, "wait again")).await;
    client.until(|m| m["params"]["update"]["status"] == "in_progress").await;
    client.send(json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": id}})).await;
    let (_, response) = client.until_response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    // The session still works after the cancel.
    let (during, response) = client.call("session/prompt", Client::prompt_params(&session, "again")).await;
    assert_eq!(response["stopReason"], "end_turn");
    assert_eq!(chunks(&during, "agent_message_chunk"), "After the cancel.");
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_cancel_withdraws_a_pending_permission_request() {
    let env = Env::new();
    let Asking { fake: _fake, mut client, session, prompt: id, before: _, ask } =
        asking(&env, json!({"command": "echo never > out.txt"}), "Next turn.", &[]).await;
    client
        .send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}))
        .await;
    let (after, response) = client.until_response(id).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    let withdrawn =
        after.iter().any(|m| m["method"] == "$/cancel_request" && m["params"]["requestId"] == ask["id"]);
    assert!(withdrawn, "the pending request is withdrawn: {after:?}");
    // The client answers late, as ACP asks it to after a cancel: nothing runs.
    client
        .send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"outcome": {"outcome": "cancelled"}}}))
        .await;
    let (_, response) = client.call("session/prompt", Client::prompt_params(&session, "next")).await;
    assert_eq!(response["stopReason"], "end_turn");
    assert!(!env.project.path().join("out.txt").exists());
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_unanswered_permission_times_out_as_a_rejection_with_a_notice() {
    let env = Env::new();
    let Asking { fake: _fake, mut client, session: _, prompt: id, before: _, ask } =
        asking(&env, json!({"command": "echo late > out.txt"}), "unused", &["--permission-timeout", "1"])
            .await;
    let (after, response) = client.until_response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    assert!(after.iter().any(|m| m["method"] == "$/cancel_request" && m["params"]["requestId"] == ask["id"]));
    assert!(
        chunks(&after, "agent_message_chunk").contains("No answer to the permission request"),
        "{after:?}"
    );
    assert!(!env.project.path().join("out.txt").exists());
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_load_replays_an_earlier_session_in_a_new_process() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([
        Turn::from(
            Reply::tool_call(
                "todowrite",
                json!({"todos": [{"content": "write notes", "status": "in_progress", "priority": "high"}]}),
            )
            .with_tool_call("write", json!({"filePath": "notes.txt", "content": "remember\n"})),
        ),
        Turn::from(Reply::text("Wrote the notes.")),
        Turn::from(Reply::text("Still here.")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let mut first = Client::spawn(&env, &config, &[]);
    first.initialize().await;
    let (session, _) = first.new_session(env.project.path()).await;
    first.call("session/set_mode", json!({"sessionId": session, "modeId": "plan"})).await;
    let bad = first.request("session/set_mode", json!({"sessionId": session, "modeId": "nope"})).await;
    assert_eq!(first.until_response(bad).await.1["error"]["code"], -32602);
    first.call("session/set_mode", json!({"sessionId": session, "modeId": "build"})).await;
    let (live, response) = first.call("session/prompt", Client::prompt_params(&session, "take notes")).await;
    assert_eq!(response["stopReason"], "end_turn");
    let plan = updates(&live, "plan");
    assert_eq!(
        plan.last().unwrap()["entries"],
        json!([{"content": "write notes", "priority": "high", "status": "in_progress"}])
    );
    let write = updates(&live, "tool_call").into_iter().find(|c| c["kind"] == "edit").unwrap().clone();
    let write = write["toolCallId"].as_str().unwrap();
    assert_eq!(latest(&live, write, "title"), "Write notes.txt");
    assert_eq!(latest(&live, write, "status"), "completed");
    assert_eq!(
        latest(&live, write, "content")[0],
        json!({"type": "diff", "path": env.project.path().canonicalize().unwrap().join("notes.txt"), "oldText": null, "newText": "remember\n"})
    );
    first.finish().await;

    let mut second = Client::spawn(&env, &config, &[]);
    second.initialize().await;
    let (replayed, loaded) = second
        .call("session/load", json!({"sessionId": session, "cwd": env.project.path(), "mcpServers": []}))
        .await;
    assert_eq!(loaded["modes"]["currentModeId"], "build");
    assert_eq!(chunks(&replayed, "user_message_chunk"), "take notes");
    assert_eq!(chunks(&replayed, "agent_message_chunk"), "Wrote the notes.");
    let calls = updates(&replayed, "tool_call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls.iter().all(|c| c["status"] == "completed"), "{calls:?}");
    assert_eq!(updates(&replayed, "plan").len(), 1);
    let (_, response) = second.call("session/prompt", Client::prompt_params(&session, "still there?")).await;
    assert_eq!(response["stopReason"], "end_turn");
    let last = fake.last_request().unwrap();
    assert!(last.body.to_string().contains("take notes"), "the loaded history reaches the model");
    let missing = second
        .request(
            "session/load",
            json!({"sessionId": "ses_missing", "cwd": env.project.path(), "mcpServers": []}),
        )
        .await;
    assert_eq!(second.until_response(missing).await.1["error"]["code"], -32002);
    second.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_malformed_and_unknown_messages_get_errors_and_the_agent_keeps_serving() {
    let env = Env::new();
    let fake = FakeProvider::start(Script::new([Turn::from(Reply::text("Fine."))])).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let mut client = Client::spawn(&env, &config, &[]);
    client.send_line("{this is not json").await;
    let error = client.next().await;
    assert_eq!((error["id"].clone(), error["error"]["code"].clone()), (Value::Null, json!(-32700)));
    client.send_line("[1, 2]").await;
    assert_eq!(client.next().await["error"]["code"], -32600);
    client.send_line(r#"{"id": 3, "method": "initialize"}"#).await;
    let error = client.next().await;
    assert_eq!((error["id"].clone(), error["error"]["code"].clone()), (json!(3), json!(-32600)));
    let unknown = client.request("session/fly", json!({})).await;
    let (_, error) = client.until_response(unknown).await;
    assert_eq!(error["error"]["code"], -32601);
    let bad = client.request("session/new", json!({"cwd": "relative/dir", "mcpServers": []})).await;
    assert_eq!(client.until_response(bad).await.1["error"]["code"], -32602);
    let bad = client.request("session/new", json!({"mcpServers": []})).await;
    assert_eq!(client.until_response(bad).await.1["error"]["code"], -32602);
    let missing = client.request("session/prompt", Client::prompt_params("ses_missing", "hi")).await;
    assert_eq!(client.until_response(missing).await.1["error"]["code"], -32002);
    // Unknown notifications and responses nobody waits for are ignored silently.
    client.send(json!({"jsonrpc": "2.0", "method": "_zed/whatever", "params": {}})).await;
    client.send(json!({"jsonrpc": "2.0", "id": 99999, "result": {}})).await;
    client.initialize().await;
    let (session, _) = client.new_session(env.project.path()).await;
    let empty = client.request("session/prompt", json!({"sessionId": session, "prompt": []})).await;
    assert_eq!(client.until_response(empty).await.1["error"]["code"], -32602);
    let (during, response) =
        client.call("session/prompt", Client::prompt_params(&session, "still ok?")).await;
    assert_eq!(response["stopReason"], "end_turn");
    assert_eq!(chunks(&during, "agent_message_chunk"), "Fine.");
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_lists_resumes_and_closes_sessions_and_says_when_the_mode_changes() {
    let env = Env::new();
    let fake =
        FakeProvider::start(Script::new([Turn::from(Reply::text("Hello."))]).repeating()).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let mut client = Client::spawn(&env, &config, &[]);
    let init = client.initialize().await;
    let caps = &init["agentCapabilities"];
    assert_eq!(caps["sessionCapabilities"], json!({"list": {}, "resume": {}, "close": {}}), "{init}");
    assert_eq!(caps["promptCapabilities"]["image"], true);
    let (session, _) = client.new_session(env.project.path()).await;
    client.call("session/prompt", Client::prompt_params(&session, "hi")).await;

    // A mode change is told back; a subagent is refused with the engine's one agent rule.
    let (during, _) = client.call("session/set_mode", json!({"sessionId": session, "modeId": "plan"})).await;
    let modes = updates(&during, "current_mode_update");
    assert_eq!(modes.last().map(|u| u["currentModeId"].clone()), Some(json!("plan")), "{during:?}");
    let refused =
        client.request("session/set_mode", json!({"sessionId": session, "modeId": "explore"})).await;
    let error = client.until_response(refused).await.1["error"].clone();
    assert_eq!(error["code"], -32602);
    assert!(
        error["message"].as_str().unwrap().contains("agent \"explore\" runs only as a subagent"),
        "{error}"
    );

    let (_, listed) = client.call("session/list", json!({"cwd": env.project.path()})).await;
    let ids: Vec<&str> =
        listed["sessions"].as_array().unwrap().iter().map(|s| s["sessionId"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![session.as_str()], "{listed}");
    assert!(listed["sessions"][0]["updatedAt"].as_str().unwrap().ends_with('Z'), "{listed}");

    client.call("session/close", json!({"sessionId": session})).await;
    let gone = client.request("session/prompt", Client::prompt_params(&session, "still there?")).await;
    assert!(client.until_response(gone).await.1.get("error").is_some(), "a closed session takes no prompt");
    // Resumed: known again, without the conversation replayed.
    let (replayed, resumed) = client
        .call("session/resume", json!({"sessionId": session, "cwd": env.project.path(), "mcpServers": []}))
        .await;
    assert!(resumed["modes"]["currentModeId"].is_string(), "{resumed}");
    assert!(updates(&replayed, "user_message_chunk").is_empty(), "{replayed:?}");
    let (_, answer) = client.call("session/prompt", Client::prompt_params(&session, "again")).await;
    assert_eq!(answer["stopReason"], "end_turn");
    // Audio is not advertised: refused, not dropped.
    let audio = client
        .request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}]}),
        )
        .await;
    assert_eq!(client.until_response(audio).await.1["error"]["code"], -32602);
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_advertises_http_mcp_and_runs_the_editors_http_servers_without_a_warning() {
    use codeloop_testkit::{McpServerOptions, McpTestServer, Revision};
    let env = Env::new();
    let server = McpTestServer::start(McpServerOptions::new(Revision::Stateless)).await.unwrap();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("web_echo", json!({"text": "from the editor"}))),
        Turn::from(Reply::text("Done.")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let mut client = Client::spawn(&env, &config, &[]);
    let init = client.initialize().await;
    assert_eq!(init["agentCapabilities"]["mcpCapabilities"]["http"], true);
    let servers = json!([{"name": "web", "type": "http", "url": server.url(), "headers": [{"name": "X-Editor", "value": "${NOT_EXPANDED}"}]}]);
    let (_, created) =
        client.call("session/new", json!({"cwd": env.project.path(), "mcpServers": servers})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    let id =
        client.request("session/prompt", Client::prompt_params(&session, "use the editor's server")).await;
    let (messages, response) = client.until_response(id).await;
    assert_eq!(response["result"], json!({"stopReason": "end_turn"}));
    let text = chunks(&messages, "agent_message_chunk");
    assert_eq!(text, "Done.", "no warning in the message stream: {text}");
    assert!(updates(&messages, "notice").is_empty(), "{messages:?}");
    let second = fake.requests()[1].body.to_string();
    assert!(second.contains("echo: from the editor"), "{second}");
    let call = server.requests().into_iter().find(|r| r.tool.as_deref() == Some("echo")).unwrap();
    assert_eq!(call.header("x-editor"), Some("${NOT_EXPANDED}"), "an editor's header is sent as written");
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_reached_limit_ends_the_turn_with_a_notice_naming_it() {
    let env = Env::new();
    let usage = codeloop_testkit::ScriptUsage { input: 900, output: 200, ..Default::default() };
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("glob", json!({"pattern": "*"})).with_usage(usage)),
        Turn::from(Reply::text("never sent")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "[limits]\nrun_max_tokens = 1000\n");
    let mut client = Client::spawn(&env, &config, &[]);
    client.initialize().await;
    let (session, _) = client.new_session(env.project.path()).await;
    let (messages, response) = client.call("session/prompt", Client::prompt_params(&session, "list")).await;
    assert_eq!(response["stopReason"], "max_turn_requests", "{response}");
    let said = chunks(&messages, "agent_message_chunk");
    assert!(said.contains("run_max_tokens") && said.contains("1100 of 1000 tokens"), "{messages:?}");
    assert_eq!(fake.requests().len(), 1);
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_announces_the_commands_and_runs_one_typed_as_slash_name() {
    let env = Env::new();
    let fake =
        FakeProvider::start(Script::new([Turn::from(Reply::text("Reviewed."))]).repeating()).await.unwrap();
    let config = env.config(&fake.base_url(), "");
    let commands = env.project.path().join(".codeloop/commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(
        commands.join("review.md"),
        "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $1 now",
    )
    .unwrap();
    let mut client = Client::spawn(&env, &config, &[]);
    client.initialize().await;
    let (session, _) = client.new_session(env.project.path()).await;
    let (_, announced) =
        client.until(|m| m["params"]["update"]["sessionUpdate"] == "available_commands_update").await;
    assert_eq!(announced["params"]["sessionId"], session.as_str());
    let listed = announced["params"]["update"]["availableCommands"].as_array().unwrap().clone();
    let review = listed.iter().find(|c| c["name"] == "review").unwrap();
    assert_eq!(
        review,
        &json!({"name": "review", "description": "Review a file", "input": {"hint": "<file>"}})
    );
    assert!(listed.iter().any(|c| c["name"] == "init"), "{listed:?}");

    let (_, result) =
        client.call("session/prompt", Client::prompt_params(&session, "/review src/a.rs")).await;
    assert_eq!(result, json!({"stopReason": "end_turn"}));
    let sent = fake.requests().last().unwrap().body["messages"].to_string();
    assert!(sent.contains("Review src/a.rs now"), "{sent}");
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_effort_is_a_session_config_option_sent_with_the_next_prompt() {
    let env = Env::new();
    let fake =
        FakeProvider::start(Script::new([Turn::from(Reply::text("ok")), Turn::from(Reply::text("ok"))]))
            .await
            .unwrap();
    let config = env.config(&fake.base_url(), "reasoning = true\n");
    let mut client = Client::spawn(&env, &config, &[]);
    client.initialize().await;
    let (session, created) = client.new_session(env.project.path()).await;
    let effort = created["configOptions"].as_array().unwrap().iter().find(|o| o["id"] == "effort").cloned();
    let effort = effort.unwrap_or_else(|| panic!("no effort option: {created}"));
    assert_eq!((&effort["currentValue"], &effort["category"]), (&json!("default"), &json!("thought_level")));
    client.call("session/prompt", Client::prompt_params(&session, "one")).await;
    assert!(fake.requests()[0].body.get("reasoning_effort").is_none(), "default: nothing asked");
    let params = json!({"sessionId": session, "configId": "effort", "value": "high"});
    let (_, set) = client.call("session/set_config_option", params).await;
    let options = set["configOptions"].as_array().unwrap();
    assert!(options.iter().any(|o| o["id"] == "effort" && o["currentValue"] == "high"), "{set}");
    client.call("session/prompt", Client::prompt_params(&session, "two")).await;
    assert_eq!(fake.requests()[1].body["reasoning_effort"], json!("high"));
    let bad = json!({"sessionId": session, "configId": "effort", "value": "xhigh"});
    let id = client.request("session/set_config_option", bad).await;
    let (_, refused) = client.until_response(id).await;
    assert!(
        refused["error"]["message"].as_str().unwrap_or_default().contains("none, low, medium, high, max"),
        "{refused}"
    );
    client.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_an_mcp_servers_elicitation_is_asked_like_a_permission_and_its_defaults_accepted() {
    use codeloop_testkit::{McpServerOptions, McpTestServer, Revision};
    let env = Env::new();
    let server = McpTestServer::start(McpServerOptions::new(Revision::Sessions)).await.unwrap();
    let fake = FakeProvider::start(Script::new([
        Turn::from(Reply::tool_call("web_ask", json!({}))),
        Turn::from(Reply::text("Done.")),
    ]))
    .await
    .unwrap();
    let config = env.config(&fake.base_url(), "");
    let mut client = Client::spawn(&env, &config, &[]);
    client.initialize().await;
    let servers = json!([{"name": "web", "type": "http", "url": server.url(), "headers": []}]);
    let (_, created) =
        client.call("session/new", json!({"cwd": env.project.path(), "mcpServers": servers})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    let id = client.request("session/prompt", Client::prompt_params(&session, "ask me")).await;
    let (_, ask) = client.until(|m| m["method"] == "session/request_permission").await;
    let title = ask["params"]["toolCall"]["title"].as_str().unwrap();
    assert!(title.contains("MCP server web asks: Which name, how many?"), "{title}");
    let options: Vec<&str> =
        ask["params"]["options"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(options, ["Accept the defaults", "Decline"]);
    client.answer(&ask, "allow_once").await;
    let (_, response) = client.until_response(id).await;
    assert_eq!(response["result"], json!({"stopReason": "end_turn"}));
    let second = fake.requests()[1].body.to_string();
    assert!(second.contains(r#"accept {\"name\":\"Ada\"}"#), "{second}");
    client.finish().await;
}
