//! `codeloop mcp list|add|remove|login|logout` (DESIGN.md §5e).
//!
//! Owns: the command-line edge — which config file `add` / `remove` edit (`CODELOOP_CONFIG`, else the
//! global user config), printing, opening a browser for `login` when there is one.
//! Must not: hold MCP logic (starting, signing in and editing live in `codeloop_core::mcp`), or print
//! a token.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use codeloop_core::mcp::{
    AuthStore, LoginError, McpOrigin, McpServers, McpSettings, ServerStatus, StartContext, TransportKind,
};

use crate::env;

#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// List the MCP servers this directory would use: transport, state (connected, needs sign-in,
    /// failed: why), tool count and sign-in state. Starts each one to find out.
    List {
        /// One JSON array: [{name, transport, state, tools, auth, error?}].
        #[arg(long)]
        json: bool,
        /// Project directory whose config counts (default: the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Add a server to your config: `mcp add NAME -- CMD ARGS…` (local, stdio) or
    /// `mcp add NAME --url URL` (remote, Streamable HTTP). Writes $CODELOOP_CONFIG, else
    /// ~/.config/codeloop/config.toml, keeping the rest of the file as it is.
    Add {
        /// The server's name: its tools are offered as NAME_TOOL.
        name: String,
        /// A remote server's address, e.g. https://mcp.example.com/mcp.
        #[arg(long, conflicts_with = "command")]
        url: Option<String>,
        /// A header for a remote server, NAME=VALUE (repeatable; VALUE may use ${ENV}).
        #[arg(long = "header", value_name = "NAME=VALUE", requires = "url")]
        headers: Vec<String>,
        /// An environment variable for a local server, NAME=VALUE (repeatable).
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// Bounds the server's start and each call, in milliseconds (default 30000).
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// A local server's command and arguments, after `--`.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Remove a server from your config ($CODELOOP_CONFIG, else ~/.config/codeloop/config.toml).
    Remove {
        /// The server's name.
        name: String,
    },
    /// Sign in to a remote server (OAuth): prints the URL to open (and opens a browser when there is
    /// one), then waits for the sign-in to come back. Tokens go to the data dir's mcp-auth/.
    Login {
        /// The server's name in your config.
        name: String,
        /// The server's URL, for a server that is not in your config (one an editor passes).
        #[arg(long)]
        url: Option<String>,
        /// Seconds to wait for the browser to come back.
        #[arg(long, value_name = "SECS", default_value_t = 300)]
        timeout: u64,
        /// Only print the URL; never open a browser.
        #[arg(long)]
        no_browser: bool,
        /// The scopes to ask for, space-separated (e.g. "mcp:basic mcp:write", as a server's
        /// insufficient_scope refusal names them); default: the configured ones, else the server's.
        #[arg(long, value_name = "SCOPES")]
        scope: Option<String>,
    },
    /// Forget a server's sign-in (every saved token of it).
    Logout {
        /// The server's name.
        name: String,
    },
}

pub async fn mcp(command: McpCommand) -> anyhow::Result<ExitCode> {
    match command {
        McpCommand::List { json, dir } => list(json, dir).await,
        McpCommand::Add { name, url, headers, env, timeout_ms, command } => {
            add(name, url, headers, env, timeout_ms, command)
        }
        McpCommand::Remove { name } => remove(&name),
        McpCommand::Login { name, url, timeout, no_browser, scope } => {
            let scopes = scope.map(|s| s.split_whitespace().map(str::to_owned).collect());
            login(&name, url, timeout, no_browser, scopes).await
        }
        McpCommand::Logout { name } => logout(&name),
    }
}

/// What MCP servers start with; `config` names the credentials stdio servers are not handed.
fn context(config: &codeloop_core::config::Config) -> anyhow::Result<StartContext> {
    let credentials = codeloop_core::credentials::credential_variables(config);
    Ok(StartContext {
        auth: AuthStore::new(&env::data_dir()?),
        env: Arc::new(|name| std::env::var(name).ok()),
        withheld_env: codeloop_core::mcp::WithheldEnv::new(&credentials, &config.sandbox.env_keep),
    })
}

/// The config a run in `dir` would have (its MCP servers: a project's only once trusted).
fn configured(dir: Option<PathBuf>) -> anyhow::Result<codeloop_core::config::Config> {
    let dir = crate::project_dir(dir)?;
    env::load_config(Some(&dir))
}

async fn list(json: bool, dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let config = configured(dir)?;
    let servers = McpServers::new(config.mcp.servers.clone(), context(&config)?);
    let status = servers.status().await;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(ExitCode::SUCCESS);
    }
    if status.is_empty() {
        eprintln!(
            "no MCP servers: add one with `codeloop mcp add NAME --url URL` or `codeloop mcp add NAME -- CMD…`"
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<16} {:<9} {:<12} {:>5}  {:<11}  NOTE", "NAME", "TRANSPORT", "STATE", "TOOLS", "SIGN-IN");
    for server in &status {
        println!("{}", row(server));
    }
    Ok(ExitCode::SUCCESS)
}

fn row(server: &ServerStatus) -> String {
    let state = match server.state {
        codeloop_core::mcp::ServerState::NeedsLogin => "needs sign-in",
        other => other.as_str(),
    };
    format!(
        "{:<16} {:<9} {:<12} {:>5}  {:<11}  {}",
        server.name,
        server.transport.as_str(),
        state,
        server.tools,
        server.auth.as_str(),
        // Escaped where it was read (outside text); the row goes to stdout.
        crate::terminal::Target::stdout().show(server.error.as_deref().unwrap_or(""))
    )
}

/// The file `add` and `remove` edit: `CODELOOP_CONFIG`, else the global user config.
fn target_file() -> anyhow::Result<PathBuf> {
    if let Some(explicit) = std::env::var_os("CODELOOP_CONFIG").filter(|c| !c.is_empty()) {
        return Ok(PathBuf::from(explicit));
    }
    Ok(env::config_dir()
        .context("cannot find the config directory: set HOME, XDG_CONFIG_HOME or CODELOOP_CONFIG")?
        .join("config.toml"))
}

fn pairs(values: &[String], what: &str) -> anyhow::Result<BTreeMap<String, String>> {
    values
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_owned(), value.to_owned())),
            _ => anyhow::bail!("{what} `{pair}` is not NAME=VALUE"),
        })
        .collect()
}

fn add(
    name: String,
    url: Option<String>,
    headers: Vec<String>,
    env: Vec<String>,
    timeout_ms: Option<u64>,
    command: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let mut settings = match (url, command.is_empty()) {
        (Some(url), _) => McpSettings::remote(url),
        (None, false) => McpSettings::local(command),
        (None, true) => anyhow::bail!(
            "say how to reach `{name}`: `codeloop mcp add {name} --url https://…` (remote) or \
             `codeloop mcp add {name} -- CMD ARGS…` (local)"
        ),
    };
    settings.headers = pairs(&headers, "--header")?;
    settings.env = pairs(&env, "--env")?;
    settings.timeout_ms = timeout_ms;
    let path = target_file()?;
    codeloop_core::mcp::add_server(&path, &name, &settings)?;
    eprintln!("added [mcp.{name}] to {}", path.display());
    if settings.transport_kind() != TransportKind::Stdio {
        eprintln!(
            "if it asks for a sign-in: `codeloop mcp login {name}`; `codeloop mcp list` shows its state"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn remove(name: &str) -> anyhow::Result<ExitCode> {
    let path = target_file()?;
    codeloop_core::mcp::remove_server(&path, name)?;
    eprintln!("removed [mcp.{name}] from {}", path.display());
    if !AuthStore::new(&env::data_dir()?).records(name).is_empty() {
        eprintln!("its sign-in stays in the data dir until `codeloop mcp logout {name}`");
    }
    Ok(ExitCode::SUCCESS)
}

async fn login(
    name: &str,
    url: Option<String>,
    timeout: u64,
    no_browser: bool,
    scopes: Option<Vec<String>>,
) -> anyhow::Result<ExitCode> {
    let config = configured(None)?;
    let context = context(&config)?;
    let mut servers = config.mcp;
    let settings = match (servers.remove(name), url) {
        (Some(settings), None) => settings,
        (Some(mut settings), Some(url)) => {
            settings.url = Some(url);
            settings
        }
        (None, Some(url)) => McpSettings { origin: McpOrigin::Editor, ..McpSettings::remote(url) },
        (None, None) => anyhow::bail!(
            "no MCP server `{name}` in your config: add it with `codeloop mcp add {name} --url URL`, or pass --url"
        ),
    };
    let options = codeloop_core::mcp::LoginOptions { scopes };
    let pending = match codeloop_core::mcp::begin_login_with(name, &settings, &context, options).await {
        Ok(pending) => pending,
        Err(LoginError::NotNeeded(_)) => {
            eprintln!("MCP server {name} answered without a sign-in: nothing to do");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    eprintln!("to sign in to MCP server {name}, open this URL in a browser:");
    println!("{}", pending.authorization_url());
    if !no_browser {
        open_browser(pending.authorization_url());
    }
    eprintln!("waiting up to {timeout} s for the sign-in to come back to {} …", pending.redirect_uri());
    let signed = pending.finish(Duration::from_secs(timeout)).await?;
    let issuer = if signed.issuer.is_empty() { String::new() } else { format!(" at {}", signed.issuer) };
    eprintln!("signed in to MCP server {name}{issuer}; the tokens are in {}", signed.file.display());
    Ok(ExitCode::SUCCESS)
}

/// Opens `url` in the user's browser when there is one: `$BROWSER`, else `xdg-open` / `open` when a
/// display is there. Nothing happens on a headless machine (the URL is printed either way).
fn open_browser(url: &str) {
    let browser = std::env::var("BROWSER").ok().filter(|b| !b.trim().is_empty());
    let graphical = std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    let program = match browser {
        Some(browser) => browser,
        None if cfg!(target_os = "macos") => "open".to_owned(),
        None if graphical => "xdg-open".to_owned(),
        None => return,
    };
    let started = std::process::Command::new(&program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match started {
        // Reaped in the background: the browser may outlive this command.
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => eprintln!("could not open a browser with `{program}` ({e}): open the URL yourself"),
    }
}

fn logout(name: &str) -> anyhow::Result<ExitCode> {
    let store = AuthStore::new(&env::data_dir()?);
    let forgotten = store
        .forget(name)
        .with_context(|| format!("cannot remove the sign-in of {name} from {}", store.dir().display()))?;
    match forgotten {
        0 => eprintln!("MCP server {name} has no saved sign-in"),
        n => eprintln!("forgot the sign-in of MCP server {name} ({n} saved)"),
    }
    Ok(ExitCode::SUCCESS)
}
