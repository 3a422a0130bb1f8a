//! Message and run routes: paged history, one message, prompt (blocking and async), abort, compact.
//!
//! Owns: validating prompt bodies and shaping run outcomes as `{info, parts, stop}`.
//! Must not: sequence runs — the engine's coordinator decides whether a prompt starts, joins (steer) or
//! waits for (queue) a run.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use codeloop_core::{Engine, RunOutcome};
use codeloop_store::Page;
use codeloop_types::MessageWithParts;
use codeloop_types::{AssistantError, EventPayload, Message, MessageId, Session, SessionId};

use crate::AppState;
use crate::api::{Aborted, MessageListQuery, PromptBody, PromptResult, RevertBody, Stop};
use crate::error::{ApiError, ApiJson, ApiPath, ApiQuery, blocking};
use crate::routes::session::load;

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

pub async fn messages(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<MessageListQuery>,
) -> Result<Json<Vec<MessageWithParts>>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::invalid(format!("limit must be between 1 and {MAX_PAGE}")));
    }
    let session = load(&state.engine, &id).await?;
    let page = Page { before: query.before.filter(|b| !b.is_empty()).map(MessageId::from), limit };
    let store = state.engine.store();
    blocking(move || Ok(store.list_messages(&session.id, &page)?)).await.map(Json)
}

pub async fn message(
    State(state): State<AppState>,
    ApiPath((id, message_id)): ApiPath<(String, String)>,
) -> Result<Json<MessageWithParts>, ApiError> {
    let session = load(&state.engine, &id).await?;
    let store = state.engine.store();
    let wanted = MessageId::from(message_id.as_str());
    let found = blocking(move || Ok(store.get_message(&wanted)?)).await?;
    match found {
        Some(message) if message.info.session_id() == &session.id => Ok(Json(message)),
        _ => Err(ApiError::not_found(format!("message {message_id} not found in session {id}"))),
    }
}

/// Checks the body and the session before anything runs.
async fn validate(
    state: &AppState,
    id: &str,
    body: &PromptBody,
) -> Result<(SessionId, codeloop_core::PromptInput, codeloop_core::Delivery), ApiError> {
    let (input, delivery) = body.to_input().map_err(ApiError::invalid)?;
    if let Some(agent) = &input.agent {
        let agents = &state.engine.services().agents;
        if !agents.contains_key(agent) {
            let available: Vec<&str> = agents.keys().map(String::as_str).collect();
            return Err(ApiError::invalid(format!(
                "agent not found: \"{agent}\"; available agents: {}",
                available.join(", ")
            )));
        }
    }
    let session = load(&state.engine, id).await?;
    Ok((session.id, input, delivery))
}

/// `{info, parts, stop}` of a finished run.
async fn result(engine: &Engine, outcome: RunOutcome) -> Result<Json<PromptResult>, ApiError> {
    let stop = Stop::from(&outcome.stop);
    let Some(message) = outcome.message else {
        return Ok(Json(PromptResult { info: None, parts: Vec::new(), stop }));
    };
    let store = engine.store();
    let id = message.id.clone();
    let parts = blocking(move || Ok(store.get_message(&id)?)).await?.map(|m| m.parts).unwrap_or_default();
    Ok(Json(PromptResult { info: Some(Message::Assistant(message)), parts, stop }))
}

pub async fn prompt(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<Json<PromptResult>, ApiError> {
    let (session, input, delivery) = validate(&state, &id, &body).await?;
    let outcome = state.engine.prompt(&session, input, delivery).await?;
    result(&state.engine, outcome).await
}

pub async fn prompt_async(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<StatusCode, ApiError> {
    let (session, input, delivery) = validate(&state, &id, &body).await?;
    let engine = state.engine.clone();
    tokio::spawn(async move {
        // Stops with an error are published by the run itself; a prompt refused before any run
        // (busy lock, storage, model) is reported here.
        if let Err(error) = engine.prompt(&session, input, delivery).await {
            engine.bus().publish(EventPayload::SessionError {
                session_id: Some(session),
                error: AssistantError::Unknown { message: error.to_string() },
            });
        }
    });
    Ok(StatusCode::ACCEPTED)
}

pub async fn abort(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Aborted>, ApiError> {
    let session = load(&state.engine, &id).await?;
    let aborted = state.engine.abort(&session.id).await;
    Ok(Json(Aborted { aborted }))
}

pub async fn revert(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<RevertBody>,
) -> Result<Json<Session>, ApiError> {
    let session = load(&state.engine, &id).await?;
    let message = MessageId::from(body.message_id.as_str());
    Ok(Json(state.engine.revert(&session.id, &message).await?))
}

pub async fn unrevert(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Session>, ApiError> {
    let session = load(&state.engine, &id).await?;
    Ok(Json(state.engine.unrevert(&session.id).await?))
}

pub async fn compact(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<PromptResult>, ApiError> {
    let session = load(&state.engine, &id).await?;
    let outcome = state.engine.compact(&session.id).await?;
    result(&state.engine, outcome).await
}
