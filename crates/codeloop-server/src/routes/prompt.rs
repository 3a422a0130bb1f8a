//! Message and run routes: paged history, one message, prompt (blocking and async), abort, compact.
//!
//! Owns: validating prompt bodies and shaping run outcomes as `{info, parts, stop}`.
//! Must not: sequence runs or validate commands — each request becomes a `SessionCommand`, which the
//! engine checks and carries out (whether a prompt starts, joins (steer) or waits for (queue) a run).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use codeloop_core::{CommandOutcome, Engine, SessionCommand};
use codeloop_types::{
    AssistantError, EventPayload, Message, MessageId, MessageWithParts, Page, Session, SessionId,
};

use crate::AppState;
use crate::api::{
    Aborted, CommandBody, CompactQuery, MessageListQuery, PromptBody, PromptResult, RevertBody, Stop,
};
use crate::error::{ApiError, ApiJson, ApiPath, ApiQuery};
use crate::routes::session::{load, session_id};

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
    if query.max_parts == Some(0) {
        return Err(ApiError::invalid("max_parts must be at least 1 (leave it out for no bound)"));
    }
    let before = query.before.filter(|b| !b.is_empty()).map(MessageId::from);
    let page = Page { before, limit, max_parts: query.max_parts };
    Ok(Json(state.engine.messages(&session.id, page).await?))
}

pub async fn message(
    State(state): State<AppState>,
    ApiPath((id, message_id)): ApiPath<(String, String)>,
) -> Result<Json<MessageWithParts>, ApiError> {
    let session = load(&state.engine, &id).await?;
    match state.engine.message(&session.id, &MessageId::from(message_id.as_str())).await? {
        Some(message) => Ok(Json(message)),
        None => Err(ApiError::not_found(format!("message {message_id} not found in session {id}"))),
    }
}

/// The command a prompt body asks for (the engine validates it).
fn prompt_command(id: &str, body: &PromptBody) -> Result<SessionCommand, ApiError> {
    let (input, delivery) = body.to_input().map_err(ApiError::invalid)?;
    Ok(SessionCommand::Prompt { session: session_id(id)?, input, delivery })
}

/// `{info, parts, stop}` of a finished run.
async fn result(engine: &Engine, outcome: CommandOutcome) -> Result<Json<PromptResult>, ApiError> {
    let Some(outcome) = outcome.into_run() else {
        return Err(ApiError::internal("the command did not run the session"));
    };
    let stop = Stop::from(&outcome.stop);
    let Some(message) = outcome.message else {
        return Ok(Json(PromptResult { info: None, parts: Vec::new(), stop }));
    };
    let parts = engine.message(&outcome.session_id, &message.id).await?.map(|m| m.parts).unwrap_or_default();
    Ok(Json(PromptResult { info: Some(Message::Assistant(message)), parts, stop }))
}

pub async fn prompt(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<Json<PromptResult>, ApiError> {
    let outcome = state.engine.submit(prompt_command(&id, &body)?).await?;
    result(&state.engine, outcome).await
}

pub async fn prompt_async(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<PromptBody>,
) -> Result<StatusCode, ApiError> {
    let command = prompt_command(&id, &body)?;
    // Refused before the 202 for the same reasons `prompt` refuses (the engine's one check). Stops
    // with an error are published by the run itself; a prompt refused when it came to run (busy
    // lock, storage) is reported by `accept`.
    accept(&state, &id, command).await
}

/// `POST /session/{id}/command`: checked like `prompt_async` (an unknown command is refused before
/// the 202), then run in the background; its failures arrive as `session.error`.
pub async fn command(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<CommandBody>,
) -> Result<StatusCode, ApiError> {
    let delivery = match body.delivery {
        Some(crate::api::DeliveryMode::Queue) => codeloop_core::Delivery::Queue,
        _ => codeloop_core::Delivery::Steer,
    };
    let effort = body
        .effort
        .as_deref()
        .map(str::parse::<codeloop_types::Effort>)
        .transpose()
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let command = SessionCommand::RunCommand {
        session: session_id(&id)?,
        name: body.command.clone(),
        arguments: body.arguments.joined(),
        delivery,
        effort,
    };
    accept(&state, &id, command).await
}

/// Validates `command`, answers 202 and carries it out in the background.
async fn accept(state: &AppState, id: &str, command: SessionCommand) -> Result<StatusCode, ApiError> {
    // The 202 comes once the input is stored, so a worker that dies afterwards cannot lose it.
    let running = state.engine.accept(command).await?;
    let engine = state.engine.clone();
    let session = SessionId::from(id);
    tokio::spawn(async move {
        // Stops with an error are published by the run itself; a prompt refused when it came to run
        // (busy lock, storage) is reported here.
        let error = match running.await {
            Ok(Err(error)) => error.to_string(),
            Err(join) => format!("the prompt's run failed: {join}"),
            Ok(Ok(_)) => return,
        };
        engine.bus().publish(EventPayload::SessionError {
            session_id: Some(session),
            error: AssistantError::Unknown { message: error },
        });
    });
    Ok(StatusCode::ACCEPTED)
}

pub async fn abort(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Aborted>, ApiError> {
    let outcome = state.engine.submit(SessionCommand::Abort { session: session_id(&id)? }).await?;
    Ok(Json(Aborted { aborted: matches!(outcome, CommandOutcome::Aborted(true)) }))
}

pub async fn revert(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<RevertBody>,
) -> Result<Json<Session>, ApiError> {
    let message = MessageId::from(body.message_id.as_str());
    let command = SessionCommand::Revert { session: session_id(&id)?, message };
    session_of(state.engine.submit(command).await?)
}

pub async fn unrevert(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Session>, ApiError> {
    session_of(state.engine.submit(SessionCommand::Unrevert { session: session_id(&id)? }).await?)
}

fn session_of(outcome: CommandOutcome) -> Result<Json<Session>, ApiError> {
    match outcome {
        CommandOutcome::Session(session) => Ok(Json(session)),
        _ => Err(ApiError::internal("the command did not change the session")),
    }
}

pub async fn compact(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(query): ApiQuery<CompactQuery>,
) -> Result<Json<PromptResult>, ApiError> {
    let command = SessionCommand::Compact { session: session_id(&id)?, focus: query.focus };
    let outcome = state.engine.submit(command).await?;
    result(&state.engine, outcome).await
}
