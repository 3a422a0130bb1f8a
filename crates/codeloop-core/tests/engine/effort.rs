//! Effort (DESIGN.md §5l, issue 38): one scale, sent in each provider family's own fields as the
//! model's catalogue entry says it takes them; a level a model does not take is not sent.

use codeloop_core::config::{AgentSettings, Config, ModelSettings};
use codeloop_core::permission::AskPolicy;
use codeloop_core::{Delivery, PromptInput};
use codeloop_provider::WireApi;
use codeloop_testkit::{RecordedRequest, Reply, Script, Turn};
use codeloop_types::{Effort, ModelRef};
use serde_json::{Value, json};

use crate::harness::Harness;

/// A harness whose fake provider speaks `api`, with enough scripted answers for `turns` prompts.
async fn harness(api: WireApi, turns: usize, tweak: impl FnOnce(&mut Config)) -> Harness {
    let script = Script::new((0..turns).map(|_| Turn::from(Reply::text("ok"))));
    Harness::with(script, AskPolicy::Deny, |config| {
        config.provider.get_mut("fake").unwrap().api = api;
        tweak(config);
    })
    .await
}

/// The request a prompt on `model` (asking for `effort`) sends, in a new session.
async fn request(h: &Harness, model: &str, effort: Option<Effort>) -> RecordedRequest {
    let model = ModelRef::new("fake", model);
    let session = h.engine.create_session(h.project.path(), None, Some(model), None).await.unwrap();
    let before = h.fake.request_count();
    let input = PromptInput { effort, ..PromptInput::text("think about it") };
    // Gemini is not served by the test kit: the request is recorded and answered 404.
    let _ = h.engine.prompt(&session.id, input, Delivery::Queue).await;
    h.fake.requests()[before].clone()
}

fn fields<'a>(body: &'a Value, names: &[&str]) -> Vec<(String, &'a Value)> {
    names.iter().filter_map(|n| body.get(*n).map(|v| ((*n).to_owned(), v))).collect()
}

#[tokio::test]
async fn anthropic_adaptive_levels_budgets_before_4_6_and_nothing_for_none() {
    let h = harness(WireApi::Anthropic, 9, |_| {}).await;
    for (effort, level) in
        [(Effort::Low, "low"), (Effort::Medium, "medium"), (Effort::High, "high"), (Effort::Max, "max")]
    {
        let sent = request(&h, "claude-opus-4-6", Some(effort)).await;
        assert_eq!(sent.body["thinking"], json!({ "type": "adaptive" }), "{effort}");
        assert_eq!(sent.body["output_config"], json!({ "effort": level }), "{effort}");
        assert_eq!(sent.header("anthropic-beta"), None, "adaptive thinking interleaves by itself");
    }
    let none = request(&h, "claude-opus-4-6", Some(Effort::None)).await;
    assert!(fields(&none.body, &["thinking", "output_config"]).is_empty(), "{}", none.body);
    // Sonnet 4.5 thinks by budget: a share of the 32 000-token output limit, with the interleaving beta,
    // and no sampling temperature (the API refuses one while thinking).
    let budget = request(&h, "claude-sonnet-4-5", Some(Effort::High)).await;
    assert_eq!(budget.body["thinking"], json!({ "type": "enabled", "budget_tokens": 16_000 }));
    assert_eq!(budget.body["max_tokens"], json!(32_000));
    assert_eq!(budget.header("anthropic-beta"), Some("interleaved-thinking-2025-05-14"));
    assert!(budget.body.get("temperature").is_none() && budget.body.get("output_config").is_none());
    let low = request(&h, "claude-sonnet-4-5", Some(Effort::Low)).await;
    assert_eq!(low.body["thinking"]["budget_tokens"], json!(4_000));
    // Without an effort nothing changes: the request is today's.
    let plain = request(&h, "claude-sonnet-4-5", None).await;
    assert!(fields(&plain.body, &["thinking", "output_config"]).is_empty(), "{}", plain.body);
    assert_eq!(plain.header("anthropic-beta"), None);
    // Opus 4.7 has no budget mode at all.
    let max = request(&h, "claude-opus-4-7", Some(Effort::Max)).await;
    assert_eq!(
        (&max.body["thinking"]["type"], &max.body["output_config"]["effort"]),
        (&json!("adaptive"), &json!("max"))
    );
}

#[tokio::test]
async fn openai_chat_and_responses_send_the_models_own_level_names() {
    let h = harness(WireApi::OpenAiChat, 8, |_| {}).await;
    for (effort, level) in [
        (Effort::None, "none"),
        (Effort::Low, "low"),
        (Effort::Medium, "medium"),
        (Effort::High, "high"),
        (Effort::Max, "xhigh"),
    ] {
        let sent = request(&h, "gpt-5.5", Some(effort)).await;
        assert_eq!(sent.body["reasoning_effort"], json!(level), "{effort}");
    }
    // GPT-5 predates `none`: its lowest is `minimal`. o3 has no `max`: nothing is sent, the default holds.
    assert_eq!(request(&h, "gpt-5", Some(Effort::None)).await.body["reasoning_effort"], json!("minimal"));
    let o3 = request(&h, "o3", Some(Effort::Max)).await;
    assert!(o3.body.get("reasoning_effort").is_none(), "{}", o3.body);
    // A model that does not reason is never sent an effort.
    let gpt41 = request(&h, "gpt-4.1", Some(Effort::High)).await;
    assert!(gpt41.body.get("reasoning_effort").is_none(), "{}", gpt41.body);

    let h = harness(WireApi::OpenAiResponses, 2, |_| {}).await;
    let high = request(&h, "gpt-5.5", Some(Effort::High)).await;
    assert_eq!(high.body["reasoning"], json!({ "effort": "high", "summary": "auto" }));
    assert_eq!(high.body["include"], json!(["reasoning.encrypted_content"]));
    let none = request(&h, "gpt-5.5", Some(Effort::None)).await;
    assert_eq!(none.body["reasoning"], json!({ "effort": "none" }));
}

#[tokio::test]
async fn gemini_budgets_on_2_5_and_levels_on_3() {
    let h = harness(WireApi::Gemini, 0, |_| {}).await;
    let thinking = |body: &Value| body["generationConfig"]["thinkingConfig"].clone();
    let off = request(&h, "gemini-2.5-flash", Some(Effort::None)).await;
    assert_eq!(thinking(&off.body), json!({ "thinkingBudget": 0 }));
    let high = request(&h, "gemini-2.5-flash", Some(Effort::High)).await;
    assert_eq!(thinking(&high.body), json!({ "thinkingBudget": 16_000, "includeThoughts": true }));
    // 2.5 Pro cannot stop thinking: `none` is not sent.
    let pro = request(&h, "gemini-2.5-pro", Some(Effort::None)).await;
    assert_eq!(thinking(&pro.body), Value::Null);
    let three = request(&h, "gemini-3-flash-preview", Some(Effort::Medium)).await;
    assert_eq!(thinking(&three.body), json!({ "thinkingLevel": "medium", "includeThoughts": true }));
    let minimal = request(&h, "gemini-3-flash-preview", Some(Effort::None)).await;
    assert_eq!(thinking(&minimal.body), json!({ "thinkingLevel": "minimal", "includeThoughts": true }));
}

#[tokio::test]
async fn the_prompts_effort_beats_the_agents_which_beats_the_models() {
    let h = harness(WireApi::OpenAiChat, 4, |config| {
        let model = ModelSettings { effort: Some(Effort::Low), ..Default::default() };
        config.provider.get_mut("fake").unwrap().models.insert("gpt-5.5".into(), model);
        let agent = AgentSettings { effort: Some(Effort::Medium), ..Default::default() };
        config.agent.insert("deep".into(), agent);
        // A model the catalogue does not know thinks once config says so.
        let local = ModelSettings { reasoning: Some(true), ..Default::default() };
        config.provider.get_mut("fake").unwrap().models.insert("my-reasoner".into(), local);
    })
    .await;
    assert_eq!(request(&h, "gpt-5.5", None).await.body["reasoning_effort"], json!("low"));
    assert_eq!(request(&h, "gpt-5.5", Some(Effort::High)).await.body["reasoning_effort"], json!("high"));
    let session = h
        .engine
        .create_session(h.project.path(), Some("deep"), Some(ModelRef::new("fake", "gpt-5.5")), None)
        .await
        .unwrap();
    let before = h.fake.request_count();
    h.engine.prompt(&session.id, PromptInput::text("go"), Delivery::Queue).await.unwrap();
    assert_eq!(h.fake.requests()[before].body["reasoning_effort"], json!("medium"));
    assert_eq!(request(&h, "my-reasoner", Some(Effort::High)).await.body["reasoning_effort"], json!("high"));
}

#[tokio::test]
async fn the_effort_asked_for_is_kept_on_the_message_and_every_step_of_its_turn() {
    let h = harness(WireApi::Anthropic, 0, |_| {}).await;
    h.fake.push(Turn::from(Reply::tool_call("read", json!({ "path": "a.txt" }))));
    h.fake.push(Turn::from(Reply::text("done")));
    h.write("a.txt", "hello");
    let model = ModelRef::new("fake", "claude-sonnet-4-6");
    let session = h.engine.create_session(h.project.path(), None, Some(model), None).await.unwrap();
    let input = PromptInput { effort: Some(Effort::High), ..PromptInput::text("read a.txt") };
    h.engine.prompt(&session.id, input, Delivery::Queue).await.unwrap();
    let requests = h.fake.requests();
    assert_eq!(requests.len(), 2);
    for sent in &requests {
        assert_eq!(sent.body["output_config"], json!({ "effort": "high" }));
    }
    let history = h.engine.messages(&session.id, Default::default()).await.unwrap();
    let user = history.iter().find_map(|m| m.info.as_user()).unwrap();
    assert_eq!(user.effort, Some(Effort::High));
}
