//! The invariants every fault must leave intact: stored history with every tool call settled exactly
//! once and nothing left open, and requests that pair every tool call with exactly one result.

use std::collections::HashMap;

use codeloop_store::MessageWithParts;
use codeloop_types::{Message, PartKind};
use serde_json::Value;

/// Every tool call in stored history is terminal (completed or error) and appears once in its message;
/// no text or reasoning is left open; every assistant message is completed.
pub fn assert_settled(history: &[MessageWithParts]) {
    for message in history {
        let mut calls: HashMap<&str, usize> = HashMap::new();
        if let Message::Assistant(info) = &message.info {
            assert!(info.time.completed.is_some(), "assistant message {} was left open", info.id);
        }
        for part in &message.parts {
            match &part.kind {
                PartKind::Tool(tool) => {
                    assert!(
                        tool.state.is_terminal(),
                        "tool call {} ({}) left {}",
                        tool.call_id,
                        tool.tool,
                        tool.state.status()
                    );
                    // A failed attempt's cut call is kept but hidden; its retry may reuse the id.
                    if !tool.ignored {
                        *calls.entry(tool.call_id.as_str()).or_default() += 1;
                    }
                }
                PartKind::Text(text) if message.info.as_assistant().is_some() => {
                    assert!(text.time.end.is_some(), "text part {} left open: {:?}", part.id, text.text);
                }
                PartKind::Reasoning(reasoning) => {
                    assert!(reasoning.time.end.is_some(), "reasoning part {} left open", part.id);
                }
                _ => {}
            }
        }
        let repeated: Vec<_> = calls.iter().filter(|(_, n)| **n > 1).collect();
        assert!(repeated.is_empty(), "call ids stored more than once in {}: {repeated:?}", message.info.id());
    }
}

/// In every request body, each assistant tool call is answered by exactly one `role: tool` message
/// right after its assistant message, and every tool message answers a call.
pub fn assert_paired(bodies: &[Value]) {
    for (n, body) in bodies.iter().enumerate() {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let mut i = 0;
        while i < messages.len() {
            let message = &messages[i];
            i += 1;
            if message["role"] == "tool" {
                panic!("request {n}: tool result without a call before it: {message}");
            }
            let Some(calls) = message["tool_calls"].as_array() else { continue };
            let mut expected: HashMap<String, usize> = HashMap::new();
            for call in calls {
                *expected.entry(call["id"].as_str().unwrap_or_default().to_owned()).or_default() += 1;
            }
            assert!(expected.values().all(|n| *n == 1), "request {n}: a call id repeats: {calls:?}");
            let mut answered: HashMap<String, usize> = HashMap::new();
            while i < messages.len() && messages[i]["role"] == "tool" {
                let id = messages[i]["tool_call_id"].as_str().unwrap_or_default().to_owned();
                assert!(expected.contains_key(&id), "request {n}: result for unknown call {id}");
                *answered.entry(id).or_default() += 1;
                i += 1;
            }
            for id in expected.keys() {
                assert_eq!(answered.get(id), Some(&1), "request {n}: call {id} needs exactly one result");
            }
        }
    }
}

/// Both invariants at once.
pub fn assert_consistent(history: &[MessageWithParts], bodies: &[Value]) {
    assert_settled(history);
    assert_paired(bodies);
}

/// The `role: tool` results of a request, as `(call id, content)`.
pub fn tool_results(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (m["tool_call_id"].as_str().unwrap_or_default().to_owned(), content)
        })
        .collect()
}

/// Every tool call id in a request's assistant messages, in order.
pub fn tool_call_ids(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .map(|c| c["id"].as_str().unwrap_or_default().to_owned())
        .collect()
}
