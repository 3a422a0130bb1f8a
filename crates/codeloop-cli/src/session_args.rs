//! The flags `run` and `tui` share: which session, agent and model, where the project is, and whether to
//! drive a running server instead of an in-process engine.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct SessionArgs {
    /// Model as provider/model, e.g. openai/gpt-4.1, or a bare id (claude-sonnet-4-6) when one set-up
    /// provider serves it (default: `model` in config).
    #[arg(long, short)]
    pub model: Option<String>,
    /// Continue the most recent session in this directory.
    #[arg(long = "continue", short = 'c', conflicts_with = "session")]
    pub continue_last: bool,
    /// Continue a specific session (its id, ses_…, as `codeloop session list` shows it).
    #[arg(long, short)]
    pub session: Option<String>,
    /// Agent to use (build, plan, or a primary agent from config).
    #[arg(long)]
    pub agent: Option<String>,
    /// Drive a running `codeloop serve` at this URL instead of running in-process.
    #[arg(long)]
    pub attach: Option<String>,
    /// Project directory (default: the current directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

impl SessionArgs {
    /// `--model`, parsed.
    pub fn model(&self) -> anyhow::Result<Option<codeloop_types::ModelRef>> {
        self.model.as_deref().map(|text| text.parse().map_err(|e| anyhow::anyhow!("{e}"))).transpose()
    }
}
