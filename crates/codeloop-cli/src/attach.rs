//! `codeloop run --attach URL`: the same `run` output, driven through a running `codeloop serve` instead of
//! an in-process engine. The server's token comes from `CODELOOP_SERVER_TOKEN` or the file a server on this
//! machine left in the data dir ([`crate::door`]).
//!
//! Owns: the HTTP client side of a run — the session it drives, its event stream, answering asks and
//! aborting on a signal. Must not: re-implement the renderer (`crate::render::Renderer`).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use codeloop_core::{PermissionAnswer, RunOutcome};
use codeloop_server::api::{
    DeliveryMode, ModelSpec, PermissionReplyBody, PromptBody, PromptResult, ReplyKind,
};
use codeloop_tui::{ServerHttp, SseStream};
use codeloop_types::{Event, EventPayload, MessageId, PermissionRequest, Session, SessionStatus};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use crate::door::TOKEN_ENV;
use crate::door::{self};
use crate::render::Renderer;
use crate::run::{RunArgs, exit_code};
use crate::terminal::for_stderr;
use crate::{OnAsk, env, project_dir};
/// How long `run --attach` keeps reading events after the run ended, to render its last ones.
const DRAIN_LIMIT: Duration = Duration::from_secs(3);

/// A running server's HTTP API.
#[derive(Clone)]
struct Remote {
    http: ServerHttp,
}

impl Remote {
    fn new(url: &str) -> anyhow::Result<Remote> {
        let token = door::client_token(url, env::data_dir().ok().as_deref());
        Ok(Remote { http: ServerHttp::new(url, token.as_deref(), TOKEN_ENV)? })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.http.get(path, &[]).await
    }

    async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl serde::Serialize) -> anyhow::Result<T> {
        self.http.post(path, body).await
    }

    /// `/event?session=…`, once `server.connected` arrived (nothing published afterwards is missed).
    async fn events(&self, session: &str) -> anyhow::Result<Events> {
        let mut events = Events { stream: self.http.events(&[("session", session)], None).await? };
        loop {
            match events.next().await {
                Incoming::Control(kind) if kind == "server.connected" => return Ok(events),
                Incoming::End => anyhow::bail!("the server closed the event stream"),
                _ => {}
            }
        }
    }
}

struct Events {
    stream: SseStream,
}

enum Incoming {
    Bus(Arc<Event>),
    /// Events were lost; the final text is caught up from the prompt's answer.
    Resync,
    Control(String),
    End,
}

impl Events {
    async fn next(&mut self) -> Incoming {
        let Some(Ok(message)) = self.stream.next().await else { return Incoming::End };
        let Ok(data) = serde_json::from_str::<Value>(&message.data) else {
            return Incoming::Control(String::new());
        };
        let kind = data["type"].as_str().unwrap_or("").to_owned();
        if kind == "resync" {
            return Incoming::Resync;
        }
        match serde_json::from_value::<Event>(data) {
            Ok(event) => Incoming::Bus(Arc::new(event)),
            // Control events, or an event type from a newer server.
            Err(_) => Incoming::Control(kind),
        }
    }
}

/// Knows when the events of a finished run have all arrived: a `session.status` idle after the last
/// update of the run's final message.
#[derive(Default)]
struct Progress {
    message_updates: HashMap<MessageId, u64>,
    last_idle: u64,
}

impl Progress {
    fn see(&mut self, event: &Event) {
        match &event.payload {
            EventPayload::MessageUpdated { info, .. } => {
                self.message_updates.insert(info.id().clone(), event.id);
            }
            EventPayload::SessionStatus { status: SessionStatus::Idle, .. } => self.last_idle = event.id,
            _ => {}
        }
    }

    fn finished(&self, message: &MessageId) -> bool {
        self.message_updates.get(message).is_some_and(|update| self.last_idle > *update)
    }
}

/// `codeloop run --attach URL`: the run happens on that server; flags that only mean something in this
/// process are refused with what to do instead.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let Some(url) = args.target.attach.clone() else {
        anyhow::bail!("no server to attach to: pass --attach URL");
    };
    if args.max_cost.is_some() {
        anyhow::bail!(
            "--max-cost limits a run in this process; with --attach, set [limits] run_max_cost_usd in the \
             server's config"
        );
    }
    if args.command.is_some() {
        anyhow::bail!(
            "--command does not work with --attach yet: run it on this machine, or POST /session/ID/command"
        );
    }
    let message = crate::run::message_text(&args.message)?;
    attach(&url, &args, message).await
}

async fn attach(url: &str, args: &RunArgs, message: String) -> anyhow::Result<ExitCode> {
    let remote = Remote::new(url)?;
    let dir = project_dir(args.target.dir.clone())?;
    let session = pick_session(&remote, args, &dir).await?;
    let mut events = remote.events(session.id.as_str()).await?;
    let body = PromptBody {
        model: args.target.model.clone().map(ModelSpec::Text),
        agent: args.target.agent.clone(),
        delivery: Some(DeliveryMode::Queue),
        effort: args.effort.map(|e| e.to_string()),
        ..PromptBody::text(message)
    };
    let path = format!("/session/{}/prompt", session.id);
    let prompt = remote.post::<PromptResult>(&path, &body);
    tokio::pin!(prompt);
    let mut renderer = Renderer::new(args.format, session.id.clone());
    let mut progress = Progress::default();
    let asker = Asker::new(args.on_ask);
    let mut interrupted = false;
    let mut streaming = true;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let result = loop {
        tokio::select! {
            result = &mut prompt => break result,
            incoming = events.next(), if streaming => match incoming {
                Incoming::Bus(event) => {
                    progress.see(&event);
                    renderer.event(&event);
                    renderer.flush();
                    if let EventPayload::PermissionAsked(request) = &event.payload {
                        asker.answer(&remote, request.clone());
                    }
                }
                Incoming::Resync => renderer.lagged(0),
                Incoming::Control(_) => {}
                Incoming::End => streaming = false,
            },
            _ = tokio::signal::ctrl_c(), if !interrupted => {
                interrupted = true;
                eprintln!("\ninterrupting…");
                abort(&remote, session.id.as_str());
            }
            _ = async { match terminate.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } }, if !interrupted => {
                interrupted = true;
                abort(&remote, session.id.as_str());
            }
        }
    };
    let result = result?;
    let outcome = RunOutcome {
        session_id: session.id.clone(),
        message: result.info.as_ref().and_then(|m| m.as_assistant()).cloned(),
        stop: result.stop.into(),
    };
    if let (Some(message), true) = (&outcome.message, streaming) {
        // The answer came back; render what the stream still carries of the run.
        let drain = async {
            while !progress.finished(&message.id) {
                match events.next().await {
                    Incoming::Bus(event) => {
                        progress.see(&event);
                        renderer.event(&event);
                    }
                    Incoming::End => return,
                    Incoming::Resync | Incoming::Control(_) => {}
                }
            }
        };
        let _ = tokio::time::timeout(DRAIN_LIMIT, drain).await;
    }
    renderer.catch_up(&result.parts);
    let totals = remote
        .get::<Session>(&format!("/session/{}", session.id))
        .await
        .ok()
        .map(|s| (s.tokens.input, s.tokens.output, s.cost));
    renderer.summary(&outcome, totals);
    Ok(exit_code(&outcome))
}

fn abort(remote: &Remote, session: &str) {
    let remote = remote.clone();
    let path = format!("/session/{session}/abort");
    tokio::spawn(async move {
        if let Err(e) = remote.post::<Value>(&path, &json!({})).await {
            eprintln!("warning: could not abort the run: {e:#}");
        }
    });
}

async fn pick_session(remote: &Remote, args: &RunArgs, dir: &std::path::Path) -> anyhow::Result<Session> {
    if let Some(id) = &args.target.session {
        return remote.get(&format!("/session/{id}")).await;
    }
    let directory = dir.display().to_string();
    if args.target.continue_last {
        let query = [("directory", directory.as_str()), ("roots", "true"), ("limit", "1")];
        let sessions: Vec<Session> = remote.http.get("/session", &query).await?;
        return sessions.into_iter().next().with_context(|| {
            format!("no session to continue in {}: run without --continue first", dir.display())
        });
    }
    let body = json!({"directory": directory, "agent": args.target.agent, "model": args.target.model});
    remote.post("/session", &body).await
}

/// Answers permission questions of an attached run: on the terminal when there is one, else by
/// `--on-ask` (default: reject, as an in-process headless run does).
#[derive(Clone, Copy)]
struct Asker {
    on_ask: Option<OnAsk>,
    interactive: bool,
}

impl Asker {
    fn new(on_ask: Option<OnAsk>) -> Asker {
        let interactive =
            on_ask.is_none() && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
        Asker { on_ask, interactive }
    }

    fn answer(self, remote: &Remote, request: PermissionRequest) {
        let remote = remote.clone();
        let path = format!("/permission/{}/reply", request.id);
        tokio::spawn(async move {
            let body = match (self.on_ask, self.interactive) {
                (Some(OnAsk::Allow), _) => PermissionReplyBody { reply: ReplyKind::Once, message: None },
                (_, true) => match tokio::task::spawn_blocking(move || ask_terminal(&request)).await {
                    Ok(body) => body,
                    Err(_) => return,
                },
                _ => {
                    let note = format!(
                        "permission `{}` for {} rejected: no terminal to ask (use --on-ask allow)",
                        request.permission,
                        request.patterns.join(", ")
                    );
                    eprintln!("{}", for_stderr(&note));
                    PermissionReplyBody { reply: ReplyKind::Reject, message: None }
                }
            };
            // A 409 means another client answered first: nothing to do.
            let _ = remote.post::<Value>(&path, &body).await;
        });
    }
}

/// The terminal's answer (the same prompt as `run`), as the server's reply body.
fn ask_terminal(request: &PermissionRequest) -> PermissionReplyBody {
    let (_, answer) = crate::run::ask_terminal(request);
    match answer {
        PermissionAnswer::Once => PermissionReplyBody { reply: ReplyKind::Once, message: None },
        PermissionAnswer::Always => PermissionReplyBody { reply: ReplyKind::Always, message: None },
        PermissionAnswer::Reject { message } => PermissionReplyBody { reply: ReplyKind::Reject, message },
        PermissionAnswer::RejectAlways => {
            PermissionReplyBody { reply: ReplyKind::RejectAlways, message: None }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeloop_types::{EventPayload, SessionStatus};

    #[test]
    fn a_run_is_finished_once_idle_follows_its_final_message() {
        let session: codeloop_types::SessionId = "ses_1".into();
        let idle = |id| Event {
            id,
            payload: EventPayload::SessionStatus { session_id: session.clone(), status: SessionStatus::Idle },
        };
        let mut progress = Progress::default();
        let message: MessageId = "msg_1".into();
        progress.see(&idle(1));
        progress.message_updates.insert(message.clone(), 2);
        assert!(!progress.finished(&message), "an idle before the message belongs to an earlier run");
        progress.see(&idle(3));
        assert!(progress.finished(&message));
    }

    #[test]
    fn attach_needs_an_http_url() {
        assert!(Remote::new("127.0.0.1:4096").is_err());
        let remote = Remote::new("http://127.0.0.1:4096/").unwrap();
        assert_eq!(remote.http.url("/session", &[]).unwrap().as_str(), "http://127.0.0.1:4096/session");
    }
}
