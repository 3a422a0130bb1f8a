//! `codeloop serve` (the HTTP API and `/event` stream of codeloop-server, and the web page at `/`) and
//! `codeloop run --attach URL` (the same `run` output, driven through a running server instead of an
//! in-process engine). `codeloop web` (web.rs) starts its server through [`run_server`] too.
//!
//! Owns: the command-line edges of both — binding, signals, the token (given, or made and left for local
//! clients, see [`crate::door`]), and the HTTP client side of `run --attach`.
//! Must not: re-implement the server or the renderer; it calls `codeloop_server::serve` and
//! `crate::render::Renderer`.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use codeloop_core::permission::AskPolicy;
use codeloop_core::{EventIds, StoreChoice};
use codeloop_core::{PermissionAnswer, RunOutcome};
use codeloop_server::ServerOptions;
use codeloop_server::api::{
    DeliveryMode, ModelSpec, PermissionReplyBody, PromptBody, PromptResult, ReplyKind,
};
use codeloop_tui::{ServerHttp, SseStream};
use codeloop_types::{Event, EventPayload, MessageId, PermissionRequest, Session, SessionStatus};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use crate::door::TOKEN_ENV;
use crate::door::{self, ServerFile};
use crate::render::Renderer;
use crate::run::{RunArgs, exit_code};
use crate::terminal::for_stderr;
use crate::{OnAsk, env, project_dir};
/// How long `run --attach` keeps reading events after the run ended, to render its last ones.
const DRAIN_LIMIT: Duration = Duration::from_secs(3);

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to bind; anything but loopback requires a token you give (--token or CODELOOP_SERVER_TOKEN).
    #[arg(long, default_value = "127.0.0.1")]
    pub hostname: String,
    /// Port to listen on (0 picks a free one; the address is printed once listening).
    #[arg(long, default_value_t = 4096)]
    pub port: u16,
    /// Bearer token required on every request. Prefer CODELOOP_SERVER_TOKEN: a command line can be read
    /// by any local process. Without either, serve makes one and writes it to
    /// $CODELOOP_DATA_DIR/server/<port>.json (0600), where `run --attach` and `tui --attach` find it.
    #[arg(long, env = TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// Allow browser requests from this origin (repeatable; `*` for any). CORS is off without it, and
    /// needs a token you give (--token or CODELOOP_SERVER_TOKEN).
    #[arg(long = "cors", value_name = "ORIGIN")]
    pub cors: Vec<String>,
    /// The store shared by every worker, e.g. `postgres://user:password@host/db` (wins over
    /// CODELOOP_DATABASE_URL and `[store] url`; SQLite in the data dir without any of them).
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let token = match args.token.clone().filter(|t| !t.is_empty()) {
        Some(token) if std::env::var(TOKEN_ENV).is_ok_and(|env| env == token) => TokenChoice::Given(token),
        Some(token) => {
            eprintln!(
                "warning: a --token on the command line can be read by any local process \
                 (/proc/<pid>/cmdline); set CODELOOP_SERVER_TOKEN instead, or give none and let serve make one"
            );
            TokenChoice::Given(token)
        }
        None => TokenChoice::Generate,
    };
    let launch = Launch { args, token, port_taken: PortTaken::Fail };
    run_server(launch, |_| {}).await
}

/// Where the server's token comes from: it always has one (DESIGN.md §5c).
pub enum TokenChoice {
    /// `--token` or `CODELOOP_SERVER_TOKEN`: the only kind that opens CORS or a bind beyond loopback.
    Given(String),
    /// A fresh random token for clients on this machine, left in `$DATA_DIR/server/<port>.json`.
    Generate,
}

/// What to do when the port is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortTaken {
    /// Fail (a port the user asked for).
    Fail,
    /// Listen on a free one (`web` without `--port`).
    AnyFree,
}

/// How a server is started: `serve`'s flags, and what `web` adds to them.
pub struct Launch {
    pub args: ServeArgs,
    pub token: TokenChoice,
    pub port_taken: PortTaken,
}

/// Where a started server listens, handed to the caller once it does.
pub struct Listening<'a> {
    /// `http://ADDR` of the server.
    pub url: String,
    pub token: Option<&'a str>,
}

/// The one way `serve` and `web` start a server: check the walls, bind, open the engine, say where it
/// listens (`codeloop server listening on URL` on stderr, then `listening`), and serve until SIGINT or
/// SIGTERM.
pub async fn run_server(launch: Launch, listening: impl FnOnce(&Listening<'_>)) -> anyhow::Result<ExitCode> {
    let Launch { args, token, port_taken } = launch;
    let dir = project_dir(None)?;
    let given = match &token {
        TokenChoice::Given(token) => Some(token.as_str()),
        TokenChoice::Generate => None,
    };
    // Before binding or opening anything: a refused start leaves no trace. A generated token is for this
    // machine only: CORS and a public bind need one the user gave.
    codeloop_server::check_cors(&args.cors, given)?;
    raise_open_file_limit();
    let listener = bind(&args.hostname, args.port, given, port_taken).await?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}");
    let (token, server_file) = match token {
        TokenChoice::Given(token) => (token, None),
        TokenChoice::Generate => {
            let token = door::generate_token()?;
            let path = door::server_file_path(&env::data_dir()?, addr.port());
            let file = ServerFile { url: url.clone(), token: token.clone(), pid: std::process::id() };
            door::write_server_file(&path, &file)?;
            (token, Some(path))
        }
    };
    let config = env::load_config(Some(&dir))?;
    let store = args.store.map_or(StoreChoice::FromConfig, StoreChoice::Url);
    let engine = env::open_engine_on(config, AskPolicy::Wait, store, EventIds::Store, env::Watchers::Remote)?;
    // Queued input and runs that a dead process or worker left are picked up here.
    let _failover = engine.spawn_failover();
    let mut options = ServerOptions::new(&dir);
    options.token = Some(token);
    options.cors_origins = args.cors;
    let shutdown = shutdown_signal();
    eprintln!("codeloop server listening on {url} (Authorization: Bearer <token> required)");
    if let Some(path) = &server_file {
        eprintln!(
            "its token is in {} (clients on this machine find it there; or set CODELOOP_SERVER_TOKEN)",
            path.display()
        );
    }
    listening(&Listening { url, token: options.token.as_deref() });
    let served = codeloop_server::serve(engine, listener, options, shutdown).await;
    if let Some(path) = &server_file {
        door::remove_server_file(path);
    }
    served.context("the server failed")?;
    eprintln!("codeloop server stopped");
    Ok(ExitCode::SUCCESS)
}

/// Listens on `hostname:port` (every address it resolves to), after checking that a bind beyond
/// loopback has a token. With [`PortTaken::AnyFree`], a taken port gives way to a free one.
async fn bind(
    hostname: &str,
    port: u16,
    token: Option<&str>,
    port_taken: PortTaken,
) -> anyhow::Result<tokio::net::TcpListener> {
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host((hostname, port))
        .await
        .with_context(|| format!("cannot resolve --hostname {hostname}"))?
        .collect();
    for addr in &addrs {
        codeloop_server::check_bind(*addr, token)?;
    }
    match tokio::net::TcpListener::bind(addrs.as_slice()).await {
        Ok(listener) => Ok(listener),
        Err(e) if port_taken == PortTaken::AnyFree && e.kind() == std::io::ErrorKind::AddrInUse => {
            let any: Vec<std::net::SocketAddr> =
                addrs.iter().map(|a| std::net::SocketAddr::new(a.ip(), 0)).collect();
            eprintln!("port {port} is taken: listening on a free one");
            tokio::net::TcpListener::bind(any.as_slice())
                .await
                .with_context(|| format!("cannot listen on {hostname}"))
        }
        Err(e) => Err(e).with_context(|| format!("cannot listen on {hostname}:{port}")),
    }
}

/// Raises the soft limit on open files to the hard one. Every connection is a descriptor, and the usual
/// soft default (1024) is reached by a thousand idle sockets well before the server's header timeout
/// closes them; until then no client is accepted. Go's runtime does the same for every program.
fn raise_open_file_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::debug!("cannot raise the open-file limit from {soft} to {hard}: {e}");
            }
        }
        Ok(_) => {}
        Err(e) => tracing::debug!("cannot read the open-file limit: {e}"),
    }
}

/// Resolves on SIGINT or SIGTERM. The handlers are in place when this returns (not when the future is
/// first polled), so a signal sent as soon as the server says it listens stops it gracefully.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async move {
        let wait = |signal: std::io::Result<tokio::signal::unix::Signal>| async move {
            match signal {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(interrupt) => {}
            _ = wait(terminate) => {}
        }
        eprintln!("shutting down: stopping active runs…");
    }
}

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

pub async fn attach(url: &str, args: &RunArgs, message: String) -> anyhow::Result<ExitCode> {
    let remote = Remote::new(url)?;
    let dir = project_dir(args.dir.clone())?;
    let session = pick_session(&remote, args, &dir).await?;
    let mut events = remote.events(session.id.as_str()).await?;
    let body = PromptBody {
        model: args.model.clone().map(ModelSpec::Text),
        agent: args.agent.clone(),
        delivery: Some(DeliveryMode::Queue),
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
    if let Some(id) = &args.session {
        return remote.get(&format!("/session/{id}")).await;
    }
    let directory = dir.display().to_string();
    if args.continue_last {
        let query = [("directory", directory.as_str()), ("roots", "true"), ("limit", "1")];
        let sessions: Vec<Session> = remote.http.get("/session", &query).await?;
        return sessions.into_iter().next().with_context(|| {
            format!("no session to continue in {}: run without --continue first", dir.display())
        });
    }
    let body = json!({"directory": directory, "agent": args.agent, "model": args.model});
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
