//! Request bodies as bytes, with a per-run memo of what each message encodes to: the run loop sends the
//! whole history again at every step, and building and serialising its JSON was most of a step's cost.
//!
//! Owns: [`EncodeCache`] (the memo a run attaches to its requests), writing a body with pre-encoded
//! items spliced in, byte for byte what `serde_json::to_vec` of the whole body gives, and the runs of
//! messages that formats with alternating roles merge (so bodies from the memo and from scratch agree).
//! Must not: decide what a message encodes to (each adapter's `own_items` does), or reuse an entry for a
//! message that is not equal to the one it was encoded from, or in another context.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value};

use crate::{ChatMessage, WireApi};

/// A memo shared by the requests of one run. Cloning shares it.
///
/// An entry is reused only for a message equal to the one it was made from, at the same position and
/// for the same format, model and base URL (and in the same context: see `Memo::refresh_with`), so
/// the body is what it would be without the memo whatever changed in between (a pruned output, a
/// compaction that shifted every position, another model).
#[derive(Clone, Default)]
pub struct EncodeCache(Arc<Mutex<Memo>>);

impl EncodeCache {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Memo> {
        self.0.lock().unwrap_or_else(|poisoned| {
            // A panic while encoding may have left an entry half made: start over.
            let mut memo = poisoned.into_inner();
            *memo = Memo::default();
            memo
        })
    }
}

impl std::fmt::Debug for EncodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EncodeCache")
    }
}

/// A memo is not part of what a request says: two requests that differ only in it send the same body.
impl PartialEq for EncodeCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Whom the entries were encoded for; any other format, model or base URL starts over.
#[derive(PartialEq)]
struct Owner {
    api: WireApi,
    model: String,
    base_url: String,
}

#[derive(Default)]
pub(crate) struct Memo {
    owner: Option<Owner>,
    /// By position in the request's messages.
    entries: Vec<Entry>,
    /// How many messages were encoded, for the tests that check what a step re-encodes.
    #[cfg(test)]
    encoded: usize,
}

struct Entry {
    message: ChatMessage,
    /// What else the items were encoded under (see [`Memo::refresh_with`]).
    context: Vec<bool>,
    /// The message's own wire items, serialised.
    items: Vec<Box<str>>,
}

impl Memo {
    /// Brings the entries in line with `messages`, encoding (with `own_items`) only the messages that
    /// differ from the entry at their position.
    pub(crate) fn refresh(
        &mut self,
        owner: (WireApi, &str, &str),
        messages: &[ChatMessage],
        own_items: impl Fn(&ChatMessage) -> Vec<Value>,
    ) {
        self.refresh_with(owner, messages, |_| Vec::new(), own_items);
    }

    /// [`Memo::refresh`] for a format where what a message encodes to also depends on facts found
    /// elsewhere in the request (Gemini sends a call's id back only if a call in the request came with
    /// it): `context` states them for a message, and an entry is reused only where they are unchanged.
    pub(crate) fn refresh_with(
        &mut self,
        (api, model, base_url): (WireApi, &str, &str),
        messages: &[ChatMessage],
        context: impl Fn(&ChatMessage) -> Vec<bool>,
        own_items: impl Fn(&ChatMessage) -> Vec<Value>,
    ) {
        let owner = Owner { api, model: model.to_owned(), base_url: base_url.to_owned() };
        if self.owner.as_ref() != Some(&owner) {
            self.entries.clear();
            self.owner = Some(owner);
        }
        self.entries.truncate(messages.len());
        for (index, message) in messages.iter().enumerate() {
            let context = context(message);
            let current = |entry: &Entry| &entry.message == message && entry.context == context;
            if self.entries.get(index).is_some_and(current) {
                continue;
            }
            #[cfg(test)]
            {
                self.encoded += 1;
            }
            // `Display` is serde_json's compact serialisation, which cannot fail for a `Value`.
            let items = own_items(message).iter().map(|item| item.to_string().into_boxed_str()).collect();
            let entry = Entry { message: message.clone(), context, items };
            match self.entries.get_mut(index) {
                Some(slot) => *slot = entry,
                None => self.entries.push(entry),
            }
        }
    }

    /// The serialised items of the message at `index` (after [`Memo::refresh`] with the same messages).
    pub(crate) fn items(&self, index: usize) -> impl Iterator<Item = Cow<'_, str>> {
        self.serialised(index).map(Cow::Borrowed)
    }

    /// [`Memo::items`] as plain strings, for writing with [`write_elements`].
    pub(crate) fn serialised(&self, index: usize) -> impl Iterator<Item = &str> {
        self.entries.get(index).into_iter().flat_map(|entry| entry.items.iter().map(|item| &**item))
    }

    /// Whether the message at `index` encodes to no item at all.
    pub(crate) fn is_silent(&self, index: usize) -> bool {
        self.entries.get(index).is_none_or(|entry| entry.items.is_empty())
    }

    /// The length of every serialised item: what a body needs beside its other fields.
    pub(crate) fn size(&self) -> usize {
        self.entries.iter().flat_map(|entry| &entry.items).map(|item| item.len() + 1).sum()
    }
}

/// An item of a spliced array encoded for this request only (see [`Memo::refresh`] on `Display`).
pub(crate) fn fresh<'a>(item: Value) -> Cow<'a, str> {
    Cow::Owned(item.to_string())
}

/// Writes `body` exactly as `serde_json::to_vec` would, except that the value under `key` (a
/// placeholder, keeping the key's place in the map's order) is written as an array of `items`, each
/// already serialised.
pub(crate) fn splice(
    body: &Map<String, Value>,
    key: &str,
    items: &[Cow<'_, str>],
) -> Result<Vec<u8>, serde_json::Error> {
    let size: usize = items.iter().map(|item| item.len() + 1).sum();
    let mut out = Vec::with_capacity(size + 4096);
    write_spliced(&mut out, body, key, |out| {
        write_elements(out, items.iter().map(|item| &**item));
        Ok(())
    })?;
    Ok(out)
}

/// Writes `map` as `serde_json::to_writer` would, except that the value under `key` (a placeholder,
/// keeping the key's place in the map's order) is written as an array whose elements `elements`
/// writes, comma-separated.
pub(crate) fn write_spliced(
    out: &mut Vec<u8>,
    map: &Map<String, Value>,
    key: &str,
    elements: impl FnOnce(&mut Vec<u8>) -> Result<(), serde_json::Error>,
) -> Result<(), serde_json::Error> {
    // A map holds a key once; `Option` only tells the compiler.
    let mut elements = Some(elements);
    // serde_json's compact format: `{"k":v,"k2":v2}`, `[a,b]`, no whitespace.
    out.push(b'{');
    for (position, (name, value)) in map.iter().enumerate() {
        if position > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, name)?;
        out.push(b':');
        match elements.take_if(|_| name == key) {
            Some(elements) => {
                out.push(b'[');
                elements(out)?;
                out.push(b']');
            }
            None => serde_json::to_writer(&mut *out, value)?,
        }
    }
    out.push(b'}');
    Ok(())
}

/// The wire messages of a format whose roles must alternate (Anthropic, Gemini): each run of consecutive
/// messages of one role, as the role and the messages' range. A message that sends nothing (`silent`,
/// by index) neither starts nor breaks a run; one inside a run adds nothing to it.
pub(crate) fn runs<Role: Copy + PartialEq>(
    messages: &[ChatMessage],
    role: impl Fn(&ChatMessage) -> Role,
    silent: impl Fn(usize) -> bool,
) -> Vec<(Role, Range<usize>)> {
    let mut out: Vec<(Role, Range<usize>)> = Vec::with_capacity(messages.len());
    for (index, message) in messages.iter().enumerate() {
        if silent(index) {
            continue;
        }
        let role = role(message);
        match out.last_mut() {
            Some((last, run)) if *last == role => run.end = index + 1,
            _ => out.push((role, index..index + 1)),
        }
    }
    out
}

/// Writes already serialised elements, comma-separated.
pub(crate) fn write_elements<'a>(out: &mut Vec<u8>, elements: impl IntoIterator<Item = &'a str>) {
    for (index, element) in elements.into_iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(element.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{AssistantContent, FileContent, ProviderRequest, ToolResult, UserContent};

    fn user(text: &str) -> ChatMessage {
        ChatMessage::User(vec![UserContent::Text(text.into())])
    }

    /// A call as Gemini makes it (its id and signature kept in the metadata), after signed thinking.
    fn call(id: &str) -> ChatMessage {
        ChatMessage::Assistant(vec![
            AssistantContent::Reasoning {
                text: "Thinking.".into(),
                metadata: Some(json!({ "anthropic": { "signature": "sig" } })),
            },
            AssistantContent::Text { text: "Reading.".into(), metadata: None },
            AssistantContent::ToolCall {
                call_id: id.into(),
                name: "read".into(),
                input: json!({ "filePath": id }),
                metadata: Some(json!({ "gemini": { "id": id, "thought_signature": "sig" } })),
            },
        ])
    }

    /// The same call as another model made it: no metadata, so no thinking, id or signature goes back.
    fn foreign_call(id: &str) -> ChatMessage {
        ChatMessage::Assistant(vec![AssistantContent::ToolCall {
            call_id: id.into(),
            name: "read".into(),
            input: json!({ "filePath": id }),
            metadata: None,
        }])
    }

    /// An assistant message that Anthropic and Gemini send nothing of (unsigned thinking, trailing the
    /// call it follows), so the user messages around it share one wire message.
    fn thinking_only() -> ChatMessage {
        ChatMessage::Assistant(vec![AssistantContent::Reasoning { text: "Hmm.".into(), metadata: None }])
    }

    fn result(id: &str, output: &str, image: bool) -> ChatMessage {
        let attachments = if image {
            vec![FileContent {
                mime: "image/png".into(),
                url: "data:image/png;base64,AAAA".into(),
                filename: None,
            }]
        } else {
            Vec::new()
        };
        ChatMessage::Tool(ToolResult {
            call_id: id.into(),
            name: "read".into(),
            output: output.into(),
            is_error: false,
            attachments,
        })
    }

    /// The requests of a run whose history changes between steps: it grows (a step makes two calls at
    /// once), an earlier output is pruned, a call loses what ties it to its result, a compaction
    /// replaces the start (every position shifts), a step sends no tools, the model changes.
    fn steps() -> Vec<ProviderRequest> {
        let base = |messages: Vec<ChatMessage>| ProviderRequest {
            model: "gpt-4o".into(),
            system: vec!["Header.".into(), "Rules.".into()],
            messages,
            tools: vec![crate::ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({ "type": "object" }),
            }],
            max_output_tokens: Some(1000),
            session_id: Some("ses_1".into()),
            ..Default::default()
        };
        let mut history = vec![user("read a, b and c")];
        let mut requests = vec![base(history.clone())];
        for id in ["a", "b", "c"] {
            history.push(call(id));
            history.push(result(id, &format!("{id}\n").repeat(50), id == "b"));
            requests.push(base(history.clone()));
        }
        // Two calls in one step: their results are consecutive.
        let mut both = call("e");
        if let (ChatMessage::Assistant(parts), ChatMessage::Assistant(more)) = (&mut both, call("f")) {
            parts.extend(more);
        }
        history.push(both);
        history.push(result("e", "e\n", false));
        history.push(result("f", "f\n", false));
        requests.push(base(history.clone()));
        // Prune: the first output is cleared.
        history[2] = result("a", "[Old tool result content cleared]", false);
        history.push(thinking_only());
        history.push(user("and d"));
        requests.push(base(history.clone()));
        // The second call loses its metadata: its unchanged result is no longer sent with its id.
        history[3] = foreign_call("b");
        requests.push(base(history.clone()));
        // Compaction: a question and a summary replace everything but the last turn.
        let tail = history.split_off(history.len() - 1);
        history = vec![
            user("What did we do so far?"),
            ChatMessage::Assistant(vec![AssistantContent::Text {
                text: "Read a, b, c.".into(),
                metadata: None,
            }]),
        ];
        history.extend(tail);
        requests.push(base(history.clone()));
        // The last step: no tools, a closing instruction.
        history.push(call("d"));
        history.push(result("d", "d\n", false));
        let mut last = base(history.clone());
        last.messages.push(user("The maximum number of steps has been reached."));
        last.tools.clear();
        last.tool_choice = crate::ToolChoice::None;
        requests.push(last);
        // Another model (one that validates Gemini's signatures) answers the next prompt.
        history.push(foreign_call("g"));
        history.push(result("g", "g\n", false));
        history.push(user("again"));
        requests.push(ProviderRequest { model: "gemini-3-pro-preview".into(), ..base(history) });
        requests
    }

    #[test]
    fn memoised_bodies_equal_bodies_built_from_scratch_across_a_changing_run() {
        for api in [WireApi::OpenAiChat, WireApi::OpenAiResponses, WireApi::Anthropic, WireApi::Gemini] {
            for base_url in ["https://api.openai.com/v1", "http://127.0.0.1:8080/v1"] {
                let cache = EncodeCache::new();
                for (step, request) in steps().into_iter().enumerate() {
                    let expected = serde_json::to_vec(&api.body(&request, base_url)).unwrap();
                    let request = ProviderRequest { cache: Some(cache.clone()), ..request };
                    let memoised = api.encode(&request, base_url).unwrap();
                    assert_eq!(
                        String::from_utf8(memoised).unwrap(),
                        String::from_utf8(expected).unwrap(),
                        "{} step {step} at {base_url}",
                        api.as_str()
                    );
                }
            }
        }
    }

    #[test]
    fn a_step_encodes_only_the_messages_that_changed() {
        let cache = EncodeCache::new();
        let owner = (WireApi::OpenAiChat, "gpt-4o", "http://127.0.0.1:8080/v1");
        let encoded = std::cell::Cell::new(0);
        let own = |message: &ChatMessage| {
            encoded.set(encoded.get() + 1);
            vec![json!(format!("{message:?}"))]
        };
        let mut history = vec![user("one"), call("a"), result("a", "A", false)];
        cache.lock().refresh(owner, &history, own);
        assert_eq!(encoded.get(), 3);
        history.push(user("two"));
        history[2] = result("a", "pruned", false);
        cache.lock().refresh(owner, &history, own);
        assert_eq!(encoded.get(), 5, "the changed result and the new message");
        cache.lock().refresh((WireApi::OpenAiChat, "gpt-4.1", owner.2), &history, own);
        assert_eq!(encoded.get(), 9, "another model starts over");
    }

    #[test]
    fn each_format_encodes_only_the_messages_that_changed() {
        for api in [WireApi::OpenAiChat, WireApi::OpenAiResponses, WireApi::Anthropic, WireApi::Gemini] {
            let cache = EncodeCache::new();
            let encode = |messages: &[ChatMessage]| {
                let before = cache.lock().encoded;
                let request = ProviderRequest {
                    model: "gemini-2.5-pro".into(),
                    messages: messages.to_vec(),
                    cache: Some(cache.clone()),
                    ..Default::default()
                };
                api.encode(&request, "http://127.0.0.1:8080/v1").unwrap();
                cache.lock().encoded - before
            };
            let mut history =
                vec![user("one"), call("a"), result("a", "A", false), call("b"), result("b", "B", false)];
            assert_eq!(encode(&history), 5, "{}", api.as_str());
            assert_eq!(encode(&history), 0, "{}: the same request again", api.as_str());
            history.push(user("two"));
            history[2] = result("a", "pruned", false);
            assert_eq!(encode(&history), 2, "{}: the pruned result and the new message", api.as_str());
            history[3] = foreign_call("b");
            let (changed, why) = match api {
                WireApi::Gemini => {
                    (2, "the call that lost its metadata, and its result, now sent without its id")
                }
                _ => (1, "the call that lost its metadata"),
            };
            assert_eq!(encode(&history), changed, "{}: {why}", api.as_str());
        }
    }

    /// Not a check: how long one step of a long run takes to encode, from scratch and with the memo
    /// (`cargo test --release -p codeloop-provider --lib -- --ignored --nocapture encoding_figures`).
    #[test]
    #[ignore = "a figure, not a check; meaningful in release"]
    fn encoding_figures() {
        use std::time::{Duration, Instant};
        let fastest = |runs: usize, mut encode: Box<dyn FnMut() -> Vec<u8> + '_>| {
            (0..runs)
                .map(|_| {
                    let start = Instant::now();
                    std::hint::black_box(encode());
                    start.elapsed()
                })
                .min()
                .unwrap_or(Duration::ZERO)
        };
        let mut history = vec![user("start")];
        for n in 0..1000 {
            let id = format!("call_{n}");
            history.push(call(&id));
            history.push(result(&id, &"a line of output\n".repeat(40), false));
        }
        let base_url = "http://127.0.0.1:8080/v1";
        for api in [WireApi::OpenAiChat, WireApi::OpenAiResponses, WireApi::Anthropic, WireApi::Gemini] {
            let request = ProviderRequest {
                model: "some-model".into(),
                system: vec!["Header.".into(), "Rules.".into()],
                messages: history.clone(),
                ..Default::default()
            };
            let size = api.encode(&request, base_url).unwrap().len();
            let scratch = fastest(10, Box::new(|| api.encode(&request, base_url).unwrap()));
            let mut unfilled: Vec<_> = (0..5)
                .map(|_| ProviderRequest { cache: Some(EncodeCache::new()), ..request.clone() })
                .collect();
            let filling = fastest(
                5,
                Box::new(|| unfilled.pop().map(|r| api.encode(&r, base_url).unwrap()).unwrap_or_default()),
            );
            // The next step: the same history and one more message, with the memo the last one filled.
            let cache = EncodeCache::new();
            api.encode(&ProviderRequest { cache: Some(cache.clone()), ..request.clone() }, base_url).unwrap();
            let mut next = ProviderRequest { cache: Some(cache), ..request.clone() };
            next.messages.push(user("next"));
            let step = fastest(20, Box::new(|| api.encode(&next, base_url).unwrap()));
            println!(
                "{:>16}: {} messages, {} KB; from scratch {scratch:?}, filling the memo {filling:?}, \
                 next step with the memo {step:?}",
                api.as_str(),
                next.messages.len(),
                size / 1024,
            );
        }
    }
}
