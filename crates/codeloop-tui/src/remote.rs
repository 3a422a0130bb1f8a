//! The attached client (`--attach URL`): a running `codeloop serve` over its HTTP API, with the
//! `GET /event` SSE stream as the event feed. A dropped stream reconnects with `Last-Event-ID`, so
//! nothing is missed; when the server cannot replay, the feed says `Resync` and the UI reloads.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use codeloop_types::{
    Event, MessageId, ModelRef, PermissionId, PermissionReply, PermissionRequest, QuestionId,
    QuestionRequest, Session, SessionId,
};
use codeloop_types::{MessageWithParts, Page};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::client::{Client, Incoming, PermissionAnswer, Prompt, read_pages};
use crate::http::{ServerHttp, SseStream};

/// Environment variable holding the server token (as `codeloop run --attach`).
pub const TOKEN_ENV: &str = "CODELOOP_SERVER_TOKEN";
const FEED_CAPACITY: usize = 4096;
/// Messages asked for per page when loading a session.
const PAGE: usize = 1000;
/// Reconnection attempts of the event stream before the feed gives up (one per second).
const RECONNECTS: u32 = 60;

#[derive(Clone)]
pub struct RemoteClient {
    http: ServerHttp,
}

impl RemoteClient {
    /// `url` is the server's base URL; `token` its bearer token, if it needs one.
    pub fn new(url: &str, token: Option<&str>) -> anyhow::Result<RemoteClient> {
        Ok(RemoteClient { http: ServerHttp::new(url, token, TOKEN_ENV)? })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.http.get(path, &[]).await
    }

    async fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> anyhow::Result<T> {
        self.http.post(path, body).await
    }

    /// Opens `/event` (resuming after `last`), returning once `server.connected` arrived.
    async fn connect(&self, last: Option<u64>) -> anyhow::Result<SseStream> {
        let mut stream = self.http.events(&[], last).await?;
        loop {
            match stream.next().await {
                Some(Ok(message))
                    if message.event == "server.connected" || is_type(&message.data, "server.connected") =>
                {
                    return Ok(stream);
                }
                Some(Ok(_)) => {}
                _ => anyhow::bail!("the server closed the event stream"),
            }
        }
    }
}

fn is_type(data: &str, kind: &str) -> bool {
    serde_json::from_str::<Value>(data).is_ok_and(|v| v["type"] == kind)
}

/// Reads one stream until it ends; returns the id of the last event seen.
async fn pump(mut stream: SseStream, tx: &mpsc::Sender<Incoming>, mut last: Option<u64>) -> Option<u64> {
    while let Some(Ok(message)) = stream.next().await {
        let Ok(data) = serde_json::from_str::<Value>(&message.data) else { continue };
        let incoming = if data["type"] == "resync" {
            Incoming::Resync
        } else {
            match serde_json::from_value::<Event>(data) {
                Ok(event) => {
                    last = Some(event.id);
                    Incoming::Event(Arc::new(event))
                }
                // Control events (heartbeats), or a type from a newer server.
                Err(_) => continue,
            }
        };
        if tx.send(incoming).await.is_err() {
            return last;
        }
    }
    last
}

#[async_trait]
impl Client for RemoteClient {
    async fn subscribe(&self) -> anyhow::Result<mpsc::Receiver<Incoming>> {
        let first = self.connect(None).await?;
        let (tx, rx) = mpsc::channel(FEED_CAPACITY);
        let client = self.clone();
        tokio::spawn(async move {
            let mut last = pump(first, &tx, None).await;
            let mut failures = 0;
            while !tx.is_closed() {
                tokio::time::sleep(Duration::from_secs(1)).await;
                match client.connect(last).await {
                    Ok(stream) => {
                        failures = 0;
                        last = pump(stream, &tx, last).await;
                    }
                    Err(e) => {
                        failures += 1;
                        if failures >= RECONNECTS {
                            let _ = tx.send(Incoming::Closed(format!("{e:#}"))).await;
                            return;
                        }
                    }
                }
            }
        });
        Ok(rx)
    }

    async fn session(&self, id: &SessionId) -> anyhow::Result<Session> {
        self.get(&format!("/session/{id}")).await
    }

    async fn sessions(&self, directory: &Path) -> anyhow::Result<Vec<Session>> {
        let directory = directory.display().to_string();
        self.http.get("/session", &[("directory", directory.as_str()), ("roots", "true")]).await
    }

    async fn create_session(
        &self,
        directory: &Path,
        agent: Option<&str>,
        model: Option<&ModelRef>,
    ) -> anyhow::Result<Session> {
        let body = json!({
            "directory": directory.display().to_string(),
            "agent": agent,
            "model": model.map(ToString::to_string),
        });
        self.post("/session", &body).await
    }

    async fn delete_session(&self, id: &SessionId) -> anyhow::Result<()> {
        self.http.delete::<Value>(&format!("/session/{id}")).await?;
        Ok(())
    }

    async fn history(&self, id: &SessionId) -> anyhow::Result<Vec<MessageWithParts>> {
        let fetch = |page: Page| async move { self.history_page(id, page).await };
        read_pages(Page { limit: PAGE, ..Page::default() }, fetch, |m| m, |m| m.info.id()).await
    }

    async fn history_page(&self, id: &SessionId, page: Page) -> anyhow::Result<Vec<MessageWithParts>> {
        let (limit, max_parts) = (page.limit.to_string(), page.max_parts.map(|n| n.to_string()));
        let mut params = vec![("limit", limit.as_str())];
        if let Some(before) = &page.before {
            params.push(("before", before.as_str()));
        }
        if let Some(max_parts) = &max_parts {
            params.push(("max_parts", max_parts.as_str()));
        }
        self.http.get(&format!("/session/{id}/message"), &params).await
    }

    async fn prompt(&self, id: &SessionId, prompt: Prompt) -> anyhow::Result<()> {
        let body = json!({
            "parts": [{"type": "text", "text": prompt.text}],
            "model": prompt.model.map(|m| m.to_string()),
            "agent": prompt.agent,
            "effort": prompt.effort.map(|e| e.as_str()),
            "delivery": "queue",
        });
        self.post::<Value>(&format!("/session/{id}/prompt_async"), &body).await?;
        Ok(())
    }

    async fn commands(&self, directory: &Path) -> Vec<crate::client::CommandEntry> {
        let path = format!("/command?directory={}", url_encode(&directory.display().to_string()));
        let listed: Vec<Value> = self.get(&path).await.unwrap_or_default();
        listed
            .iter()
            .filter_map(|c| {
                Some(crate::client::CommandEntry {
                    name: c["name"].as_str()?.to_owned(),
                    description: c["description"].as_str().map(str::to_owned),
                    hint: c["argument_hint"].as_str().map(str::to_owned),
                })
            })
            .collect()
    }

    async fn run_command(
        &self,
        id: &SessionId,
        name: &str,
        arguments: &str,
        effort: Option<codeloop_types::Effort>,
    ) -> anyhow::Result<()> {
        let body = json!({
            "command": name,
            "arguments": arguments,
            "delivery": "queue",
            "effort": effort.map(|e| e.as_str()),
        });
        self.post::<Value>(&format!("/session/{id}/command"), &body).await?;
        Ok(())
    }

    async fn abort(&self, id: &SessionId) -> anyhow::Result<()> {
        self.post::<Value>(&format!("/session/{id}/abort"), &json!({})).await?;
        Ok(())
    }

    async fn compact(&self, id: &SessionId, focus: Option<String>) -> anyhow::Result<()> {
        let path = match focus {
            Some(focus) => {
                let encoded: String = url_encode(&focus);
                format!("/session/{id}/compact?focus={encoded}")
            }
            None => format!("/session/{id}/compact"),
        };
        self.post::<Value>(&path, &json!({})).await?;
        Ok(())
    }

    async fn revert(&self, id: &SessionId, message: &MessageId) -> anyhow::Result<Session> {
        self.post(&format!("/session/{id}/revert"), &json!({"message_id": message})).await
    }

    async fn unrevert(&self, id: &SessionId) -> anyhow::Result<Session> {
        self.post(&format!("/session/{id}/unrevert"), &json!({})).await
    }

    async fn reply_permission(&self, id: &PermissionId, answer: PermissionAnswer) -> anyhow::Result<()> {
        let reply = match answer.reply {
            PermissionReply::Once => "once",
            PermissionReply::Always => "always",
            PermissionReply::Reject => "reject",
        };
        let body = json!({"reply": reply, "message": answer.message});
        self.post::<Value>(&format!("/permission/{id}/reply"), &body).await?;
        Ok(())
    }

    async fn reply_question(&self, id: &QuestionId, answers: Vec<Vec<String>>) -> anyhow::Result<()> {
        self.post::<Value>(&format!("/question/{id}/reply"), &json!({"answers": answers})).await?;
        Ok(())
    }

    async fn pending_elicitations(
        &self,
        id: &SessionId,
    ) -> anyhow::Result<Vec<codeloop_types::ElicitationRequest>> {
        self.get(&format!("/session/{id}/elicitation")).await
    }

    async fn answer_elicitation(
        &self,
        session: &SessionId,
        id: &codeloop_types::ElicitationId,
        reply: codeloop_types::ElicitationReply,
    ) -> anyhow::Result<()> {
        self.post::<Value>(&format!("/session/{session}/elicitation/{id}"), &serde_json::to_value(&reply)?)
            .await?;
        Ok(())
    }

    async fn reject_question(&self, id: &QuestionId) -> anyhow::Result<()> {
        self.post::<Value>(&format!("/question/{id}/reject"), &json!({})).await?;
        Ok(())
    }

    async fn pending(
        &self,
        id: &SessionId,
    ) -> anyhow::Result<(Vec<PermissionRequest>, Vec<QuestionRequest>)> {
        let permissions = self.get(&format!("/permission?session={id}")).await?;
        let questions = self.get(&format!("/question?session={id}")).await?;
        Ok((permissions, questions))
    }

    async fn status(&self, id: &SessionId) -> codeloop_types::SessionStatus {
        let statuses: std::collections::HashMap<String, codeloop_types::SessionStatus> =
            self.get("/session/status").await.unwrap_or_default();
        statuses.get(id.as_str()).cloned().unwrap_or(codeloop_types::SessionStatus::Idle)
    }

    async fn context_window(&self, model: &ModelRef) -> Option<u64> {
        let models: Vec<Value> = self.get("/models").await.ok()?;
        models
            .iter()
            .find(|m| {
                m["provider_id"] == model.provider_id.as_str() && m["model_id"] == model.model_id.as_str()
            })
            .and_then(|m| m["limit"]["context"].as_u64())
    }

    async fn check_model(&self, model: Option<&ModelRef>) -> anyhow::Result<()> {
        // The server resolves its own default.
        let Some(model) = model else { return Ok(()) };
        let models: Vec<Value> = self.get("/models").await?;
        let known = models.iter().any(|m| {
            m["provider_id"] == model.provider_id.as_str() && m["model_id"] == model.model_id.as_str()
        });
        let provider = models.iter().any(|m| m["provider_id"] == model.provider_id.as_str());
        if !known && !provider {
            anyhow::bail!("the server knows no provider `{}`: see GET /models", model.provider_id);
        }
        Ok(())
    }

    async fn check_agent(&self, name: &str) -> anyhow::Result<()> {
        // The server answers with the engine's own refusal.
        self.get::<Value>(&format!("/agent/{}", url_encode(name))).await?;
        Ok(())
    }

    async fn agents(&self) -> Option<Vec<String>> {
        let agents: Vec<Value> = self.get("/agent").await.ok()?;
        Some(agents.iter().filter_map(|a| a["name"].as_str().map(str::to_owned)).collect())
    }

    async fn jobs(&self, id: &SessionId) -> anyhow::Result<Vec<codeloop_types::Job>> {
        self.get(&format!("/session/{id}/job")).await
    }

    async fn job_output(&self, id: &SessionId, job: &codeloop_types::JobId) -> anyhow::Result<String> {
        let bytes = crate::app::JOB_OUTPUT_BYTES.to_string();
        let path = format!("/session/{id}/job/{}/output", url_encode(job.as_str()));
        let answer: Value = self.http.get(&path, &[("bytes", bytes.as_str())]).await?;
        Ok(answer["output"].as_str().unwrap_or_default().to_owned())
    }

    async fn kill_job(
        &self,
        id: &SessionId,
        job: &codeloop_types::JobId,
    ) -> anyhow::Result<codeloop_types::Job> {
        self.post(&format!("/session/{id}/job/{}/kill", url_encode(job.as_str())), &json!({})).await
    }
}

/// `text` as one query value or path segment.
fn url_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}
