//! Tool calls written as text. A local model served without a tool-call parser (llama.cpp without
//! `--jinja`, vLLM without `--tool-call-parser`) answers with the call as plain text: a JSON object, a
//! fenced `json` block, or the `<tool_call>` block Qwen and Hermes models are trained on. Left as text,
//! the answer ends the run as if the model were done.
//!
//! Per DESIGN.md §1 the provider parses (this module: the format of the answer is a wire matter), the
//! processor records (a call recorded from text is an ordinary tool part, its metadata says so), and
//! the run loop decides (with `warn`, it tells the user what to configure). `tool_call_text = "parse"`
//! turns such an answer into calls here, in the stream, before the processor sees it.
//!
//! Must not: guess. Only an answer that is nothing but calls, each naming a tool the request offered
//! with an object of arguments, is a call; anything else stays text.

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::{EventStream, ProviderError, StreamEvent, ToolCall};
use codeloop_types::Finish;

/// What to do with an answer that is a tool call written as text (`tool_call_text` in
/// `[provider.NAME]` or `[provider.NAME.models.ID]`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum ToolCallText {
    /// Leave it text, say nothing.
    Off,
    /// Leave it text; the run loop warns once that the model wrote a call as text and what to set.
    #[default]
    Warn,
    /// Turn it into tool calls.
    Parse,
}

impl ToolCallText {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One call found in an answer's text.
#[derive(Debug, Clone, PartialEq)]
pub struct TextCall {
    pub name: String,
    pub input: Value,
}

/// Metadata on a call made from text, so the recorded part says where it came from.
pub const TEXT_CALL_METADATA: &str = "written_as_text";

/// The calls an answer makes when its whole text is nothing but calls naming offered tools: one JSON
/// object `{"name": …, "arguments": {…}}` (or `parameters`, `input`; arguments may be a JSON string),
/// several such objects one after another or in an array, bare or in a ```` ```json ```` fence, or one
/// or more `<tool_call>…</tool_call>` blocks. `None` for
/// anything else, including a call to a tool that was not offered.
pub fn text_tool_call(text: &str, offered: &[&str]) -> Option<Vec<TextCall>> {
    let text = text.trim();
    let objects: Vec<&str> = if text.starts_with(TAG_OPEN) {
        tagged_blocks(text)?
    } else if let Some(fenced) = text.strip_prefix("```") {
        vec![fenced_block(fenced)?]
    } else {
        vec![text]
    };
    let calls: Option<Vec<Vec<TextCall>>> = objects.into_iter().map(|o| calls(o, offered)).collect();
    calls.map(|calls| calls.into_iter().flatten().collect::<Vec<_>>()).filter(|calls| !calls.is_empty())
}

/// The first call written as text anywhere in `text`: a ```` ```json ```` fence or a `<tool_call>` block
/// inside other text that names an offered tool. Not a call to make (the text around it may say
/// anything), but enough to tell the user that the model tried one.
pub fn text_tool_call_inside(text: &str, offered: &[&str]) -> Option<TextCall> {
    if let Some(calls) = text_tool_call(text, offered) {
        return calls.into_iter().next();
    }
    let fenced = text.split("```").skip(1).step_by(2).filter_map(|block| {
        let (language, body) = block.split_once('\n')?;
        matches!(language.trim(), "" | "json" | "tool_call").then_some(body.trim())
    });
    let tagged = text.split(TAG_OPEN).skip(1).map(|rest| rest.split(TAG_CLOSE).next().unwrap_or(rest).trim());
    fenced.chain(tagged).find_map(|block| calls(block, offered)?.into_iter().next())
}

const TAG_OPEN: &str = "<tool_call>";
const TAG_CLOSE: &str = "</tool_call>";

/// The insides of consecutive `<tool_call>` blocks that make up all of `text` (the last one may lack
/// its closing tag: the model stopped right after the JSON).
fn tagged_blocks(mut text: &str) -> Option<Vec<&str>> {
    let mut blocks = Vec::new();
    while let Some(rest) = text.strip_prefix(TAG_OPEN) {
        match rest.find(TAG_CLOSE) {
            Some(end) => {
                blocks.push(rest[..end].trim());
                text = rest[end + TAG_CLOSE.len()..].trim_start();
            }
            None => {
                blocks.push(rest.trim());
                text = "";
            }
        }
    }
    text.is_empty().then_some(blocks)
}

/// The body of a fence that is the whole text (after its opening backticks): language `json`,
/// `tool_call` or none.
fn fenced_block(fenced: &str) -> Option<&str> {
    let (language, body) = fenced.split_once('\n')?;
    if !matches!(language.trim(), "" | "json" | "tool_call") {
        return None;
    }
    Some(body.trim_end().strip_suffix("```")?.trim())
}

/// The calls one block holds: one call object, several written one after another (a weak model writes
/// three reads in one fence, no commas), or an array of them; `None` unless every value is a call to an
/// offered tool.
fn calls(block: &str, offered: &[&str]) -> Option<Vec<TextCall>> {
    if !(block.starts_with('{') || block.starts_with('[')) {
        return None;
    }
    let mut calls = Vec::new();
    for value in serde_json::Deserializer::from_str(block).into_iter::<Value>() {
        match value.ok()? {
            Value::Array(items) => {
                for item in items {
                    calls.push(call(item, offered)?);
                }
            }
            object => calls.push(call(object, offered)?),
        }
    }
    (!calls.is_empty()).then_some(calls)
}

fn call(value: Value, offered: &[&str]) -> Option<TextCall> {
    let Value::Object(mut map) = value else { return None };
    // OpenAI's own shape, `{"function": {"name", "arguments"}}`, written out by some models.
    if let Some(Value::Object(function)) = map.remove("function") {
        map = function;
    }
    let name = map.get("name")?.as_str()?;
    let name = offered.iter().find(|tool| tool.eq_ignore_ascii_case(name))?;
    let arguments = ["arguments", "parameters", "input"].iter().find_map(|key| map.get(*key));
    let input = match arguments {
        None => Value::Object(Map::new()),
        Some(Value::Object(arguments)) => Value::Object(arguments.clone()),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(text).ok()? {
            Value::Object(arguments) => Value::Object(arguments),
            _ => return None,
        },
        Some(_) => return None,
    };
    Some(TextCall { name: (*name).to_owned(), input })
}

/// `events` with an answer that is only calls written as text turned into those calls (and its step's
/// `stop` into `tool-calls`). Text that may still become a call is held back until its end.
pub(crate) fn parse_calls(events: EventStream, offered: Vec<String>) -> EventStream {
    let mut parser = Parser { offered, held: None, converted: false };
    let items = events.map(Some).chain(futures::stream::once(async { None }));
    Box::pin(items.flat_map(move |item| futures::stream::iter(parser.on(item))))
}

type Item = Result<StreamEvent, ProviderError>;

struct Parser {
    offered: Vec<String>,
    /// A text part whose text so far could be the start of a call: its id and text.
    held: Option<(String, String)>,
    /// Held text became calls: the step finished with tool calls, whatever the server said.
    converted: bool,
}

impl Parser {
    fn on(&mut self, item: Option<Item>) -> Vec<Item> {
        let event = match item {
            None => return self.resolve(),
            Some(Err(error)) => {
                let mut out = self.release();
                out.push(Err(error));
                return out;
            }
            Some(Ok(event)) => event,
        };
        match event {
            StreamEvent::TextStart { id } if self.held.is_none() => {
                self.held = Some((id, String::new()));
                Vec::new()
            }
            StreamEvent::TextDelta { id, text } if self.holds(&id) => {
                if let Some((_, held)) = &mut self.held {
                    held.push_str(&text);
                    if !could_be_call(held) {
                        return self.release();
                    }
                }
                Vec::new()
            }
            StreamEvent::TextEnd { id } if self.holds(&id) => self.resolve(),
            StreamEvent::FinishStep { finish, raw_finish, usage } => {
                let mut out = self.resolve();
                let finish =
                    if self.converted && finish == Finish::Stop { Finish::ToolCalls } else { finish };
                out.push(Ok(StreamEvent::FinishStep { finish, raw_finish, usage }));
                out
            }
            StreamEvent::Finish => {
                let mut out = self.resolve();
                out.push(Ok(StreamEvent::Finish));
                out
            }
            other => vec![Ok(other)],
        }
    }

    fn holds(&self, id: &str) -> bool {
        self.held.as_ref().is_some_and(|(held, _)| held == id)
    }

    /// Held text cannot be a call: it goes out as text, and the rest of its part streams as usual.
    fn release(&mut self) -> Vec<Item> {
        let Some((id, text)) = self.held.take() else { return Vec::new() };
        let mut out = vec![Ok(StreamEvent::TextStart { id: id.clone() })];
        if !text.is_empty() {
            out.push(Ok(StreamEvent::TextDelta { id, text }));
        }
        out
    }

    /// The held text is complete: calls if it is nothing but calls, else the text as it came.
    fn resolve(&mut self) -> Vec<Item> {
        let Some((id, text)) = self.held.take() else { return Vec::new() };
        let offered: Vec<&str> = self.offered.iter().map(String::as_str).collect();
        let Some(calls) = text_tool_call(&text, &offered) else {
            let mut out = vec![Ok(StreamEvent::TextStart { id: id.clone() })];
            if !text.is_empty() {
                out.push(Ok(StreamEvent::TextDelta { id: id.clone(), text }));
            }
            out.push(Ok(StreamEvent::TextEnd { id }));
            return out;
        };
        self.converted = true;
        let mut out = Vec::new();
        for TextCall { name, input } in calls {
            let call_id = codeloop_types::ascending_id("call_text");
            out.push(Ok(StreamEvent::ToolInputStart { call_id: call_id.clone(), name: name.clone() }));
            out.push(Ok(StreamEvent::ToolCall(ToolCall {
                call_id,
                name,
                input: Ok(input),
                metadata: Some(json!({ TEXT_CALL_METADATA: true })),
            })));
        }
        out
    }
}

/// Whether `text` may still turn out to be a call when more of it arrives: it is empty, or starts like
/// a JSON object, a fence or a `<tool_call>` tag.
fn could_be_call(text: &str) -> bool {
    let text = text.trim_start();
    let starts = |marker: &str| text.starts_with(marker) || marker.starts_with(text);
    text.is_empty() || text.starts_with('{') || starts("```") || starts(TAG_OPEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const OFFERED: &[&str] = &["read", "bash"];

    fn read_a() -> Option<Vec<TextCall>> {
        Some(vec![TextCall { name: "read".into(), input: json!({"filePath": "a.txt"}) }])
    }

    #[test]
    fn a_whole_answer_that_is_a_call_is_one() {
        assert_eq!(
            text_tool_call(r#"{"name": "read", "arguments": {"filePath": "a.txt"}}"#, OFFERED),
            read_a()
        );
        let fenced = "```json\n{\"name\": \"read\", \"parameters\": {\"filePath\": \"a.txt\"}}\n```\n";
        assert_eq!(text_tool_call(fenced, OFFERED), read_a());
        let tagged = "<tool_call>\n{\"name\": \"read\", \"arguments\": \"{\\\"filePath\\\": \\\"a.txt\\\"}\"}\n</tool_call>";
        assert_eq!(text_tool_call(tagged, OFFERED), read_a());
        let unclosed = "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"filePath\": \"a.txt\"}}";
        assert_eq!(text_tool_call(unclosed, OFFERED), read_a());
        let openai = r#"{"function": {"name": "Read", "arguments": "{\"filePath\": \"a.txt\"}"}}"#;
        assert_eq!(text_tool_call(openai, OFFERED), read_a());
        let two = "<tool_call>{\"name\": \"read\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}</tool_call>";
        assert_eq!(text_tool_call(two, OFFERED).map(|c| c.len()), Some(2));
        // Qwen2.5-Coder 1.5B under llama.cpp, asked to read three files: three objects in one fence.
        let run_on = "```json\n{\n  \"name\": \"read\",\n  \"arguments\": {\"filePath\": \"a.txt\"}\n}\n{\n  \"name\": \"bash\",\n  \"arguments\": {\"command\": \"ls\"}\n}\n```";
        let names = |calls: Vec<TextCall>| calls.into_iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(
            text_tool_call(run_on, OFFERED).map(names),
            Some(vec!["read".to_owned(), "bash".to_owned()])
        );
        let array =
            r#"[{"name": "read", "arguments": {"filePath": "a.txt"}}, {"name": "bash", "arguments": {}}]"#;
        assert_eq!(text_tool_call(array, OFFERED).map(|c| c.len()), Some(2));
        let one_unknown = r#"{"name": "read", "arguments": {}} {"name": "rm_rf", "arguments": {}}"#;
        assert_eq!(text_tool_call(one_unknown, OFFERED), None, "every call must name an offered tool");
    }

    #[test]
    fn a_call_inside_other_text_is_found_but_is_not_an_answer_of_calls() {
        let mixed = "To see the file, I call the tool:\n```json\n{\"name\": \"read\", \"arguments\": {\"filePath\": \"a.txt\"}}\n```\nThen I fix it.";
        assert_eq!(text_tool_call(mixed, OFFERED), None);
        assert_eq!(text_tool_call_inside(mixed, OFFERED), read_a().map(|c| c[0].clone()));
        let tagged =
            "Reading.\n<tool_call>{\"name\": \"read\", \"arguments\": {\"filePath\": \"a.txt\"}}</tool_call>";
        assert_eq!(text_tool_call_inside(tagged, OFFERED), read_a().map(|c| c[0].clone()));
        assert_eq!(text_tool_call_inside("```python\nprint(1)\n```", OFFERED), None);
        assert_eq!(text_tool_call_inside("plain words", OFFERED), None);
    }

    #[test]
    fn anything_else_stays_text() {
        for text in [
            "I will read a.txt.",
            "Reading it: {\"name\": \"read\", \"arguments\": {}}",
            r#"{"name": "delete_everything", "arguments": {}}"#,
            r#"{"name": "read", "arguments": [1, 2]}"#,
            r#"{"result": "the file says hi"}"#,
            "```python\nprint(1)\n```",
            "```json\n{\"name\": \"read\", \"arguments\": {}}\n```\nThat is the call.",
            "<tool_call>{\"name\": \"read\"}</tool_call> and more",
            "",
        ] {
            assert_eq!(text_tool_call(text, OFFERED), None, "{text}");
        }
    }

    fn text(id: &str, chunks: &[&str]) -> Vec<StreamEvent> {
        let mut events = vec![StreamEvent::TextStart { id: id.into() }];
        events.extend(chunks.iter().map(|c| StreamEvent::TextDelta { id: id.into(), text: (*c).into() }));
        events.push(StreamEvent::TextEnd { id: id.into() });
        events
    }

    async fn parsed(mut events: Vec<StreamEvent>) -> Vec<StreamEvent> {
        events.push(StreamEvent::FinishStep { finish: Finish::Stop, raw_finish: None, usage: None });
        events.push(StreamEvent::Finish);
        let stream: EventStream = Box::pin(futures::stream::iter(events.into_iter().map(Ok)));
        let offered = OFFERED.iter().map(|t| t.to_string()).collect();
        parse_calls(stream, offered).map(|e| e.unwrap()).collect().await
    }

    #[tokio::test]
    async fn a_streamed_call_written_as_text_becomes_a_call_and_the_step_finishes_with_tool_calls() {
        let out = parsed(text(
            "t",
            &[
                "<tool",
                "_call>\n{\"name\": \"read\", ",
                "\"arguments\": {\"filePath\": \"a.txt\"}}\n</tool_call>",
            ],
        ))
        .await;
        let [
            StreamEvent::ToolInputStart { name, .. },
            StreamEvent::ToolCall(call),
            finish,
            StreamEvent::Finish,
        ] = out.as_slice()
        else {
            panic!("{out:?}")
        };
        assert_eq!((name.as_str(), call.name.as_str()), ("read", "read"));
        assert_eq!(call.input, Ok(json!({"filePath": "a.txt"})));
        assert_eq!(call.metadata, Some(json!({TEXT_CALL_METADATA: true})));
        assert!(matches!(finish, StreamEvent::FinishStep { finish: Finish::ToolCalls, .. }), "{finish:?}");
    }

    #[tokio::test]
    async fn prose_streams_through_as_it_comes() {
        let events = text("t", &["Hello", ", world"]);
        let out = parsed(events.clone()).await;
        assert_eq!(&out[..4], events.as_slice());
        assert!(matches!(out[4], StreamEvent::FinishStep { finish: Finish::Stop, .. }));
        // A held beginning that turns out to be prose is released in one piece.
        let out = parsed(text("t", &["{", "not json at all"])).await;
        assert_eq!(out[1], StreamEvent::TextDelta { id: "t".into(), text: "{not json at all".into() });
        assert_eq!(out[2], StreamEvent::TextEnd { id: "t".into() });
        assert!(matches!(out[3], StreamEvent::FinishStep { finish: Finish::Stop, .. }));
    }

    #[test]
    fn text_that_may_become_a_call_is_held() {
        for text in ["", "  ", "{", "{\"name\"", "`", "``", "```js", "<tool", "<tool_call>{"] {
            assert!(could_be_call(text), "{text:?}");
        }
        for text in ["I", "Here", "<think>", "`x`"] {
            assert!(!could_be_call(text), "{text:?}");
        }
    }
}

#[cfg(test)]
mod toolcalltext_text {
    use super::ToolCallText;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in ToolCallText::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
