//! `codeloop demo`: an offline end-to-end run. A scripted model served by the test kit over real HTTP on
//! 127.0.0.1 fixes a typo in a small project: it reads the test, reads the script, edits it, runs the
//! test with bash and answers. Everything but the model is the real pipeline (store, tools, permissions).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use codeloop_core::config::{Config, CostSettings, ModelSettings, ProviderSettings};
use codeloop_core::permission::AskPolicy;
use codeloop_core::{EngineOptions, PromptInput, StopReason};
use codeloop_provider::WireApi;
use codeloop_testkit::{FakeProvider, Reply, Script, ScriptUsage, Turn};
use serde_json::json;

use crate::{Format, env};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Create the demo project here (an empty or new directory) instead of a temporary one.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// text: the answer on stdout, activity on stderr; json: one bus event per line.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Watch the demo in the interactive UI (quit with Ctrl+C twice or /quit).
    #[arg(long, conflicts_with = "format")]
    pub tui: bool,
}

const GREET: &str = "#!/usr/bin/env bash\necho \"Helo, wrld\"\n";
const TEST: &str = "#!/usr/bin/env bash\nout=$(bash greet.sh)\nif [ \"$out\" = \"Hello, world\" ]; then\n  echo PASS\nelse\n  echo \"FAIL: expected 'Hello, world', got '$out'\"\n  exit 1\nfi\n";
const AGENTS: &str = "# Demo project\nRun `bash test.sh` to check your work.\n";
pub const TASK: &str = "Make the failing test in test.sh pass.";

fn script() -> Script {
    Script::new([
        Turn::from(
            Reply::tool_call("read", json!({"filePath": "test.sh"}))
                .with_reasoning("The user wants test.sh to pass. I should read the test first.")
                .with_text("I'll start by reading the test.")
                .with_usage(ScriptUsage::new(2_310, 48)),
        ),
        Turn::from(
            Reply::tool_call("read", json!({"filePath": "greet.sh"}))
                .with_text("The test runs greet.sh and expects \"Hello, world\". Let me look at it.")
                .with_usage(ScriptUsage::new(2_520, 41).with_cached(2_300)),
        ),
        Turn::from(
            Reply::tool_call(
                "edit",
                json!({"filePath": "greet.sh", "oldString": "echo \"Helo, wrld\"", "newString": "echo \"Hello, world\""}),
            )
            .with_text("The greeting has two typos. Fixing them.")
            .with_usage(ScriptUsage::new(2_690, 63).with_cached(2_500)),
        ),
        Turn::from(
            Reply::tool_call("bash", json!({"command": "bash test.sh", "description": "Run the test"}))
                .with_usage(ScriptUsage::new(2_840, 30).with_cached(2_680)),
        ),
        Turn::from(
            Reply::text("Fixed the two typos in `greet.sh` (\"Helo, wrld\" → \"Hello, world\"). `bash test.sh` now prints PASS.")
                .with_text_chunks(12)
                .with_chunk_delay_ms(15)
                .with_usage(ScriptUsage::new(2_960, 35).with_cached(2_830)),
        ),
    ])
}

fn write_project(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if std::fs::read_dir(dir)?.next().is_some() {
        anyhow::bail!("{} is not empty: give an empty or new directory to --dir", dir.display());
    }
    std::fs::write(dir.join("greet.sh"), GREET)?;
    std::fs::write(dir.join("test.sh"), TEST)?;
    std::fs::write(dir.join("AGENTS.md"), AGENTS)?;
    Ok(())
}

fn demo_config(base_url: String) -> Config {
    let mut models = BTreeMap::new();
    models.insert(
        "scripted".to_owned(),
        ModelSettings {
            context: Some(128_000),
            output: Some(8_192),
            cost: Some(CostSettings { input: 1.0, output: 4.0, cache_read: 0.1, cache_write: 0.0 }),
            ..Default::default()
        },
    );
    let mut config = Config { model: Some("demo/scripted".into()), ..Default::default() };
    config.provider.insert(
        "demo".into(),
        ProviderSettings { api: WireApi::OpenAiChat, base_url: Some(base_url), models, ..Default::default() },
    );
    config
}

/// How to call this binary again, as typed from anywhere: `codeloop` when that is what `PATH` finds, else
/// the binary's full path (e.g. under `target/release` after `cargo run`).
fn invocation() -> String {
    let Ok(me) = std::env::current_exe().and_then(|p| p.canonicalize()) else { return "codeloop".into() };
    let on_path = std::env::var_os("PATH")
        .map(|dirs| std::env::split_paths(&dirs).map(|d| d.join("codeloop")).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|candidate| candidate.is_file());
    match on_path.and_then(|p| p.canonicalize().ok()) {
        Some(found) if found == me => "codeloop".into(),
        _ => me.display().to_string(),
    }
}

pub async fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    // Without --dir the project lives in a temporary directory that is removed when the demo ends (the
    // session stays in the data directory).
    let (dir, temporary) = match args.dir {
        Some(dir) => (dir, None),
        None => {
            let temporary = tempfile::Builder::new()
                .prefix("codeloop-demo-")
                .tempdir()
                .context("cannot create a temporary directory for the demo project")?;
            (temporary.path().to_owned(), Some(temporary))
        }
    };
    write_project(&dir)?;
    let dir = dir.canonicalize()?;
    let provider =
        FakeProvider::start(script()).await.context("cannot start the scripted model on 127.0.0.1")?;
    let data_dir = env::data_dir()?;
    let mut options = EngineOptions::new(&data_dir, demo_config(provider.base_url()));
    options.ask_policy = AskPolicy::Allow;
    let engine = codeloop_core::Engine::open(options)
        .with_context(|| format!("cannot open the data directory {}", data_dir.display()))?;
    let session = engine.create_session(&dir, None, None, None).await?;
    if args.tui {
        let options = codeloop_tui::Options {
            directory: dir.clone(),
            start: codeloop_tui::Start::Session(session.id.clone()),
            model: None,
            agent: None,
            on_quit: codeloop_tui::OnQuit::Interrupt,
            warnings: Vec::new(),
            prompt: Some(TASK.to_owned()),
            command: invocation(),
            log: Some(data_dir.join("tui.log")),
        };
        let client = std::sync::Arc::new(codeloop_tui::LocalClient::new(engine.clone()));
        codeloop_tui::run(client, options).await?;
        engine.flush().await?;
        eprintln!("demo project: {}", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    if args.format == Format::Text {
        let removed = if temporary.is_some() {
            " (temporary: removed when the demo ends; keep one with --dir PATH)"
        } else {
            ""
        };
        eprintln!("demo project: {}{removed}\ntask: {TASK}\n", dir.display());
    }
    let outcome = crate::run::drive(
        &engine,
        &session.id,
        crate::run::Send::Prompt(PromptInput::text(TASK)),
        args.format,
        false,
    )
    .await?
    .outcome;
    let greet = std::fs::read_to_string(dir.join("greet.sh")).unwrap_or_default();
    if outcome.stop != StopReason::Completed || !greet.contains("Hello, world") {
        eprintln!("demo failed: the run ended with {:?}", outcome.stop);
        return Ok(ExitCode::FAILURE);
    }
    if args.format == Format::Text {
        eprintln!(
            "\n✓ greet.sh was changed on disk ({}).\n  The model made {} requests; see them with: {} session show {}",
            dir.join("greet.sh").display(),
            provider.request_count(),
            invocation(),
            session.id
        );
    }
    Ok(ExitCode::SUCCESS)
}
