//! MCP prompts as commands (DESIGN.md §5g): every connected server's prompts under the command name
//! `mcp__SERVER__PROMPT`, and a prompt's messages as one user message: their text, and their images,
//! audio and binary resources as attachments of their own type (never pasted in as JSON). The commands
//! lists these next to the Markdown commands and send them, through [`crate::Engine::mcp_prompts`] and
//! [`crate::Engine::mcp_prompt`].

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use rmcp::model::GetPromptRequestParams;
use serde::Serialize;

use super::{Live, McpServers, Slot, connect};

/// An MCP prompt as a command (DESIGN.md §5g): `mcp__SERVER__PROMPT`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpPrompt {
    pub command: String,
    pub server: String,
    pub name: String,
    pub description: Option<String>,
    pub arguments: Vec<McpPromptArgument>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpPromptArgument {
    pub name: String,
    pub description: Option<String>,
    pub required: bool,
}

/// A prompt's messages as one user message: their text, and what they carry that is not text (images,
/// audio, binary resources) as attachments, each with its own type.
#[derive(Debug, Clone, PartialEq)]
pub struct McpPromptText {
    pub description: Option<String>,
    pub text: String,
    pub files: Vec<codeloop_types::FilePart>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpPromptError {
    #[error("no MCP prompt `{command}`: the MCP prompts are {available}")]
    Unknown { command: String, available: String },
    #[error("{0}")]
    Failed(String),
}

impl McpServers {
    /// The prompts of every connected server, as commands `mcp__SERVER__PROMPT` (DESIGN.md §5g; the
    /// commands module lists them next to the Markdown ones).
    pub async fn prompts(&self) -> Vec<McpPrompt> {
        self.start().await;
        let mut all = Vec::new();
        for slot in &self.inner.slots {
            let Some(live) = slot.live().filter(|l| l.prompts) else { continue };
            match prompts_of(slot, &live).await {
                Ok(prompts) => all.extend(prompts),
                Err(e) => tracing::debug!("MCP server {} lists no prompts: {e}", slot.name),
            }
        }
        all
    }

    /// A prompt's text with `arguments` filled in; `command` is `mcp__SERVER__PROMPT`.
    pub async fn prompt(
        &self,
        command: &str,
        arguments: BTreeMap<String, String>,
    ) -> Result<McpPromptText, McpPromptError> {
        let prompts = self.prompts().await;
        let Some(found) = prompts.iter().find(|p| p.command == command) else {
            let available = prompts.iter().map(|p| p.command.as_str()).collect::<Vec<_>>().join(", ");
            return Err(McpPromptError::Unknown {
                command: command.to_owned(),
                available: if available.is_empty() { "none".into() } else { available },
            });
        };
        let live =
            self.inner.slots.iter().find(|s| s.name == found.server).and_then(|s| s.live()).ok_or_else(
                || McpPromptError::Failed(format!("the MCP server {} is not connected", found.server)),
            )?;
        let mut params = GetPromptRequestParams::new(found.name.clone());
        if !arguments.is_empty() {
            params = params.with_arguments(arguments.into_iter().map(|(k, v)| (k, v.into())).collect());
        }
        let link = &live.link;
        let never = tokio_util::sync::CancellationToken::new();
        let result = link
            .request(&format!("prompt `{}`", found.name), &never, link.peer.get_prompt(params))
            .await
            .map_err(|e| McpPromptError::Failed(e.to_string()))?;
        let value = serde_json::to_value(&result).unwrap_or_default();
        let mut texts = Vec::new();
        let mut files = Vec::new();
        let messages = value.get("messages").and_then(serde_json::Value::as_array);
        for message in messages.into_iter().flatten() {
            // A message's content is one block (an array in later revisions): each keeps its type.
            let content = message.get("content").cloned().unwrap_or_default();
            let blocks = match content {
                serde_json::Value::Array(blocks) => blocks,
                block => vec![block],
            };
            for block in blocks {
                let wrapped = serde_json::json!({"content": [block]});
                let (text, attached) = super::tool::content(&wrapped);
                if !text.is_empty() {
                    texts.push(text);
                }
                files.extend(attached);
            }
        }
        Ok(McpPromptText {
            description: value.get("description").and_then(serde_json::Value::as_str).map(str::to_owned),
            text: texts.join("\n\n"),
            files,
        })
    }
}

async fn prompts_of(slot: &Slot, live: &Live) -> Result<Vec<McpPrompt>, String> {
    let mut cached = live.prompt_list.lock().await;
    let stale = slot.signals.prompts_stale.swap(false, Ordering::SeqCst);
    if let Some(prompts) = cached.as_ref().filter(|_| !stale) {
        return Ok(prompts.clone());
    }
    let link = &live.link;
    let listed = match tokio::time::timeout(link.timeout, link.peer.list_all_prompts()).await {
        Ok(Ok(listed)) => listed,
        Ok(Err(e)) => return Err(connect::describe(&e)),
        Err(_) => return Err(format!("no answer within {} ms", link.timeout.as_millis())),
    };
    let prompts: Vec<McpPrompt> = listed
        .into_iter()
        .map(|prompt| McpPrompt {
            command: format!("mcp__{}__{}", slot.name, prompt.name),
            server: slot.name.clone(),
            name: prompt.name.clone(),
            description: prompt.description.clone(),
            arguments: prompt
                .arguments
                .unwrap_or_default()
                .into_iter()
                .map(|a| McpPromptArgument {
                    name: a.name,
                    description: a.description,
                    required: a.required.unwrap_or(false),
                })
                .collect(),
        })
        .collect();
    *cached = Some(prompts.clone());
    Ok(prompts)
}
