//! `codeloop run`: send one message, stream the answer, exit with a code that says how it ended
//! (0 finished, 1 error, 130 interrupted).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use codeloop_core::models::ModelChoice;
use codeloop_core::permission::AskPolicy;
use codeloop_core::{
    Delivery, Engine, EngineError, PermissionAnswer, PromptInput, RunError, RunOutcome, SessionCommand,
    StopReason,
};
use codeloop_types::SessionFilter;
use codeloop_types::{EventPayload, ModelRef, PermissionRequest, Session, SessionId};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::Instant;

use crate::render::Renderer;
use crate::session_args::SessionArgs;
use crate::terminal::for_stderr;
use crate::{EXIT_INTERRUPTED, EXIT_TERMINATED, Format, OnAsk, env, project_dir};

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: SessionArgs,
    /// text: the answer on stdout, activity on stderr; json: one bus event per line.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Answer for permission questions when no terminal can ask (default: deny).
    #[arg(long, value_enum)]
    pub on_ask: Option<OnAsk>,
    /// Stop the run once it has cost this much (USD): nothing more is sent to the model, exit 1.
    /// Sets `[limits] run_max_cost_usd` for this run.
    #[arg(long, value_name = "USD", value_parser = parse_max_cost)]
    pub max_cost: Option<f64>,
    /// How hard the model thinks for this message: none, low, medium, high or max. Sent in the form the
    /// model's provider takes (Anthropic thinking, OpenAI reasoning effort, Gemini thinking config); a
    /// level the model does not take is not sent (a warning says so). Default: the agent's or model's
    /// `effort` in config, else the provider's default.
    #[arg(long, value_name = "LEVEL")]
    pub effort: Option<codeloop_types::Effort>,
    /// Run command NAME (a Markdown command file, an MCP prompt `mcp__SERVER__PROMPT`, `init` or
    /// `compact`); the words after it are its arguments.
    #[arg(long, value_name = "NAME")]
    pub command: Option<String>,
    /// The message (with --command: the command's arguments). Read from stdin when omitted and stdin is not a terminal.
    pub message: Vec<String>,
}

/// `codeloop run` in this process (`--attach` runs go to [`crate::attach::run`]).
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let message = match &args.command {
        Some(_) => args.message.join(" "),
        None => message_text(&args.message)?,
    };
    let dir = project_dir(args.target.dir.clone())?;
    let interactive =
        args.on_ask.is_none() && std::io::stdin().is_terminal() && std::io::stderr().is_terminal();
    let policy = match (args.on_ask, interactive) {
        (Some(OnAsk::Allow), _) => AskPolicy::Allow,
        (Some(OnAsk::Deny), _) => AskPolicy::Deny,
        (None, true) => AskPolicy::Wait,
        (None, false) => AskPolicy::Deny,
    };
    if interactive {
        crate::trust::offer(&dir)?;
    }
    let mut config = env::load_config(Some(&dir))?;
    if let Some(max_cost) = args.max_cost {
        config.limits.run_max_cost_usd = Some(max_cost);
    }
    let engine = env::open_engine(config, policy)?;
    let model: Option<ModelRef> = args.target.model.as_deref().map(|m| engine.parse_model(m)).transpose()?;
    let telemetry = env::start_telemetry(&engine);
    if let Some(agent) = &args.target.agent {
        engine.check_agent(agent)?;
    }
    let session = pick_session(&engine, &args, &dir, model.clone()).await?;
    let send = match &args.command {
        Some(name) => {
            let send = Send::Command { name: name.clone(), arguments: message, effort: args.effort };
            // Checked before anything is sent: an unknown command names the ones there are (and a
            // session made for it is not left behind empty).
            if let Err(refused) = engine.validate(&send.command(&session.id)).await {
                let fresh = args.target.session.is_none() && !args.target.continue_last;
                if fresh {
                    let _ = engine.delete_session(&session.id).await;
                }
                return Err(refused.into());
            }
            send
        }
        None => Send::Prompt(PromptInput {
            model,
            agent: args.target.agent.clone(),
            effort: args.effort,
            ..PromptInput::text(message)
        }),
    };
    let driven = drive(&engine, &session.id, send, args.format, interactive).await;
    // The run's background jobs end with this process (DESIGN.md §5f): recorded as killed, not lost.
    engine.end_jobs().await;
    engine.end_session(&session.id, "other").await;
    env::finish_telemetry(telemetry).await;
    Ok(driven?.exit_code())
}

fn parse_max_cost(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(usd) if usd.is_finite() && usd >= 0.0 => Ok(usd),
        _ => Err(format!("`{text}` is not an amount in USD: give a number such as 0.50")),
    }
}

pub(crate) fn message_text(words: &[String]) -> anyhow::Result<String> {
    let mut text = words.join(" ");
    if text.trim().is_empty() && !std::io::stdin().is_terminal() {
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("cannot read the message from stdin")?;
    }
    if text.trim().is_empty() {
        anyhow::bail!("nothing to send: give a message, e.g. codeloop run \"make the failing test pass\"");
    }
    Ok(text)
}

async fn pick_session(
    engine: &Engine,
    args: &RunArgs,
    dir: &std::path::Path,
    model: Option<ModelRef>,
) -> anyhow::Result<Session> {
    let existing = if let Some(id) = &args.target.session {
        Some(engine.session(&SessionId::from(id.as_str())).await?)
    } else if args.target.continue_last {
        let filter = SessionFilter {
            directory: Some(dir.display().to_string()),
            limit: Some(1),
            ..Default::default()
        };
        let session = engine.sessions(filter).await?.into_iter().next();
        Some(session.with_context(|| {
            format!("no session to continue in {}: run without --continue first", dir.display())
        })?)
    } else {
        None
    };
    // Fail on an unusable model (unknown provider, missing key) before recording anything.
    let wanted = model.clone().or_else(|| existing.as_ref().and_then(|s| s.model.clone()));
    if wanted.is_none()
        && let Ok((chosen, ModelChoice::FromKey { variable })) = engine.default_model_choice()
    {
        eprintln!(
            "using {chosen} (found ${variable}); choose another with --model or `model = \"provider/model\"` \
             in ~/.config/codeloop/config.toml"
        );
    }
    engine.check_model(wanted.as_ref())?;
    match existing {
        Some(session) => Ok(session),
        None => Ok(engine.create_session(dir, args.target.agent.as_deref(), model, None).await?),
    }
}

/// What `run` sends: a message, or a command (DESIGN.md §5g) whose expanded text the engine sends.
pub enum Send {
    Prompt(PromptInput),
    Command { name: String, arguments: String, effort: Option<codeloop_types::Effort> },
}

impl Send {
    fn command(&self, session: &SessionId) -> SessionCommand {
        let session = session.clone();
        match self {
            Self::Prompt(input) => {
                SessionCommand::Prompt { session, input: input.clone(), delivery: Delivery::Queue }
            }
            Self::Command { name, arguments, effort } => SessionCommand::RunCommand {
                session,
                name: name.clone(),
                arguments: arguments.clone(),
                delivery: Delivery::Queue,
                effort: *effort,
            },
        }
    }
}

/// Events rendered before stdout is written out, at most.
const RENDER_BATCH: usize = 1024;
/// Stdout is written out at most this often while text streams (about 60 times a second).
const FRAME: std::time::Duration = std::time::Duration::from_millis(16);

/// Waits for `at`, or forever when there is nothing to wait for.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs the prompt while rendering events; Ctrl+C / SIGTERM abort cleanly.
pub async fn drive(
    engine: &Engine,
    session: &SessionId,
    send: Send,
    format: Format,
    interactive: bool,
) -> anyhow::Result<Driven> {
    let mut events = engine.bus().subscribe();
    let mut renderer = Renderer::new(format, session.clone());
    let asker = interactive.then(|| spawn_asker(engine.clone(), session.clone()));
    let prompt = engine.submit(send.command(session));
    tokio::pin!(prompt);
    // The signal that interrupted the run: SIGINT exits 130, SIGTERM 143. A second Ctrl+C quits at once.
    let mut interrupted: Option<u8> = None;
    let mut terminate = signal_terminate();
    let mut last_flush = Instant::now();
    let mut flush_at: Option<Instant> = None;
    let result = loop {
        tokio::select! {
            result = &mut prompt => break result,
            event = events.recv() => {
                match event {
                    Ok(event) => renderer.event(&event),
                    Err(RecvError::Lagged(skipped)) => renderer.lagged(skipped),
                    Err(RecvError::Closed) => {}
                }
                // Render what is already queued, then write it out at most once per frame: a fast
                // stream becomes one write per frame instead of one per delta.
                for _ in 0..RENDER_BATCH {
                    match events.try_recv() {
                        Ok(event) => renderer.event(&event),
                        Err(TryRecvError::Lagged(skipped)) => renderer.lagged(skipped),
                        Err(_) => break,
                    }
                }
                if last_flush.elapsed() >= FRAME {
                    renderer.flush();
                    last_flush = Instant::now();
                } else if flush_at.is_none() {
                    flush_at = Some(last_flush + FRAME);
                }
            }
            _ = sleep_until_some(flush_at) => {
                renderer.flush();
                last_flush = Instant::now();
                flush_at = None;
            }
            _ = tokio::signal::ctrl_c() => {
                if interrupted.is_some() {
                    eprintln!("\nquitting without waiting for cleanup (recovery settles the session on next open)");
                    std::process::exit(i32::from(EXIT_INTERRUPTED));
                }
                interrupted = Some(EXIT_INTERRUPTED);
                eprintln!("\ninterrupting… (Ctrl+C again to quit at once)");
                let engine = engine.clone();
                let session = session.clone();
                tokio::spawn(async move { engine.submit(SessionCommand::Abort { session }).await });
            }
            _ = terminate.recv(), if interrupted.is_none() => {
                interrupted = Some(EXIT_TERMINATED);
                let engine = engine.clone();
                let session = session.clone();
                tokio::spawn(async move { engine.submit(SessionCommand::Abort { session }).await });
            }
        }
    };
    // Everything the run published is already queued: render it before the summary.
    while let Ok(event) = events.try_recv() {
        renderer.event(&event);
    }
    if let Some(asker) = asker {
        asker.abort();
    }
    let outcome = match result {
        Ok(outcome) => outcome.into_run().context("the prompt did not run")?,
        Err(e @ (EngineError::Run(RunError::Store(_)) | EngineError::Store(_))) => {
            return Err(storage_error(engine, &e));
        }
        Err(other) => return Err(other.into()),
    };
    if let Some(message) = &outcome.message
        && let Ok(Some(last)) = engine.message(session, &message.id).await
    {
        renderer.catch_up(&last.parts);
    }
    let totals = engine.session(session).await.ok().map(|s| (s.tokens.input, s.tokens.output, s.cost));
    renderer.summary(&outcome, totals);
    engine.flush().await.map_err(|e| storage_error(engine, &e))?;
    Ok(Driven { outcome, signal_exit: interrupted })
}

/// A store failure says where the data lives: a full disk or a read-only directory is found there.
fn storage_error(engine: &Engine, error: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "could not save this session in the data directory {}: {error}; is the disk full or the directory \
         read-only?",
        engine.data_dir().display()
    )
}

/// A finished `drive`: the outcome, and the exit code of the signal that interrupted it, if one did.
pub struct Driven {
    pub outcome: RunOutcome,
    pub signal_exit: Option<u8>,
}

impl Driven {
    pub fn exit_code(&self) -> ExitCode {
        match (self.signal_exit, &self.outcome.stop) {
            (Some(code), StopReason::Interrupted) => ExitCode::from(code),
            _ => exit_code(&self.outcome),
        }
    }
}

fn signal_terminate() -> tokio::sync::mpsc::Receiver<()> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    if let Ok(mut sigterm) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        tokio::spawn(async move {
            while sigterm.recv().await.is_some() {
                if tx.send(()).await.is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// Asks permission questions on the terminal.
fn spawn_asker(engine: Engine, session: SessionId) -> tokio::task::JoinHandle<()> {
    let mut events = engine.bus().subscribe();
    tokio::spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            };
            match &event.payload {
                // The session's own asks, and those of its subagents (they name it as their parent).
                EventPayload::PermissionAsked(request)
                    if request.session_id == session
                        || request.parent_session_id.as_ref() == Some(&session) =>
                {
                    let request = request.clone();
                    let answer = tokio::task::spawn_blocking(move || ask_terminal(&request)).await;
                    if let Ok((request, answer)) = answer {
                        let _ = engine.submit(SessionCommand::AnswerPermission { request, answer }).await;
                    }
                }
                EventPayload::QuestionAsked(request)
                    if request.session_id == session
                        || request.parent_session_id.as_ref() == Some(&session) =>
                {
                    let request = request.clone();
                    let id = request.id.clone();
                    let answers =
                        tokio::task::spawn_blocking(move || ask_questions(&request)).await.ok().flatten();
                    let _ = engine.submit(SessionCommand::AnswerQuestion { request: id, answers }).await;
                }
                EventPayload::ElicitationAsked(request) if request.session_id == session => {
                    let request = request.clone();
                    let reply = tokio::task::spawn_blocking(move || ask_elicitation(&request.ask)).await;
                    let reply = reply.unwrap_or_else(|_| codeloop_types::ElicitationReply::decline());
                    let _ = engine.answer_elicitation(&request.session_id, &request.id, reply);
                }
                _ => {}
            }
        }
    })
}

pub(crate) fn ask_terminal(request: &PermissionRequest) -> (codeloop_types::PermissionId, PermissionAnswer) {
    let what = request.patterns.join(", ");
    // The patterns come from the model (a bash command, a path): shown, never obeyed, by the terminal.
    let prompt = format!(
        "\npermission: {} {what}\n  [o]nce  [a]lways ({})  [r]eject  reject with [m]essage > ",
        request.permission,
        request.always.join(", ")
    );
    eprint!("{}", for_stderr(&prompt));
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let answer = match line.trim().to_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => PermissionAnswer::Once,
        "a" | "always" => PermissionAnswer::Always,
        "m" | "message" => {
            eprint!("  message for the model > ");
            let mut message = String::new();
            let _ = std::io::stdin().read_line(&mut message);
            PermissionAnswer::Reject { message: Some(message.trim().to_owned()) }
        }
        _ => PermissionAnswer::Reject { message: None },
    };
    (request.id.clone(), answer)
}

/// Asks for what an MCP server wants on the terminal: a URL is shown (never opened), a form is filled
/// field by field (an empty answer takes the field's default, or leaves it out).
fn ask_elicitation(ask: &codeloop_types::ElicitationAsk) -> codeloop_types::ElicitationReply {
    use codeloop_types::{ElicitationAction, ElicitationReply};
    let read = || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        line.trim().to_owned()
    };
    eprintln!("\nMCP server {} asks: {}", for_stderr(&ask.server), for_stderr(&ask.message));
    if let Some(url) = &ask.url {
        eprintln!("  open: {}", for_stderr(url));
        eprint!("  [d]one there  d[e]cline  [c]ancel > ");
        return match read().to_lowercase().as_str() {
            "d" | "done" | "y" | "yes" => {
                ElicitationReply { action: ElicitationAction::Accept, content: None }
            }
            "c" | "cancel" => ElicitationReply { action: ElicitationAction::Cancel, content: None },
            _ => ElicitationReply::decline(),
        };
    }
    eprint!("  [a]nswer  [d]ecline  [c]ancel > ");
    match read().to_lowercase().as_str() {
        "a" | "answer" | "y" | "yes" => {}
        "c" | "cancel" => return ElicitationReply { action: ElicitationAction::Cancel, content: None },
        _ => return ElicitationReply::decline(),
    }
    let mut content = serde_json::Map::new();
    let properties = ask.schema.as_ref().and_then(|s| s.get("properties")).and_then(|p| p.as_object());
    for (field, spec) in properties.into_iter().flatten() {
        let kind = spec.get("type").and_then(|t| t.as_str()).unwrap_or("string");
        let title = spec.get("title").or(spec.get("description")).and_then(|t| t.as_str()).unwrap_or(field);
        let default = spec.get("default").map(|d| format!(" [{d}]")).unwrap_or_default();
        let choices = spec.get("enum").map(|e| format!(" one of {e}")).unwrap_or_default();
        eprint!("  {} ({kind}{}){} > ", for_stderr(title), for_stderr(&choices), for_stderr(&default));
        let answer = read();
        if answer.is_empty() {
            continue;
        }
        let value = match kind {
            "integer" | "number" => {
                serde_json::from_str(&answer).unwrap_or(serde_json::Value::String(answer))
            }
            "boolean" => {
                serde_json::Value::Bool(matches!(answer.to_lowercase().as_str(), "y" | "yes" | "true"))
            }
            _ => serde_json::Value::String(answer),
        };
        content.insert(field.clone(), value);
    }
    ElicitationReply { action: ElicitationAction::Accept, content: Some(serde_json::Value::Object(content)) }
}

/// Asks the model's questions on the terminal: a number picks an option (several with commas when
/// allowed), anything else is the answer itself; an empty line declines them all.
fn ask_questions(request: &codeloop_types::QuestionRequest) -> Option<Vec<Vec<String>>> {
    let mut answers = Vec::new();
    for question in &request.questions {
        eprintln!("\nquestion: {}", for_stderr(&question.question));
        for (n, option) in question.options.iter().enumerate() {
            let line = match &option.description {
                Some(description) => format!("  {}. {} — {description}", n + 1, option.label),
                None => format!("  {}. {}", n + 1, option.label),
            };
            eprintln!("{}", for_stderr(&line));
        }
        eprint!("  answer (empty declines) > ");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        let line = line.trim();
        if line.is_empty() {
            return None;
        }
        let picked: Option<Vec<String>> = line
            .split(',')
            .map(|n| n.trim().parse::<usize>().ok().and_then(|n| question.options.get(n.wrapping_sub(1))))
            .map(|o| o.map(|o| o.label.clone()))
            .collect();
        match picked {
            Some(labels) if !labels.is_empty() && (question.multiple || labels.len() == 1) => {
                answers.push(labels)
            }
            _ => answers.push(vec![line.to_owned()]),
        }
    }
    Some(answers)
}

pub fn exit_code(outcome: &RunOutcome) -> ExitCode {
    if outcome.message.as_ref().and_then(|m| m.finish) == Some(codeloop_types::Finish::Length) {
        eprintln!("warning: the answer was cut off at the model's output limit; ask it to continue");
    }
    match &outcome.stop {
        StopReason::Completed => ExitCode::SUCCESS,
        StopReason::StepLimit(steps) => {
            eprintln!("warning: stopped at the step limit ({steps} steps)");
            ExitCode::SUCCESS
        }
        StopReason::Interrupted => ExitCode::from(EXIT_INTERRUPTED),
        StopReason::HookStopped(reason) => {
            let reason = if reason.is_empty() { "a hook ended the run" } else { reason.as_str() };
            eprintln!("{}", for_stderr(reason));
            ExitCode::SUCCESS
        }
        StopReason::Blocked(message) => {
            eprintln!("error: {}", for_stderr(&message.to_string()));
            ExitCode::FAILURE
        }
        StopReason::Error(error) => {
            eprintln!("error: {}", for_stderr(error.message()));
            ExitCode::FAILURE
        }
        StopReason::Limit(reached) => {
            eprintln!("error: {reached}");
            ExitCode::FAILURE
        }
    }
}
