//! `codeloop tui` (and `codeloop` alone in a terminal): opens the interactive UI of codeloop-tui on an
//! in-process engine, or on a running server with `--attach URL`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use codeloop_core::models::ModelChoice;
use codeloop_core::permission::AskPolicy;
use codeloop_tui::{Client, LocalClient, OnQuit, Options, RemoteClient, Start};
use codeloop_types::{ModelRef, SessionId};

use crate::session_args::SessionArgs;
use crate::{env, project_dir};

#[derive(Args, Debug, Default)]
pub struct TuiArgs {
    #[command(flatten)]
    pub target: SessionArgs,
}

pub async fn tui(args: TuiArgs) -> anyhow::Result<ExitCode> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        anyhow::bail!("the interactive UI needs a terminal: use `codeloop run MESSAGE` in scripts");
    }
    let dir = project_dir(args.target.dir.clone())?;
    let model: Option<ModelRef>;
    let start = match (&args.target.session, args.target.continue_last) {
        (Some(id), _) => Start::Session(SessionId::from(id.as_str())),
        (None, true) => Start::Continue,
        (None, false) => Start::New,
    };
    let mut warnings = Vec::new();
    let mut engine = None;
    let mut telemetry = None;
    let (client, on_quit): (Arc<dyn Client>, OnQuit) = match &args.target.attach {
        Some(url) => {
            model = args.target.model()?;
            let token = crate::door::client_token(url, crate::env::data_dir().ok().as_deref());
            (Arc::new(RemoteClient::new(url, token.as_deref())?), OnQuit::Leave)
        }
        None => {
            crate::trust::offer(&dir)?;
            let loaded = env::config_sources(Some(&dir)).load()?;
            warnings = loaded.warnings.iter().map(ToString::to_string).collect();
            let opened = env::open_engine(loaded.config, AskPolicy::Wait)?;
            model = args.target.model.as_deref().map(|m| opened.parse_model(m)).transpose()?;
            telemetry = env::start_telemetry(&opened);
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
    let command = match &args.target.attach {
        Some(url) => format!("codeloop --attach {url}"),
        None => "codeloop".to_owned(),
    };
    let log = env::data_dir().ok().map(|d| d.join("tui.log"));
    let options = Options {
        directory: dir,
        start,
        model,
        agent: args.target.agent,
        on_quit,
        warnings,
        prompt: None,
        command,
        log,
    };
    let ran = codeloop_tui::run(client, options).await;
    if let Some(engine) = engine {
        // Quitting ends the session's background jobs (DESIGN.md §5f).
        engine.end_jobs().await;
        engine.end_started_sessions("prompt_input_exit").await;
        env::finish_telemetry(telemetry.take()).await;
        engine.flush().await?;
    }
    ran?;
    Ok(ExitCode::SUCCESS)
}
