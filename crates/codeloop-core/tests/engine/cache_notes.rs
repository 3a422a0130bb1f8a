//! Cost truth (DESIGN.md §5h): every change codeloop itself makes to the start of a request — another
//! model or agent, edited instructions, a compaction, a prune — is announced as `session.cache`, and
//! nothing is announced when the prefix stays the same.

use codeloop_core::{Delivery, PromptInput};
use codeloop_testkit::{Reply, Script, ScriptUsage, Turn};
use codeloop_types::{CacheReason, EventPayload};
use tokio::sync::broadcast::Receiver;

use crate::harness::Harness;

fn reasons(events: &mut Receiver<std::sync::Arc<codeloop_types::Event>>) -> Vec<CacheReason> {
    let mut reasons = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let EventPayload::SessionCache { reason, .. } = &event.payload {
            reasons.push(*reason);
        }
    }
    reasons
}

fn texts(n: usize) -> Script {
    Script::new((0..n).map(|i| Turn::from(Reply::text(format!("answer {i}")))))
}

#[tokio::test]
async fn the_same_prefix_is_not_announced_and_a_model_agent_or_instructions_change_is() {
    let h = Harness::with(texts(5), codeloop_core::permission::AskPolicy::Deny, |config| {
        let fake = config.provider.get_mut("fake").unwrap();
        let same = fake.models["test"].clone();
        fake.models.insert("other".into(), same);
    })
    .await;
    let mut events = h.engine.bus().subscribe();
    h.prompt("one").await;
    h.prompt("two").await;
    assert_eq!(reasons(&mut events), [], "nothing changed");

    let other = PromptInput { model: Some("fake/other".parse().unwrap()), ..PromptInput::text("three") };
    h.engine.prompt(&h.session.id, other, Delivery::Queue).await.unwrap();
    assert_eq!(reasons(&mut events), [CacheReason::Model]);

    let plan = PromptInput {
        model: Some("fake/other".parse().unwrap()),
        agent: Some("plan".into()),
        ..PromptInput::text("four")
    };
    h.engine.prompt(&h.session.id, plan, Delivery::Queue).await.unwrap();
    assert_eq!(reasons(&mut events), [CacheReason::Agent]);

    h.write("AGENTS.md", "Always answer in haiku.\n");
    let edited = PromptInput {
        model: Some("fake/other".parse().unwrap()),
        agent: Some("plan".into()),
        ..PromptInput::text("five")
    };
    h.engine.prompt(&h.session.id, edited, Delivery::Queue).await.unwrap();
    assert_eq!(reasons(&mut events), [CacheReason::Instructions]);
}

#[tokio::test]
async fn a_compaction_is_announced_as_a_prefix_change() {
    // The first answer fills the context (128 000 - 8 000 usable): a summary follows, then the answer.
    let full = ScriptUsage { input: 125_000, ..Default::default() };
    let h = Harness::new(Script::new([
        Turn::from(Reply::text("long answer").with_usage(full)),
        Turn::from(Reply::text("## Objective\nsummary")),
        Turn::from(Reply::text("continued")),
    ]))
    .await;
    let mut events = h.engine.bus().subscribe();
    h.prompt("fill it").await;
    assert_eq!(h.fake.requests().len(), 3);
    assert_eq!(reasons(&mut events), [CacheReason::Compaction]);
}
