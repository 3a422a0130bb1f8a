//! Property: whatever a provider streams — text, reasoning, tool inputs and calls in any order, with any
//! ids, repeated or dangling — and however the stream ends (normally, with an error, or with an abort),
//! the processor leaves every tool call terminal exactly once, no text or reasoning open, and the store
//! holding exactly what the processor holds.
//!
//! The provider is an in-memory [`Provider`] replaying the generated events; tools really run (quick
//! ones: `read` of a missing file, an unknown tool, short `bash` commands) through the real registry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use codeloop_core::doom_loop::DoomLoopGuard;
use codeloop_core::models::ModelPricing;
use codeloop_core::permission::AskPolicy;
use codeloop_core::processor::{AttemptEnd, Finished, Processor, TurnContext};
use codeloop_core::{Engine, Services, ToolGate};
use codeloop_provider::{
    EventStream, Provider, ProviderError, ProviderRequest, StreamEvent, ToolCall, ToolChoice, Usage,
};
use codeloop_tools::ProjectPaths;
use codeloop_types::{
    AssistantError, AssistantMessage, Finish, MessageId, MessagePath, ModelRef, PartKind, Session,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use serde_json::json;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use crate::harness::{config_for, open_engine};

/// How the generated stream ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ending {
    /// The stream simply ends (with or without a `Finish` among the events).
    Normal,
    /// A connection error after the events.
    Error,
    /// The run is interrupted after the events.
    Abort,
}

/// Replays one generated stream; the abort ending cancels the run's token, then stays silent.
struct Scripted {
    events: Mutex<Option<Vec<StreamEvent>>>,
    ending: Ending,
    cancel: CancellationToken,
}

impl Provider for Scripted {
    fn stream(&self, _request: Arc<ProviderRequest>) -> BoxFuture<'_, Result<EventStream, ProviderError>> {
        let events = self.events.lock().unwrap().take().unwrap_or_default();
        let ending = self.ending;
        let cancel = self.cancel.clone();
        Box::pin(async move {
            let body = futures::stream::iter(events.into_iter().map(Ok));
            let stream: EventStream = match ending {
                Ending::Normal => Box::pin(body),
                Ending::Error => {
                    Box::pin(body.chain(futures::stream::iter([Err(ProviderError::Connection {
                        message: "generated reset".into(),
                    })])))
                }
                Ending::Abort => Box::pin(body.chain(futures::stream::once(async move {
                    cancel.cancel();
                    std::future::pending::<Result<StreamEvent, ProviderError>>().await
                }))),
            };
            Ok(stream)
        })
    }
}

fn small_id() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_owned)
}

fn call_id() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["call_1", "call_2", "call_3", "call_4"]).prop_map(str::to_owned)
}

/// Tool calls that finish fast: a missing file, an unknown tool, bash that exits or sleeps briefly.
fn tool_call() -> impl Strategy<Value = (String, Result<serde_json::Value, String>)> {
    prop_oneof![
        3 => Just(("read".to_owned(), Ok(json!({"filePath": "missing.txt"})))),
        2 => Just(("no_such_tool".to_owned(), Ok(json!({})))),
        2 => Just(("bash".to_owned(), Ok(json!({"command": "echo hi"})))),
        1 => Just(("bash".to_owned(), Ok(json!({"command": "sleep 0.4"})))),
        1 => Just(("read".to_owned(), Err("{\"filePath\": ".to_owned()))),
    ]
}

fn event() -> impl Strategy<Value = StreamEvent> {
    let finish = prop::sample::select(vec![Finish::Stop, Finish::ToolCalls, Finish::Length, Finish::Unknown]);
    prop_oneof![
        1 => Just(StreamEvent::Start),
        1 => Just(StreamEvent::StartStep),
        1 => small_id().prop_map(|id| StreamEvent::TextStart { id }),
        1 => (small_id(), "[a-z ]{0,6}").prop_map(|(id, text)| StreamEvent::TextDelta { id, text }),
        1 => small_id().prop_map(|id| StreamEvent::TextEnd { id }),
        1 => small_id().prop_map(|id| StreamEvent::ReasoningStart { id, metadata: None }),
        1 => (small_id(), "[a-z ]{0,6}").prop_map(|(id, text)| StreamEvent::ReasoningDelta { id, text }),
        1 => small_id().prop_map(|id| StreamEvent::ReasoningEnd { id, metadata: None }),
        1 => (call_id(), prop::sample::select(vec!["read", "bash", "no_such_tool"]))
            .prop_map(|(call_id, name)| StreamEvent::ToolInputStart { call_id, name: name.to_owned() }),
        1 => (call_id(), "[a-z{}\":]{0,6}").prop_map(|(call_id, delta)| StreamEvent::ToolInputDelta { call_id, delta }),
        1 => call_id().prop_map(|call_id| StreamEvent::ToolInputEnd { call_id }),
        2 => (call_id(), tool_call()).prop_map(|(call_id, (name, input))| {
            let input = input.map_err(|raw| codeloop_provider::InvalidArguments {
                error: "EOF while parsing".into(),
                raw,
            });
            StreamEvent::ToolCall(ToolCall { call_id, name, input, metadata: None })
        }),
        1 => (finish, any::<bool>()).prop_map(|(finish, usage)| StreamEvent::FinishStep {
            finish,
            raw_finish: None,
            usage: usage.then(|| Usage { input: 10, output: 5, ..Default::default() }),
        }),
        1 => Just(StreamEvent::Finish),
    ]
}

fn case() -> impl Strategy<Value = (Vec<StreamEvent>, Ending)> {
    (
        prop::collection::vec(event(), 0..24),
        prop_oneof![Just(Ending::Normal), Just(Ending::Error), Just(Ending::Abort)],
    )
}

struct Fixture {
    _data: TempDir,
    project: TempDir,
    engine: Engine,
    session: Session,
}

impl Fixture {
    async fn new() -> Fixture {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        // The provider is never called over HTTP here; the URL only has to be well formed.
        let engine = open_engine(data.path(), config_for("http://127.0.0.1:9/v1"), AskPolicy::Deny);
        let session = engine.create_session(project.path(), None, None, None).await.unwrap();
        Fixture { _data: data, project, engine, session }
    }

    fn services(&self) -> Arc<Services> {
        self.engine.services().clone()
    }

    /// Runs one attempt over `events` and completes the message, as the run loop would.
    async fn attempt(&self, events: Vec<StreamEvent>, ending: Ending) -> (AttemptEnd, Finished) {
        let project = self.project.path().to_owned();
        let ctx = Arc::new(TurnContext {
            journal: self.services().journal.clone(),
            gate: Arc::new(ToolGate::new(
                self.services(),
                std::sync::Arc::new(self.engine.coordinator().clone()),
                self.session.id.clone(),
                None,
                Arc::new(Vec::new()),
                Arc::new(Vec::new()),
                project.display().to_string(),
            )),
            project: ProjectPaths::new(project.clone(), project.clone()),
            tool_output_dir: self.services().tool_output_dir.clone(),
            limits: self.services().limits(),
            pricing: ModelPricing::default(),
            overflow_at: None,
            tools_enabled: true,
            summary: false,
            estimated_input_tokens: 0,
            tools: self.services().tools.clone(),
            offered: self.services().tools.names().iter().map(|n| n.to_string()).collect(),
            continue_on_reject: false,
            walls: None,
            seen: None,
        });
        let message = AssistantMessage::new(
            self.session.id.clone(),
            MessageId::new(),
            "build",
            ModelRef::new("fake", "test"),
            MessagePath { cwd: project.display().to_string(), root: project.display().to_string() },
        );
        let cancel = CancellationToken::new();
        let provider = Scripted { events: Mutex::new(Some(events)), ending, cancel: cancel.clone() };
        let request = ProviderRequest {
            model: "test".into(),
            system: Vec::new(),
            messages: Vec::new(),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            max_output_tokens: None,
            temperature: None,
            top_p: None,
            tool_call_text: Default::default(),
            session_id: None,
            reasoning: None,
            cache: None,
        };
        let mut processor = Processor::new(ctx, message);
        let mut doom = DoomLoopGuard::default();
        let end = processor.attempt(&provider, Arc::new(request), &cancel, &mut doom).await;
        let error = matches!(end, AttemptEnd::Aborted).then(AssistantError::aborted);
        let finished = processor.finish(error, None);
        self.engine.flush().await.unwrap();
        (end, finished)
    }

    async fn check(&self, events: Vec<StreamEvent>, ending: Ending) -> Result<(), TestCaseError> {
        let call_ids: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolInputStart { call_id, .. } => Some(call_id.clone()),
                StreamEvent::ToolCall(call) => Some(call.call_id.clone()),
                _ => None,
            })
            .collect();
        let (end, finished) = self.attempt(events, ending).await;
        let message_id = finished.message.id.clone();
        match (&end, ending) {
            (AttemptEnd::Aborted, Ending::Abort) | (AttemptEnd::Failed(_), Ending::Error) => {}
            (AttemptEnd::Halted(_), _) => {} // a doom loop the Deny policy refused
            (AttemptEnd::Finished, Ending::Normal) => {}
            (end, ending) => prop_assert!(false, "{ending:?} ended as {end:?}"),
        }

        // In memory: every call once, terminal; nothing open.
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for part in &finished.parts {
            match &part.kind {
                PartKind::Tool(tool) => {
                    *seen.entry(tool.call_id.as_str()).or_default() += 1;
                    prop_assert!(tool.state.is_terminal(), "{} left {}", tool.call_id, tool.state.status());
                }
                PartKind::Text(text) => prop_assert!(text.time.end.is_some(), "open text {:?}", text.text),
                PartKind::Reasoning(r) => prop_assert!(r.time.end.is_some(), "open reasoning {:?}", r.text),
                _ => {}
            }
        }
        for (id, parts) in &seen {
            prop_assert!(call_ids.iter().any(|c| c == id), "a part for call {} nobody made", id);
            prop_assert_eq!(*parts, 1, "call {} has {} parts", id, parts);
        }
        // A halt (the doom-loop guard, refused) stops reading the stream: later calls never arrive.
        if !matches!(end, AttemptEnd::Halted(_)) {
            for id in &call_ids {
                prop_assert_eq!(seen.get(id.as_str()).copied(), Some(1), "call {} needs one part", id);
            }
        }
        prop_assert!(finished.message.time.completed.is_some());

        // On disk: exactly what the processor holds.
        let stored = self.engine.store().get_message(&message_id).unwrap().expect("the message is stored");
        prop_assert_eq!(&stored.parts, &finished.parts);
        Ok(())
    }
}

#[test]
fn any_event_sequence_ends_with_every_tool_call_terminal_exactly_once() {
    let cases = std::env::var("CODELOOP_PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(48);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let fixture = runtime.block_on(Fixture::new());
    let mut runner =
        TestRunner::new(ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() });
    let result = runner.run(&case(), |(events, ending)| runtime.block_on(fixture.check(events, ending)));
    if let Err(error) = result {
        panic!("{error}");
    }
}

fn bash_call(call_id: &str, command: &str) -> StreamEvent {
    StreamEvent::ToolCall(ToolCall {
        call_id: call_id.into(),
        name: "bash".into(),
        input: Ok(json!({ "command": command })),
        metadata: None,
    })
}

#[test]

fn a_repeated_call_event_while_the_call_runs_does_not_run_it_twice() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let fixture = runtime.block_on(Fixture::new());
    // Each execution logs as it starts; the first takes 0.3 s, long after the repeat arrived.
    let command = "echo ran >> log.txt; sleep 0.3";
    let events = vec![
        StreamEvent::StartStep,
        bash_call("call_1", command),
        bash_call("call_1", command),
        StreamEvent::FinishStep { finish: Finish::ToolCalls, raw_finish: None, usage: None },
        StreamEvent::Finish,
    ];
    let (end, _) = runtime.block_on(fixture.attempt(events, Ending::Normal));
    assert!(matches!(end, AttemptEnd::Finished), "{end:?}");
    let log = std::fs::read_to_string(fixture.project.path().join("log.txt")).unwrap();
    assert_eq!(log, "ran\n", "the command ran once per call");
}
