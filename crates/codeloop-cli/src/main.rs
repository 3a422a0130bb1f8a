//! `codeloop`: the command-line program (DESIGN.md §5). Parses arguments, loads config, opens the engine
//! and renders its events. Everything else lives in the library crates.

mod acp;
mod attach;
mod config_cmd;
mod demo;
mod doctor;
mod door;
mod env;
mod gc;
mod hooks;
mod lsp;
mod mcp;
mod models;
mod permissions;
mod render;
mod run;
mod sandbox;
mod serve;
mod session;
mod session_args;
mod stats;
mod terminal;
mod trust;
mod tui;
mod web;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "codeloop",
    version,
    about = "A coding agent runtime: streams a model's answer, runs its tools under a permission policy, and keeps the conversation inside the model's context window.",
    args_conflicts_with_subcommands = true,
    after_help = "Data lives in $CODELOOP_DATA_DIR (default ~/.local/share/codeloop).\nConfig: ~/.config/codeloop/config.toml, then codeloop.toml / .codeloop/config.toml in the project (only after `codeloop trust`; until then it may only narrow), then $CODELOOP_CONFIG.\nTry `codeloop demo` for an offline run that needs no API key."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Without a subcommand, in a terminal: the interactive UI (`codeloop tui`).
    #[command(flatten)]
    tui: tui::TuiArgs,
}

#[derive(Subcommand)]
enum Command {
    /// The interactive terminal UI (the default in a terminal).
    Tui(tui::TuiArgs),
    /// Send a message to the agent and stream its answer (tool activity goes to stderr).
    Run(run::RunArgs),
    /// Serve the HTTP API, the `GET /event` SSE stream and the web page at `/`.
    Serve(serve::ServeArgs),
    /// Start a server on 127.0.0.1 and open its web page in a browser (the same sessions, in a tab).
    Web(web::WebArgs),
    /// Speak the Agent Client Protocol on stdin/stdout, for editors (Zed, JetBrains, Neovim…).
    Acp(acp::AcpArgs),
    /// List, show, export, delete, compact, revert or unrevert stored sessions.
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// List the model catalogue: context limits, prices, edit tools (patch | edit) and sampling per model.
    ///
    /// Prices are in USD per million tokens.
    /// tools: `patch` = apply_patch, for the models trained on it (GPT-5 and codex families, as OpenCode
    ///   does); `edit` = edit and write, for the others.
    /// sampling: the temperature (t) and top_p (p) sent unless an agent sets its own temperature, from the
    ///   model's family (Qwen t=0.55 p=1, Gemini t=1 p=0.95, Kimi K2 t=0.6…); `-` sends none.
    /// effort: the levels `run --effort` and `effort = ".."` may ask of the model (none, low, medium, high,
    ///   max), sent as its provider takes them (Anthropic thinking, OpenAI reasoning effort, Gemini
    ///   thinking config); `-`: the model does not reason.
    /// Set them per model in your config:
    ///
    ///   [provider.local.models."qwen2.5-coder"]
    ///   tools = "edit"              # or "patch"
    ///   temperature = 0.55
    ///   top_p = 1.0
    ///   effort = "high"             # the default effort; `reasoning = true` for a model not listed
    ///   tool_call_text = "parse"    # "off" | "warn" (default) | "parse": an answer that is a tool call
    ///                               # written as text (a server without a tool-call parser) becomes a call
    #[command(verbatim_doc_comment)]
    Models(models::ModelsArgs),
    /// Tokens, prompt-cache hit rate and cost of the stored sessions, by model, project or day.
    ///
    /// input counts every prompt token (uncached, cache read and cache write); hit = cache read / input.
    Stats(stats::StatsArgs),
    /// Run an offline demo: a scripted model fixes a small project through the real pipeline.
    Demo(demo::DemoArgs),
    /// List or revoke saved "always" permission approvals.
    #[command(subcommand)]
    Permissions(permissions::PermissionsCommand),
    /// Trust a project's own config (codeloop.toml, .codeloop/): until then it may only narrow yours.
    Trust(trust::TrustArgs),
    /// List and test hooks (the user's programs run around the agent's events, Claude Code's format).
    #[command(subcommand)]
    Hooks(hooks::HooksCommand),
    /// Show and test the OS sandbox that walls in the commands tools run.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// MCP servers: list them (state, tools, sign-in), add or remove one in your config, sign in to a
    /// remote one or forget its sign-in.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Language servers: which ones this project uses and whether they answer (`lsp status`).
    #[command(subcommand)]
    Lsp(lsp::LspCommand),
    /// Check that a run could start here: config, model, provider keys and reachability, data dir,
    /// sandbox, git, MCP commands. Exit 1 when the model a run would use is unusable.
    Doctor(doctor::DoctorArgs),
    /// Keep the data dir bounded: remove old sessions (`[storage] max_age_days`), the oldest ones while it
    /// is over `[storage] max_bytes`, and spilled outputs and snapshots nothing uses. A running session,
    /// or one touched in the last day, is never removed.
    Gc(gc::GcArgs),
    /// Write a commented user config to start from.
    #[command(subcommand)]
    Config(config_cmd::ConfigCommand),
    /// Print shell completions: `codeloop completions bash > ~/.local/share/bash-completion/completions/codeloop`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// `--format` of commands that print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// What `run` does with permission questions when no terminal can answer them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnAsk {
    /// Refuse what would be asked: the run stops and says which rule would allow it.
    Deny,
    /// Allow what would be asked, except protected paths, sandbox escapes and the doom-loop brake.
    Allow,
}

/// Exit code of an interrupted run (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit code of a run stopped by SIGTERM (128 + SIGTERM).
pub const EXIT_TERMINATED: u8 = 143;

fn main() -> ExitCode {
    // The sandbox helper mode: put the walls up and exec the command. First, before any thread starts (the
    // kernel refuses a user namespace to a multi-threaded process).
    if std::env::args_os().nth(1).is_some_and(|a| a == codeloop_sandbox::HELPER_ARG) {
        return codeloop_sandbox::helper_main(std::env::args_os().skip(2).collect());
    }
    let cli = Cli::parse();
    let command = match cli.command {
        Some(command) => command,
        None if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() => Command::Tui(cli.tui),
        None => {
            let _ = <Cli as clap::CommandFactory>::command().print_help();
            return ExitCode::SUCCESS;
        }
    };
    // The UI logs only when asked (CODELOOP_LOG); its stderr goes to tui.log in the data dir meanwhile.
    if !matches!(command, Command::Tui(_)) || std::env::var_os("CODELOOP_LOG").is_some() {
        env::init_tracing();
    }
    // A headless run is one stream through one pipeline: on one thread it needs no cross-thread wake-up
    // per streamed chunk (blocking work still goes to the blocking pool, the store to its writer thread).
    // The server and the UI serve many clients and keep two workers.
    let mut builder = match command {
        Command::Run(_) | Command::Demo(_) => tokio::runtime::Builder::new_current_thread(),
        _ => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(2);
            builder
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match command {
            Command::Tui(args) => tui::tui(args).await,
            Command::Run(args) if args.target.attach.is_some() => attach::run(args).await,
            Command::Run(args) => run::run(args).await,
            Command::Serve(args) => serve::serve(args).await,
            Command::Web(args) => web::web(args).await,
            Command::Acp(args) => acp::acp(args).await,
            Command::Session(command) => session::session(command).await,
            Command::Models(args) => models::models(args).await,
            Command::Demo(args) => demo::demo(args).await,
            Command::Stats(args) => stats::stats(args).await,
            Command::Permissions(command) => permissions::permissions(command).await,
            Command::Trust(args) => trust::trust(args),
            Command::Hooks(command) => hooks::hooks(command).await,
            Command::Sandbox(command) => sandbox::sandbox(command),
            Command::Doctor(args) => doctor::doctor(args).await,
            Command::Gc(args) => gc::gc(args).await,
            Command::Mcp(command) => mcp::mcp(command).await,
            Command::Lsp(command) => lsp::lsp(command).await,
            Command::Config(command) => config_cmd::config(command),
            Command::Completions { shell } => {
                let mut command = <Cli as clap::CommandFactory>::command();
                clap_complete::generate(shell, &mut command, "codeloop", &mut std::io::stdout());
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    // Don't wait for stray blocking tasks (e.g. a tool that ignores cancellation) at exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(code) => code,
        // The reader of stdout went away (`codeloop models | head -2`): a normal end.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            // Errors can quote the model or a tool (a session id, a path, a provider's message).
            eprintln!("error: {}", terminal::for_stderr(&format!("{error:#}")));
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `--dir` or the current directory.
pub fn project_dir(dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let dir = match dir {
        Some(dir) => dir,
        None => std::env::current_dir()?,
    };
    let dir =
        dir.canonicalize().map_err(|e| anyhow::anyhow!("cannot use directory {}: {e}", dir.display()))?;
    if !dir.is_dir() {
        anyhow::bail!("{} is not a directory", dir.display());
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every flag and positional argument of every command says what it is in `--help`.
    #[test]
    fn every_argument_has_a_help_text() {
        fn missing(command: &clap::Command, path: &str, out: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if id != "help" && id != "version" && arg.get_help().is_none() {
                    out.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                missing(sub, &format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut out = Vec::new();
        missing(&Cli::command(), "codeloop", &mut out);
        assert_eq!(out, Vec::<String>::new());
    }
}
