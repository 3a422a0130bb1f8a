//! What `codeloop stats` reads: every step-finish part with its message's model and time and its
//! session's directory, on both stores.

use super::*;
use codeloop_types::{CacheTokens, Finish, PartKind, StepFinishPart, Tokens};
use pretty_assertions::assert_eq;

fn step(input: u64, read: u64, cost: f64) -> PartKind {
    PartKind::StepFinish(StepFinishPart {
        reason: Finish::Stop,
        snapshot: None,
        tokens: Tokens { input, output: 7, cache: CacheTokens { read, write: 2 }, ..Tokens::default() },
        cost,
    })
}

pub(super) fn step_usage_lists_every_step_with_its_model_directory_and_time(kind: Kind) {
    let Some(place) = Place::new(kind) else { return };
    let store = place.open();
    let session = session("/work/usage");
    let question = user(&session.id);
    let mut answer = assistant(&session.id, question.id());
    answer.time.created = 1_700_000_001_000;
    let answer = Message::Assistant(answer);
    let parts = [
        part(&answer, step(100, 40, 0.25)),
        part(&answer, text_kind("between")),
        part(&answer, step(5, 0, 0.5)),
    ];
    let mut batch = vec![Write::Session(session.clone()), Write::Message(question), Write::Message(answer)];
    batch.extend(parts.iter().cloned().map(Write::Part));
    store.apply(&batch).unwrap();

    let steps = store.step_usage(0).unwrap();
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0].session_id, session.id);
    assert_eq!(steps[0].directory, "/work/usage");
    assert_eq!(steps[0].model, model());
    assert_eq!(steps[0].created, 1_700_000_001_000);
    assert_eq!(
        (steps[0].tokens.input, steps[0].tokens.cache.read, steps[0].tokens.cache.write),
        (100, 40, 2)
    );
    assert_eq!((steps[0].cost, steps[1].cost), (0.25, 0.5));
    assert_eq!(store.step_usage(1_700_000_001_001).unwrap(), vec![], "only steps since the given time");
}
