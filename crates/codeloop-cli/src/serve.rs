//! `codeloop serve` (the HTTP API and `/event` stream of codeloop-server, and the web page at `/`).
//! `codeloop web` (web.rs) starts its server through [`run_server`] too; `run --attach` is attach.rs.
//!
//! Owns: the command-line edges of a server — binding, signals, the token (given, or made and left for
//! local clients, see [`crate::door`]).
//! Must not: re-implement the server; it calls `codeloop_server::serve`.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use codeloop_core::permission::AskPolicy;
use codeloop_core::{EventIds, StoreChoice};
use codeloop_server::ServerOptions;

pub use crate::door::TOKEN_ENV;
use crate::door::{self, ServerFile};
use crate::{env, project_dir};

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
    let generated = matches!(token, TokenChoice::Generate);
    let token = match token {
        TokenChoice::Given(token) => token,
        TokenChoice::Generate => door::generate_token()?,
    };
    // Given or made, the token is left where clients on this machine look (DESIGN.md §5b): `run --attach`
    // finds it however the server was started.
    let path = door::server_file_path(&env::data_dir()?, addr.port());
    let file = ServerFile { url: url.clone(), token: token.clone(), pid: std::process::id() };
    door::write_server_file(&path, &file)?;
    let server_file = Some(path);
    let config = env::load_config(Some(&dir))?;
    let store = args.store.map_or(StoreChoice::FromConfig, StoreChoice::Url);
    let engine = env::open_engine_on(config, AskPolicy::Wait, store, EventIds::Store, env::Watchers::Remote)?;
    // Queued input and runs that a dead process or worker left are picked up here.
    let _failover = engine.spawn_failover();
    let telemetry = env::start_telemetry(&engine);
    let mut options = ServerOptions::new(&dir);
    options.token = Some(token);
    options.cors_origins = args.cors;
    let shutdown = shutdown_signal();
    eprintln!("codeloop server listening on {url} (Authorization: Bearer <token> required)");
    if let Some(path) = server_file.as_ref().filter(|_| generated) {
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
    env::finish_telemetry(telemetry).await;
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
