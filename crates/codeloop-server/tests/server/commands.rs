//! Commands over HTTP (DESIGN.md §5g): `POST /session/{id}/command` answers as `prompt_async` does, and
//! `GET /command` lists what a client may offer.

use codeloop_testkit::{Reply, Script, Turn};
use serde_json::json;

use crate::support::Harness;

fn write(h: &Harness, name: &str, body: &str) {
    let path = h.project.path().join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

#[tokio::test]
async fn a_command_is_accepted_then_its_expanded_text_is_sent() {
    let h = Harness::start(Script::new([Turn::from(Reply::text("ok"))]).repeating()).await;
    write(
        &h,
        ".codeloop/commands/hello.md",
        "---\ndescription: Greets\nargument-hint: <who>\n---\nHello $1 and $ARGUMENTS",
    );
    let (status, listed) = h.get("/command").await;
    assert_eq!(status, 200, "{listed}");
    let hello = listed.as_array().unwrap().iter().find(|c| c["name"] == "hello").unwrap().clone();
    assert_eq!(
        hello,
        json!({"name": "hello", "description": "Greets", "argument_hint": "<who>", "source": "project"})
    );
    assert!(listed.as_array().unwrap().iter().any(|c| c["name"] == "init" && c["source"] == "builtin"));

    let session = h.create_session().await;
    let mut events = h.events(&format!("?session={session}")).await;
    let (status, body) = h
        .post(
            &format!("/session/{session}/command"),
            json!({"command": "hello", "arguments": "a b", "effort": "high"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    events.until(|e| e.is_idle()).await;
    let sent = h.fake.requests().last().unwrap().body["messages"].to_string();
    assert!(sent.contains("Hello a and a b"), "{sent}");
    let (_, messages) = h.get(&format!("/session/{session}/message")).await;
    let user = messages.as_array().unwrap().iter().find(|m| m["info"]["role"] == "user").unwrap();
    assert_eq!(user["info"]["command"], "hello", "{user}");
    assert_eq!(user["info"]["effort"], "high", "the command's turn thinks as asked: {user}");
    let (status, body) = h
        .post(&format!("/session/{session}/command"), json!({"command": "hello", "effort": "extreme"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("none, low, medium, high, max"), "{body}");
}

#[tokio::test]
async fn an_unknown_command_is_refused_before_the_202_and_nothing_is_sent() {
    let h = Harness::start(Script::new([Turn::from(Reply::text("ok"))]).repeating()).await;
    write(&h, ".claude/commands/known.md", "x");
    let session = h.create_session().await;
    let (status, body) =
        h.post(&format!("/session/{session}/command"), json!({"command": "nope", "arguments": ["x"]})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("unknown_command")), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("nope") && message.contains("known"), "{message}");
    assert_eq!(h.fake.request_count(), 0);
    let (status, _) = h.post("/session/ses_missing/command", json!({"command": "init"})).await;
    assert_eq!(status, 404, "a missing session is refused as prompt_async refuses it");
}
