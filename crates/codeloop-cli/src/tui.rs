//! `codeloop tui` (and `codeloop` alone in a terminal): opens the interactive UI of codeloop-tui on an
//! in-process engine, or on a running server with `--attach URL`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use codeloop_core::models::ModelChoice;
use codeloop_core::permission::AskPolicy;
use codeloop_tui::{Client, LocalClient, OnQuit, Options, RemoteClient, Start};
use codeloop_types::{ModelRef, SessionId};

use crate::{env, project_dir};

#[derive(Args, Debug, Default)]
pub struct TuiArgs {
    /// Model as provider/model, e.g. openai/gpt-4.1 (default: `model` in config).
    #[arg(long, short)]
    pub model: Option<String>,
    /// Continue the most recent session in this directory.
    #[arg(long = "continue", short = 'c', conflicts_with = "session")]
    pub continue_last: bool,
    /// Open a specific session.
    #[arg(long, short)]
    pub session: Option<String>,
    /// Agent to use (build, plan, or one from config).
    #[arg(long)]
    pub agent: Option<String>,
    /// Drive a running `codeloop serve` at this URL instead of running in-process.
    #[arg(long)]
    pub attach: Option<String>,
    /// Project directory (default: the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub async fn tui(args: TuiArgs) -> anyhow::Result<ExitCode> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        anyhow::bail!("the interactive UI needs a terminal: use `codeloop run MESSAGE` in scripts");
    }
    let dir = project_dir(args.dir.clone())?;
    let model: Option<ModelRef> = match &args.model {
        Some(text) => Some(text.parse().map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    let start = match (&args.session, args.continue_last) {
        (Some(id), _) => Start::Session(SessionId::from(id.as_str())),
        (None, true) => Start::Continue,
        (None, false) => Start::New,
    };
    let mut warnings = Vec::new();
    let mut engine = None;
    let (client, on_quit): (Arc<dyn Client>, OnQuit) = match &args.attach {
        Some(url) => {
            let token = crate::door::client_token(url, crate::env::data_dir().ok().as_deref());
            (Arc::new(RemoteClient::new(url, token.as_deref())?), OnQuit::Leave)
        }
        None => {
            crate::trust::offer(&dir)?;
            let loaded = env::config_sources(Some(&dir)).load()?;
            warnings = loaded.warnings.iter().map(ToString::to_string).collect();
            let opened = env::open_engine(loaded.config, AskPolicy::Wait)?;
            if model.is_none()
                && start == Start::New
                && let Ok((chosen, ModelChoice::FromKey { variable })) = opened.default_model_choice()
            {
                warnings.push(format!(
                    "using {chosen} (found ${variable}); choose another with /model provider/model or \
                     `model = \"provider/model\"` in ~/.config/codeloop/config.toml"
                ));
            }
            engine = Some(opened.clone());
            (Arc::new(LocalClient::new(opened)), OnQuit::Interrupt)
        }
    };
    let command = match &args.attach {
        Some(url) => format!("codeloop --attach {url}"),
        None => "codeloop".to_owned(),
    };
    let log = env::data_dir().ok().map(|d| d.join("tui.log"));
    let options = Options {
        directory: dir,
        start,
        model,
        agent: args.agent,
        on_quit,
        warnings,
        prompt: None,
        command,
        log,
    };
    codeloop_tui::run(client, options).await?;
    if let Some(engine) = engine {
        engine.flush().await?;
    }
    Ok(ExitCode::SUCCESS)
}
