//! The route table: every route is registered once, with its handler and its documentation together, so
//! the router and the OpenAPI document (`GET /doc`) cannot drift apart.
//!
//! Owns: paths, methods, and what each route documents about itself.
//! Must not: hold handler logic (see `session`, `prompt`, `misc`).

mod misc;
mod prompt;
mod session;

use std::sync::Arc;

use axum::Router;
use axum::handler::Handler;
use axum::routing::{MethodFilter, on};

use crate::AppState;
use crate::api::*;
use crate::doc::{Op, Returns, Verb};
use crate::events;

/// The router's method filter for a documented verb.
fn method(verb: Verb) -> MethodFilter {
    match verb {
        Verb::Get => MethodFilter::GET,
        Verb::Post => MethodFilter::POST,
        Verb::Patch => MethodFilter::PATCH,
        Verb::Delete => MethodFilter::DELETE,
    }
}

fn get(path: &'static str, id: &'static str, summary: &'static str) -> Op {
    Op::new(Verb::Get, path, id, summary)
}

fn post(path: &'static str, id: &'static str, summary: &'static str) -> Op {
    Op::new(Verb::Post, path, id, summary)
}

/// Routes and their documentation, built together.
pub struct Api {
    router: Router<AppState>,
    ops: Vec<Op>,
}

impl Api {
    fn add<H, T>(mut self, op: Op, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.router = self.router.route(op.path, on(method(op.verb), handler));
        self.ops.push(op);
        self
    }

    /// Adds `GET /doc` (documenting itself too) and returns the router and the operations.
    pub fn finish(mut self) -> (Router<AppState>, Vec<Op>) {
        let op = get("/doc", "doc", "This OpenAPI 3.1 document");
        self.ops.push(op);
        let document = Arc::new(crate::doc::openapi(&self.ops));
        let router = self.router.route(
            op.path,
            on(method(op.verb), move || {
                let document = document.clone();
                async move { axum::Json((*document).clone()) }
            }),
        );
        (router, self.ops)
    }
}

/// Every route of the API.
pub fn api() -> Api {
    use Returns::{Accepted, EventStream, List, Model};
    let api = Api { router: Router::new(), ops: Vec::new() };
    api.add(get("/health", "health", "Liveness and version").json::<Health>(), misc::health)
        .add(get("/metrics", "metrics", "Prometheus metrics: tokens, cost, tool calls, provider latency, retries, active runs").returns(Returns::PrometheusText), misc::metrics)
        .add(get("/event", "event.subscribe", "Server-Sent Events: every bus event with its id; resume with Last-Event-ID").query::<EventQuery>().returns(EventStream), events::events)
        .add(get("/session", "session.list", "List sessions, most recently updated first").query::<SessionListQuery>().returns(List("Session")), session::list)
        .add(post("/session", "session.create", "Create a session").body::<CreateSession>().returns(Model("Session")), session::create)
        .add(get("/session/status", "session.status", "Sessions with an active run: id → status").returns(Returns::AnyJson), session::status)
        .add(get("/session/{id}", "session.get", "Get a session").returns(Model("Session")), session::get)
        .add(Op::new(Verb::Patch, "/session/{id}", "session.update", "Rename a session").body::<UpdateSession>().returns(Model("Session")), session::update)
        .add(Op::new(Verb::Delete, "/session/{id}", "session.delete", "Delete a session and its children (409 while it runs)").returns(Returns::AnyJson), session::delete)
        .add(get("/session/{id}/children", "session.children", "Child sessions (subtasks)").returns(List("Session")), session::children)
        .add(get("/session/{id}/todo", "session.todo", "The session's todo list").returns(List("Todo")), session::todo)
        .add(get("/session/{id}/job", "session.jobs", "The session's background jobs, oldest first: {id, command, state: running|exited|killed|lost, exit_code?, started, ended?}").returns(List("Job")), session::jobs)
        .add(get("/session/{id}/job/{job}/output", "session.job.output", "The newest output of a background job (at most `bytes`, default 16 KiB), for a person: the model's own reads are not moved").query::<JobOutputQuery>().json::<JobOutput>(), session::job_output)
        .add(post("/session/{id}/job/{job}/kill", "session.job.kill", "End a background job (SIGTERM to its tree, SIGKILL after 2 s); returns it as it ended (409 when another codeloop process runs it)").returns(Model("Job")), session::kill_job)
        .add(get("/session/{id}/message", "session.messages", "A page of messages with their parts, newest first").query::<MessageListQuery>().returns(List("MessageWithParts")), prompt::messages)
        .add(get("/session/{id}/message/{messageID}", "session.message", "One message with its parts").returns(Model("MessageWithParts")), prompt::message)
        .add(post("/session/{id}/message", "session.prompt", "Send a prompt and wait for the run to end (same as /prompt)").body::<PromptBody>().json::<PromptResult>(), prompt::prompt)
        .add(post("/session/{id}/prompt", "session.prompt_sync", "Send a prompt and wait for the run to end").body::<PromptBody>().json::<PromptResult>(), prompt::prompt)
        .add(post("/session/{id}/prompt_async", "session.prompt_async", "Send a prompt; 202 at once, the run is watched through /event and failures arrive as session.error").body::<PromptBody>().returns(Accepted), prompt::prompt_async)
        .add(post("/session/{id}/command", "session.command", "Run a command (a Markdown command file, an MCP prompt, init or compact) with its arguments; answers as prompt_async: 202 once the command is known, 400 naming the available ones when it is not").body::<CommandBody>().returns(Accepted), prompt::command)
        .add(post("/session/{id}/abort", "session.abort", "Stop the active run; returns after its cleanup").json::<Aborted>(), prompt::abort)
        .add(post("/session/{id}/compact", "session.compact", "Summarise the session now (409 while it runs)").json::<PromptResult>(), prompt::compact)
        .add(post("/session/{id}/summarize", "session.summarize", "Same as /compact").json::<PromptResult>(), prompt::compact)
        .add(post("/session/{id}/revert", "session.revert", "Put back the files changed from a message on and hide those messages (git projects; 409 while it runs)").body::<RevertBody>().returns(Model("Session")), prompt::revert)
        .add(post("/session/{id}/unrevert", "session.unrevert", "Undo the last revert").returns(Model("Session")), prompt::unrevert)
        .add(get("/permission", "permission.list", "Pending permission requests, oldest first").query::<SessionQuery>().returns(List("PermissionRequest")), misc::permissions)
        .add(post("/permission/{requestID}/reply", "permission.reply", "Answer a pending request; the first reply wins, later ones get 409").body::<PermissionReplyBody>().returns(Returns::AnyJson), misc::reply_permission)
        .add(get("/question", "question.list", "Pending questions from the question tool, oldest first").query::<SessionQuery>().returns(List("QuestionRequest")), misc::questions)
        .add(post("/question/{requestID}/reply", "question.reply", "Answer a pending question: one list of answers per question").body::<QuestionReplyBody>().returns(Returns::AnyJson), misc::reply_question)
        .add(post("/question/{requestID}/reject", "question.reject", "Decline a pending question (stops the run like a rejected permission)").returns(Returns::AnyJson), misc::reject_question)
        .add(get("/session/{id}/elicitation", "session.elicitation.list", "Pending MCP elicitations of the session, oldest first: {id, server, message, mode: form|url, schema | url}").returns(List("ElicitationRequest")), misc::elicitations)
        .add(post("/session/{id}/elicitation/{eid}", "session.elicitation.reply", "Answer a pending MCP elicitation: {action: accept|decline|cancel, content?}; an accepted form takes the schema's defaults for fields left out (404 when it is not pending)").body::<ElicitationReplyBody>().returns(Returns::AnyJson), misc::reply_elicitation)
        .add(get("/config", "config.get", "The effective configuration (read-only, secrets redacted)").returns(Model("Config")), misc::config)
        .add(get("/models", "models.list", "The model catalogue").json::<Vec<ModelEntry>>(), misc::models)
        .add(get("/agent", "agent.list", "The agents a person may pick (primary agents), with the default marked").json::<Vec<AgentEntry>>(), misc::agents)
        .add(get("/command", "command.list", "The commands of a project directory: built-ins, Markdown command files and MCP prompts").query::<DirectoryQuery>().json::<Vec<CommandEntry>>(), misc::commands)
        .add(get("/project", "project.get", "What the project of a directory brings (hooks, MCP servers, agents, widening rules) and its trust state").query::<DirectoryQuery>().returns(Returns::AnyJson), misc::project)
        .add(get("/agent/{name}", "agent.get", "One agent a person may pick; 400 with the reason when it may not be picked (a subagent, a hidden or missing one)").json::<AgentEntry>(), misc::agent)
}
