//! Session routes: list, create, get, rename, delete, children, todo list, background jobs (list, kill),
//! active statuses.
//!
//! Owns: request validation and the calls into the engine.
//! Must not: decide what a session is allowed to do (deleting a running session, for one, is refused by
//! the engine, not here).

use std::collections::BTreeMap;
use std::path::PathBuf;

use axum::Json;
use axum::extract::State;
use codeloop_core::{CommandOutcome, Engine, SessionCommand};
use codeloop_types::SessionFilter;
use codeloop_types::{Job, JobId, Session, SessionId, SessionStatus, Todo};

use crate::AppState;
use crate::api::{CreateSession, JobOutput, JobOutputQuery, SessionListQuery, UpdateSession};
use crate::error::{ApiError, ApiJson, ApiPath, ApiQuery};

/// Longest accepted title, in characters.
const MAX_TITLE: usize = 500;

/// Longest accepted session id; generated ids are far shorter.
const MAX_ID: usize = 100;

/// A session id from a path, or 400. Ids are ASCII letters, digits, `_` and `-` (as generated): anything
/// else can name no session, and the store would reject it deep down (e.g. as a lock file name) with
/// an error that is a 500 and shows server paths.
pub fn session_id(id: &str) -> Result<SessionId, ApiError> {
    let valid = !id.is_empty()
        && id.len() <= MAX_ID
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid {
        let shown: String = id.chars().take(MAX_ID).collect();
        return Err(ApiError::invalid(format!(
            "invalid session id {shown:?}: ids are letters, digits, `_` and `-`, like ses_…"
        )));
    }
    Ok(SessionId::from(id))
}

/// The session, or 400 (malformed id) or 404.
pub async fn load(engine: &Engine, id: &str) -> Result<Session, ApiError> {
    Ok(engine.session(&session_id(id)?).await?)
}

fn title(text: &str) -> Result<String, ApiError> {
    let title = text.trim();
    if title.is_empty() {
        return Err(ApiError::invalid("title must not be empty"));
    }
    if title.chars().count() > MAX_TITLE {
        return Err(ApiError::invalid(format!("title is longer than {MAX_TITLE} characters")));
    }
    Ok(title.to_owned())
}

fn limit(limit: Option<usize>) -> Result<Option<usize>, ApiError> {
    match limit {
        Some(0) => Err(ApiError::invalid("limit must be at least 1")),
        other => Ok(other),
    }
}

pub async fn list(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SessionListQuery>,
) -> Result<Json<Vec<Session>>, ApiError> {
    let directory = query.directory.filter(|d| !d.is_empty()).map(|d| {
        let path = PathBuf::from(&d);
        path.canonicalize().map(|p| p.display().to_string()).unwrap_or(d)
    });
    let filter = SessionFilter {
        parent: None,
        include_children: !query.roots.unwrap_or(false),
        directory,
        limit: limit(query.limit)?,
    };
    Ok(Json(state.engine.sessions(filter).await?))
}

pub async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateSession>,
) -> Result<Json<Session>, ApiError> {
    let directory = match body.directory.as_deref().filter(|d| !d.is_empty()) {
        Some(dir) => state.options.directory.join(dir),
        None => state.options.directory.clone(),
    };
    if !directory.is_dir() {
        return Err(ApiError::invalid(format!("directory {} does not exist", directory.display())));
    }
    let model = body.model.as_ref().map(|m| m.to_ref()).transpose().map_err(ApiError::invalid)?;
    let title = body.title.as_deref().map(title).transpose()?;
    let parent = body.parent_id.filter(|p| !p.is_empty()).map(|p| session_id(&p)).transpose()?;
    let engine = &state.engine;
    let session = engine.create_session(&directory, body.agent.as_deref(), model, parent.as_ref()).await?;
    let session = match title {
        Some(title) => engine.rename_session(&session.id, &title).await?,
        None => session,
    };
    // Read-your-writes: a GET right after this sees the title.
    state.engine.flush().await?;
    Ok(Json(session))
}

pub async fn get(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Session>, ApiError> {
    load(&state.engine, &id).await.map(Json)
}

pub async fn update(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateSession>,
) -> Result<Json<Session>, ApiError> {
    let title = title(&body.title)?;
    let session = load(&state.engine, &id).await?;
    // Goes through the engine so a run in progress keeps the new title.
    let session = state.engine.rename_session(&session.id, &title).await?;
    state.engine.flush().await?;
    Ok(Json(session))
}

pub async fn delete(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<bool>, ApiError> {
    let deleted = state.engine.delete_session(&session_id(&id)?).await?;
    if !deleted {
        return Err(ApiError::not_found(format!("session {id} not found")));
    }
    Ok(Json(true))
}

pub async fn children(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<Session>>, ApiError> {
    let session = load(&state.engine, &id).await?;
    let filter = SessionFilter { parent: Some(session.id), include_children: true, ..Default::default() };
    Ok(Json(state.engine.sessions(filter).await?))
}

pub async fn todo(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<Todo>>, ApiError> {
    let session = load(&state.engine, &id).await?;
    Ok(Json(state.engine.todos(&session.id).await?))
}

pub async fn jobs(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Vec<Job>>, ApiError> {
    Ok(Json(state.engine.jobs(&session_id(&id)?).await?))
}

pub async fn job_output(
    State(state): State<AppState>,
    ApiPath((id, job)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<JobOutputQuery>,
) -> Result<Json<JobOutput>, ApiError> {
    // A job keeps its newest 1 MiB in memory; the saved file has the rest.
    let max = query.bytes.unwrap_or(16 * 1024).min(1024 * 1024);
    let job = JobId::from(job.as_str());
    let output = state.engine.job_output(&session_id(&id)?, &job, max).await?;
    Ok(Json(JobOutput { id: job.to_string(), output }))
}

pub async fn kill_job(
    State(state): State<AppState>,
    ApiPath((id, job)): ApiPath<(String, String)>,
) -> Result<Json<Job>, ApiError> {
    let command = SessionCommand::KillJob { session: session_id(&id)?, job: JobId::from(job.as_str()) };
    match state.engine.submit(command).await? {
        CommandOutcome::Job(job) => Ok(Json(job)),
        other => Err(ApiError::internal(format!("a kill came back as {other:?}"))),
    }
}

pub async fn status(State(state): State<AppState>) -> Json<BTreeMap<String, SessionStatus>> {
    // Retrying sessions report their retry; sessions between runs of an active entry count as busy.
    Json(state.engine.statuses().into_iter().map(|(id, status)| (id.to_string(), status)).collect())
}
