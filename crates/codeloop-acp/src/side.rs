//! The agent side of ACP as typed calls, shaped like the ACP SDK's `Agent` trait: one method per request
//! or notification, its typed params in, its typed response out. [`dispatch`] and [`notify`] turn a
//! JSON-RPC message into one of those calls and the answer back into JSON.
//!
//! Owns: method names → typed requests → [`AgentSide`] methods → JSON answers.
//! Must not: hold behaviour; [`crate::agent`] answers the session requests and [`crate::turn`] runs prompts.

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::agent::Agent;
use crate::protocol::{
    AuthenticateRequest, CancelNotification, CancelRequestNotification, CloseSessionRequest, EmptyResponse,
    InitializeRequest, InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse,
    ResumeSessionRequest, ResumeSessionResponse, SetConfigOptionRequest, SetConfigOptionResponse,
    SetModeRequest, code, method,
};
use crate::rpc::RpcError;
use crate::turn;

type Answer<T> = Result<T, RpcError>;

/// What an ACP agent answers (the SDK's `Agent` trait, for the methods codeloop speaks).
pub(crate) trait AgentSide: Sync {
    fn initialize(
        &self,
        request: InitializeRequest,
    ) -> impl Future<Output = Answer<InitializeResponse>> + Send;
    fn authenticate(
        &self,
        request: AuthenticateRequest,
    ) -> impl Future<Output = Answer<EmptyResponse>> + Send;
    fn new_session(
        &self,
        request: NewSessionRequest,
    ) -> impl Future<Output = Answer<NewSessionResponse>> + Send;
    fn load_session(
        &self,
        request: LoadSessionRequest,
    ) -> impl Future<Output = Answer<LoadSessionResponse>> + Send;
    fn list_sessions(
        &self,
        request: ListSessionsRequest,
    ) -> impl Future<Output = Answer<ListSessionsResponse>> + Send;
    fn resume_session(
        &self,
        request: ResumeSessionRequest,
    ) -> impl Future<Output = Answer<ResumeSessionResponse>> + Send;
    fn close_session(
        &self,
        request: CloseSessionRequest,
    ) -> impl Future<Output = Answer<EmptyResponse>> + Send;
    /// `request_id` is the JSON-RPC id, so `$/cancel_request` can name the prompt.
    fn prompt(
        &self,
        request_id: &Value,
        request: PromptRequest,
    ) -> impl Future<Output = Answer<PromptResponse>> + Send;
    fn set_session_mode(&self, request: SetModeRequest)
    -> impl Future<Output = Answer<EmptyResponse>> + Send;
    fn set_session_config_option(
        &self,
        request: SetConfigOptionRequest,
    ) -> impl Future<Output = Answer<SetConfigOptionResponse>> + Send;
    fn cancel(&self, notification: CancelNotification) -> impl Future<Output = ()> + Send;
    fn cancel_request(&self, notification: CancelRequestNotification) -> impl Future<Output = ()> + Send;
}

impl AgentSide for Arc<Agent> {
    async fn initialize(&self, request: InitializeRequest) -> Answer<InitializeResponse> {
        Ok(Agent::initialize(self, request))
    }

    async fn authenticate(&self, _: AuthenticateRequest) -> Answer<EmptyResponse> {
        Ok(EmptyResponse {})
    }

    async fn new_session(&self, request: NewSessionRequest) -> Answer<NewSessionResponse> {
        Agent::new_session(self, request).await
    }

    async fn load_session(&self, request: LoadSessionRequest) -> Answer<LoadSessionResponse> {
        Agent::load_session(self, request).await
    }

    async fn list_sessions(&self, request: ListSessionsRequest) -> Answer<ListSessionsResponse> {
        Agent::list_sessions(self, request).await
    }

    async fn resume_session(&self, request: ResumeSessionRequest) -> Answer<ResumeSessionResponse> {
        Agent::resume_session(self, request).await
    }

    async fn close_session(&self, request: CloseSessionRequest) -> Answer<EmptyResponse> {
        Agent::close_session(self, request)
    }

    async fn prompt(&self, request_id: &Value, request: PromptRequest) -> Answer<PromptResponse> {
        let session = self.session(&request.session_id)?;
        turn::prompt(self, &session, request_id, request.prompt).await
    }

    async fn set_session_mode(&self, request: SetModeRequest) -> Answer<EmptyResponse> {
        let session = self.session(&request.session_id)?;
        self.set_mode(&session, &request.mode_id).await?;
        Ok(EmptyResponse {})
    }

    async fn set_session_config_option(
        &self,
        request: SetConfigOptionRequest,
    ) -> Answer<SetConfigOptionResponse> {
        Agent::set_config_option(self, request).await
    }

    async fn cancel(&self, notification: CancelNotification) {
        self.cancel_session(&notification.session_id);
    }

    async fn cancel_request(&self, notification: CancelRequestNotification) {
        self.cancel_prompt(&notification.request_id);
    }
}

/// Answers one request: its params decoded (a mismatch is `Invalid params`), the agent's answer encoded.
pub(crate) async fn dispatch(agent: &impl AgentSide, id: &Value, name: &str, value: Value) -> Answer<Value> {
    let result = match name {
        method::INITIALIZE => encode(agent.initialize(params(value)?).await),
        // Any params (none at all too): there is nothing to authenticate with.
        method::AUTHENTICATE => encode(agent.authenticate(params(value).unwrap_or_default()).await),
        method::SESSION_NEW => encode(agent.new_session(params(value)?).await),
        method::SESSION_LOAD => encode(agent.load_session(params(value)?).await),
        method::SESSION_LIST => encode(agent.list_sessions(params(value)?).await),
        method::SESSION_RESUME => encode(agent.resume_session(params(value)?).await),
        method::SESSION_CLOSE => encode(agent.close_session(params(value)?).await),
        method::SESSION_PROMPT => encode(agent.prompt(id, params(value)?).await),
        method::SESSION_SET_MODE => encode(agent.set_session_mode(params(value)?).await),
        method::SESSION_SET_CONFIG_OPTION => encode(agent.set_session_config_option(params(value)?).await),
        other => Err(RpcError::new(code::METHOD_NOT_FOUND, format!("Method not found: {other}"))),
    };
    if let Err(error) = &result {
        tracing::debug!("{name} failed: {error}");
    }
    result
}

/// Acts on one notification; unknown ones are ignored, as JSON-RPC asks.
pub(crate) async fn notify(agent: &impl AgentSide, name: &str, value: Value) {
    match name {
        method::SESSION_CANCEL => match params(value) {
            Ok(cancel) => agent.cancel(cancel).await,
            Err(e) => tracing::warn!("ignoring a malformed session/cancel: {e}"),
        },
        method::CANCEL_REQUEST => match params(value) {
            Ok(cancel) => agent.cancel_request(cancel).await,
            Err(e) => tracing::warn!("ignoring a malformed $/cancel_request: {e}"),
        },
        other => tracing::debug!("ignoring notification {other}"),
    }
}

/// The session a request opens (`session/new`, `load`, `resume`), from its params or its answer.
pub(crate) fn opens_session(method: &str, params: &Value) -> Option<String> {
    let opening = matches!(method, method::SESSION_NEW | method::SESSION_LOAD | method::SESSION_RESUME);
    opening.then(|| params.get("sessionId")?.as_str().map(str::to_owned)).flatten()
}

fn params<T: DeserializeOwned>(params: Value) -> Answer<T> {
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(format!("Invalid params: {e}")))
}

fn encode(answer: Answer<impl Serialize>) -> Answer<Value> {
    serde_json::to_value(answer?).map_err(|e| RpcError::internal(e.to_string()))
}
