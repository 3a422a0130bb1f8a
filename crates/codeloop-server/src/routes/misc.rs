//! Health, permission requests and replies, configuration, agents and model catalogue (read-only).
//!
//! Owns: the redaction of `GET /config`: header values, credentials in URLs and any string under a
//! secret-sounding key are replaced, so a client never sees a secret even if one was put in a config file.
//! Must not: decide permissions (the engine's permission service does).

use axum::Json;
use axum::extract::State;
use codeloop_core::SessionCommand;
use codeloop_core::models::catalogue;
use codeloop_types::{
    ElicitationAction, ElicitationId, ElicitationReply, ElicitationRequest, PermissionId, PermissionRequest,
    QuestionId, QuestionRequest, SessionId,
};
use serde_json::Value;

use crate::AppState;
use crate::api::{
    AgentEntry, ElicitationReplyBody, Health, ModelCost, ModelEntry, ModelLimit, PermissionReplyBody,
    QuestionReplyBody, SessionQuery,
};
use crate::error::{ApiError, ApiJson, ApiPath, ApiQuery};

const REDACTED: &str = "[redacted]";

/// `GET /metrics`: what this server's runs added up to since it started, and the store's queue and
/// leases. A store that cannot be read leaves those out (the scrape still answers).
pub async fn metrics(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    let mut text = state.metrics.render();
    match state.engine.scale_figures().await {
        Ok(figures) => codeloop_telemetry::render_scale(&mut text, &figures),
        Err(error) => tracing::warn!(%error, "metrics: cannot read the queue and lease figures"),
    }
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

pub async fn health() -> Json<Health> {
    Json(Health { healthy: true, version: env!("CARGO_PKG_VERSION").to_owned() })
}

pub async fn permissions(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SessionQuery>,
) -> Json<Vec<PermissionRequest>> {
    let session = query.session.filter(|s| !s.is_empty()).map(SessionId::from);
    Json(state.engine.pending_permissions(session.as_ref()))
}

pub async fn reply_permission(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PermissionReplyBody>,
) -> Result<Json<bool>, ApiError> {
    let command = SessionCommand::AnswerPermission {
        request: PermissionId::from(id.as_str()),
        answer: body.to_answer(),
    };
    state.engine.submit(command).await?;
    Ok(Json(true))
}

pub async fn questions(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SessionQuery>,
) -> Json<Vec<QuestionRequest>> {
    let session = query.session.filter(|s| !s.is_empty()).map(SessionId::from);
    Json(state.engine.pending_questions(session.as_ref()))
}

pub async fn reply_question(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<QuestionReplyBody>,
) -> Result<Json<bool>, ApiError> {
    let command = SessionCommand::AnswerQuestion {
        request: QuestionId::from(id.as_str()),
        answers: Some(body.answers),
    };
    state.engine.submit(command).await?;
    Ok(Json(true))
}

pub async fn reject_question(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<bool>, ApiError> {
    let command = SessionCommand::AnswerQuestion { request: QuestionId::from(id.as_str()), answers: None };
    state.engine.submit(command).await?;
    Ok(Json(true))
}

pub async fn elicitations(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<ElicitationRequest>>, ApiError> {
    Ok(Json(state.engine.pending_elicitations(&super::session::session_id(&id)?)))
}

pub async fn reply_elicitation(
    State(state): State<AppState>,
    ApiPath((id, eid)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ElicitationReplyBody>,
) -> Result<Json<bool>, ApiError> {
    let action = match body.action.as_str() {
        "accept" => ElicitationAction::Accept,
        "decline" => ElicitationAction::Decline,
        "cancel" => ElicitationAction::Cancel,
        other => {
            return Err(ApiError::invalid(format!(
                "unknown action {other:?}: use accept (with content), decline or cancel"
            )));
        }
    };
    if body.content.as_ref().is_some_and(|c| !c.is_object()) {
        return Err(ApiError::invalid("content must be an object of the requested fields"));
    }
    let reply = ElicitationReply { action, content: body.content };
    state
        .engine
        .answer_elicitation(&super::session::session_id(&id)?, &ElicitationId::from(eid.as_str()), reply)
        .map_err(|e| ApiError::not_found(e.to_string()))?;
    Ok(Json(true))
}

pub async fn config(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut value = serde_json::to_value(state.engine.config())
        .map_err(|e| ApiError::internal(format!("cannot serialise the configuration: {e}")))?;
    redact(&mut value, None);
    Ok(Json(value))
}

/// The primary agents (those a person may choose; subagents run only through the task tool).
pub async fn agents(State(state): State<AppState>) -> Json<Vec<AgentEntry>> {
    let entries = state
        .engine
        .agents()
        .into_iter()
        .map(|agent| AgentEntry { name: agent.name, description: agent.description, default: agent.default })
        .collect();
    Json(entries)
}

/// `GET /command?directory=`: the commands a client may offer for a project directory.
pub async fn commands(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<crate::api::DirectoryQuery>,
) -> Result<Json<Vec<crate::api::CommandEntry>>, ApiError> {
    let directory = match query.directory.as_deref().filter(|d| !d.is_empty()) {
        Some(dir) => state.options.directory.join(dir),
        None => state.options.directory.clone(),
    };
    if !directory.is_dir() {
        return Err(ApiError::invalid(format!("directory {} does not exist", directory.display())));
    }
    let entries = state
        .engine
        .commands(&directory)
        .await
        .into_iter()
        .map(|c| crate::api::CommandEntry {
            name: c.name,
            description: c.description,
            argument_hint: c.argument_hint,
            source: serde_json::to_value(c.source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        })
        .collect();
    Ok(Json(entries))
}

/// `GET /project?directory=`: what the project brings (hooks, MCP servers, agents, rules that widen …)
/// and how far it is trusted (DESIGN.md §5k); `trust: "none"` for a project without config of its own.
pub async fn project(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<crate::api::DirectoryQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let directory = match query.directory.as_deref().filter(|d| !d.is_empty()) {
        Some(dir) => state.options.directory.join(dir),
        None => state.options.directory.clone(),
    };
    if !directory.is_dir() {
        return Err(ApiError::invalid(format!("directory {} does not exist", directory.display())));
    }
    let report = state.engine.project_report(&directory).await?;
    Ok(Json(match report {
        Some(report) => serde_json::to_value(report).unwrap_or_default(),
        None => serde_json::json!({
            "root": directory.display().to_string(), "trust": "none", "files": [], "brings": [], "notes": []
        }),
    }))
}

/// One agent a person may pick, or the engine's refusal (the one agent rule).
pub async fn agent(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<AgentEntry>, ApiError> {
    state.engine.check_agent(&name)?;
    let agent = state.engine.agents().into_iter().find(|a| a.name == name);
    let agent = agent.ok_or_else(|| ApiError::not_found(format!("agent {name} not found")))?;
    Ok(Json(AgentEntry { name: agent.name, description: agent.description, default: agent.default }))
}

pub async fn models(State(state): State<AppState>) -> Json<Vec<ModelEntry>> {
    let entries = catalogue(state.engine.config())
        .into_iter()
        .map(|entry| ModelEntry {
            id: entry.reference.to_string(),
            provider_id: entry.reference.provider_id.clone(),
            model_id: entry.reference.model_id.clone(),
            limit: ModelLimit {
                context: entry.limits.context,
                input: entry.limits.input,
                output: entry.limits.output,
            },
            cost: ModelCost {
                input: entry.pricing.input,
                output: entry.pricing.output,
                cache_read: entry.pricing.cache_read,
                cache_write: entry.pricing.cache_write,
            },
        })
        .collect();
    Json(entries)
}

/// Whether a string under this key may be a secret. `*_env` keys name environment variables.
fn secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    !key.ends_with("_env")
        && ["key", "token", "secret", "password", "authorization", "credential"]
            .iter()
            .any(|w| key.contains(w))
}

/// Replaces secrets in place: every value under `headers`, any string under a secret-sounding key,
/// and the user-info part of URLs.
fn redact(value: &mut Value, key: Option<&str>) {
    match value {
        Value::Object(map) => {
            for (name, child) in map.iter_mut() {
                if name == "headers" {
                    if let Value::Object(headers) = child {
                        headers.values_mut().for_each(|v| *v = Value::String(REDACTED.into()));
                    }
                    continue;
                }
                redact(child, Some(name));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| redact(item, key)),
        Value::String(text) => {
            if key.is_some_and(secret_key) {
                *text = REDACTED.into();
            } else if let Some(clean) = strip_userinfo(text) {
                *text = clean;
            }
        }
        _ => {}
    }
}

/// `https://user:pass@host/…` → `https://[redacted]@host/…`; `None` when there is no user-info.
fn strip_userinfo(text: &str) -> Option<String> {
    let (scheme, rest) = text.split_once("://")?;
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (_, host) = rest[..authority_end].rsplit_once('@')?;
    Some(format!("{scheme}://{REDACTED}@{host}{}", &rest[authority_end..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted() {
        let mut config = json!({
            "provider": {"x": {
                "api_key_env": "X_API_KEY",
                "base_url": "https://user:hunter2@api.example.com/v1",
                "headers": {"Authorization": "Bearer sk-live"},
                "api_key": "sk-live",
            }},
            "compaction": {"reserved_tokens": 100},
        });
        redact(&mut config, None);
        assert_eq!(
            config,
            json!({
                "provider": {"x": {
                    "api_key_env": "X_API_KEY",
                    "base_url": "https://[redacted]@api.example.com/v1",
                    "headers": {"Authorization": REDACTED},
                    "api_key": REDACTED,
                }},
                "compaction": {"reserved_tokens": 100},
            })
        );
    }
}
