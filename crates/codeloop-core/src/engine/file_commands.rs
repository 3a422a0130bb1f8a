//! [`SessionCommand::RunCommand`](crate::SessionCommand::RunCommand) and the command list (DESIGN.md
//! §5g): which command a name means (a built-in, an MCP prompt, a Markdown file of the session's project
//! or the user), its one check, and its expansion into the prompt that is sent.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use codeloop_types::{ModelRef, SessionId};

use super::Engine;
use crate::coordinator::Accepted;
use crate::error::EngineError;
use crate::file_commands::{self, CommandFile, CommandInfo, CommandShell, CommandSource};
use crate::input::{Delivery, PromptInput};
use crate::outcome::RunOutcome;

/// What a command name means.
enum Resolved {
    Compact,
    Init,
    Mcp(String),
    File(Box<CommandFile>),
}

impl Engine {
    /// Every command a client may offer in `directory`: the built-ins, the Markdown commands (the
    /// project's over the user's) and the MCP prompts, sorted by name within each group.
    pub async fn commands(&self, directory: &Path) -> Vec<CommandInfo> {
        let mut all = file_commands::builtins();
        let files = self.command_files(directory).await;
        all.extend(files.values().filter(|f| !is_builtin(&f.name)).map(CommandInfo::from));
        all.extend(self.mcp_prompts().await.into_iter().map(|p| CommandInfo {
            name: p.command,
            description: p.description,
            argument_hint: (!p.arguments.is_empty()).then(|| {
                p.arguments
                    .iter()
                    .map(|a| if a.required { format!("<{}>", a.name) } else { format!("[{}]", a.name) })
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
            source: CommandSource::Mcp,
        }));
        all
    }

    /// The Markdown commands of `directory`'s project and of the user, by name.
    async fn command_files(&self, directory: &Path) -> BTreeMap<String, CommandFile> {
        let project = crate::instructions::ProjectInfo::discover(directory);
        let user = self.services.command_dirs.clone();
        tokio::task::spawn_blocking(move || {
            file_commands::load::load_all(&user, &project.root, &project.directory)
        })
        .await
        .unwrap_or_default()
    }

    /// Which command `name` (a leading `/` allowed) means for `session`, or the error naming the ones
    /// there are.
    async fn resolve_command(&self, session: &SessionId, name: &str) -> Result<Resolved, EngineError> {
        let name = name.trim().trim_start_matches('/');
        let directory = self.session(session).await?.directory;
        match name {
            file_commands::COMPACT => return Ok(Resolved::Compact),
            file_commands::INIT => return Ok(Resolved::Init),
            _ => {}
        }
        if name.starts_with("mcp__") && self.mcp_prompts().await.iter().any(|p| p.command == name) {
            return Ok(Resolved::Mcp(name.to_owned()));
        }
        if let Some(file) = self.command_files(Path::new(&directory)).await.remove(name) {
            return Ok(Resolved::File(Box::new(file)));
        }
        let available: Vec<String> =
            self.commands(Path::new(&directory)).await.into_iter().map(|c| c.name).collect();
        Err(EngineError::UnknownCommand { name: name.to_owned(), available: available.join(", ") })
    }

    /// The one check of a command, before anything runs: it exists, and a file's `agent:` and `model:`
    /// may be used.
    pub(super) async fn check_command(&self, session: &SessionId, name: &str) -> Result<(), EngineError> {
        match self.resolve_command(session, name).await? {
            Resolved::File(file) => {
                let directory = std::path::PathBuf::from(self.session(session).await?.directory);
                let (file, _) = self.as_trusted(*file, &directory);
                self.check_front_matter(&file).map(drop)
            }
            Resolved::Compact | Resolved::Init | Resolved::Mcp(_) => Ok(()),
        }
    }

    /// Whether the project of `directory` is trusted (`codeloop trust`).
    fn project_trusted(&self, directory: &Path) -> bool {
        self.services.project_trust.as_ref().is_some_and(|trusted| trusted(directory))
    }

    /// `file` as it may act (DESIGN.md §5j): an untrusted project's command never overrides the agent or
    /// model the person chose, runs as a subtask under another agent, or pre-approves tools — those keys
    /// are dropped, and the warning says so.
    fn as_trusted(&self, file: CommandFile, directory: &Path) -> (CommandFile, Option<String>) {
        let widening =
            file.agent.is_some() || file.model.is_some() || file.subtask || !file.allowed_tools.is_empty();
        if file.source != CommandSource::Project || !widening || self.project_trusted(directory) {
            return (file, None);
        }
        let mut ignored = Vec::new();
        if let Some(agent) = &file.agent {
            ignored.push(format!("agent: {agent}"));
        }
        if let Some(model) = &file.model {
            ignored.push(format!("model: {model}"));
        }
        if file.subtask {
            ignored.push("subtask: true".to_owned());
        }
        if !file.allowed_tools.is_empty() {
            ignored.push(format!("allowed-tools: {}", file.allowed_tools.join(", ")));
        }
        let warning = format!(
            "command `{}` comes from a project you have not trusted ({}): its {} {} ignored, so it runs with \
             the agent and model you chose; `codeloop trust` in the project lets them count",
            file.name,
            file.path.display(),
            ignored.join(", "),
            if ignored.len() == 1 { "is" } else { "are" },
        );
        (
            CommandFile { agent: None, model: None, subtask: false, allowed_tools: Vec::new(), ..file },
            Some(warning),
        )
    }

    /// The model a file's front matter names, checked; for a subtask, its agent must be a subagent. A bare
    /// model id (`model: claude-sonnet-4-0`, as many published command files write it) is looked up among
    /// the providers that can serve it; when none can, the session's model is used and the warning says so.
    fn check_front_matter(
        &self,
        file: &CommandFile,
    ) -> Result<(Option<ModelRef>, Option<String>), EngineError> {
        let context = |e: String| EngineError::Config {
            origin: format!("command `{}` ({})", file.name, file.path.display()),
            reason: e,
        };
        if let Some(agent) = &file.agent {
            if file.subtask {
                self.subagent(agent).map_err(context)?;
            } else {
                self.check_agent(agent).map_err(|e| context(e.to_string()))?;
            }
        }
        let Some(model) = &file.model else { return Ok((None, None)) };
        if !model.contains('/') {
            return Ok(match self.services.models.by_bare_id(model.trim()) {
                Some(found) => (Some(found), None),
                None => (
                    None,
                    Some(format!(
                        "command `{}` ({}) names model `{model}`, which none of your providers can serve: the \
                         session's model is used (write `provider/model`, or configure a provider that has it)",
                        file.name,
                        file.path.display()
                    )),
                ),
            });
        }
        let model = ModelRef::from_str(model).map_err(|e| context(e.to_string()))?;
        self.check_model(Some(&model)).map_err(|e| context(e.to_string()))?;
        Ok((Some(model), None))
    }

    fn subagent(&self, name: &str) -> Result<crate::agents::Agent, String> {
        match self.services.agents.get(name) {
            Some(agent) if agent.mode == crate::agents::AgentMode::Subagent => Ok(agent.clone()),
            _ => Err(format!("`{name}` is not a subagent, so the command cannot run as a subtask with it")),
        }
    }

    /// Runs command `name`: its expanded text is sent as the user's message, marked with its name.
    /// `accepted` is told once that message is durable, as for a prompt.
    pub(super) async fn submit_command(
        &self,
        session: &SessionId,
        name: &str,
        arguments: &str,
        delivery: Delivery,
        effort: Option<codeloop_types::Effort>,
        accepted: &Accepted,
    ) -> Result<RunOutcome, EngineError> {
        let arguments = arguments.trim();
        let (command, input) = match self.resolve_command(session, name).await? {
            Resolved::Compact => {
                let focus = (!arguments.is_empty()).then(|| arguments.to_owned());
                accepted.fire();
                return self.submit_compact(session, focus).await;
            }
            Resolved::Init => {
                let text = match arguments {
                    "" => file_commands::INIT_PROMPT.to_owned(),
                    more => format!("{}\n\n{more}", file_commands::INIT_PROMPT),
                };
                (file_commands::INIT.to_owned(), PromptInput::text(text))
            }
            Resolved::Mcp(command) => {
                let prompt = self.mcp_text(&command, arguments).await?;
                let mut input = PromptInput::text(prompt.text);
                input.parts.extend(prompt.files.into_iter().map(|file| crate::InputPart::File {
                    mime: file.mime,
                    url: file.url,
                    filename: file.filename,
                }));
                (command, input)
            }
            Resolved::File(file) => {
                return self.submit_file_command(session, &file, arguments, delivery, effort, accepted).await;
            }
        };
        let input = PromptInput { command: Some(command), effort: effort.or(input.effort), ..input };
        self.submit_prompt_accepted(session, input, delivery, accepted).await
    }

    /// An MCP prompt's text: the arguments, split as a shell would, fill its arguments in order (the
    /// last one takes what is left).
    async fn mcp_text(
        &self,
        command: &str,
        arguments: &str,
    ) -> Result<crate::mcp::McpPromptText, EngineError> {
        let prompt = self.mcp_prompts().await.into_iter().find(|p| p.command == command);
        let names: Vec<String> =
            prompt.map(|p| p.arguments.into_iter().map(|a| a.name).collect()).unwrap_or_default();
        let mut words = file_commands::template::split_args(arguments);
        let mut filled = BTreeMap::new();
        for (index, name) in names.iter().enumerate() {
            if words.is_empty() {
                break;
            }
            let value =
                if index + 1 == names.len() { std::mem::take(&mut words).join(" ") } else { words.remove(0) };
            filled.insert(name.clone(), value);
        }
        self.mcp_prompt(command, filled).await.map_err(|e| EngineError::Upstream(e.to_string()))
    }

    async fn submit_file_command(
        &self,
        id: &SessionId,
        file: &CommandFile,
        arguments: &str,
        delivery: Delivery,
        effort: Option<codeloop_types::Effort>,
        accepted: &Accepted,
    ) -> Result<RunOutcome, EngineError> {
        let session = self.session(id).await?;
        let directory = std::path::PathBuf::from(&session.directory);
        let (file, ignored) = self.as_trusted(file.clone(), &directory);
        let file = &file;
        let (model, unserved) = self.check_front_matter(file)?;
        for message in ignored.into_iter().chain(unserved) {
            self.services
                .bus
                .publish(codeloop_types::EventPayload::SessionWarning { session_id: id.clone(), message });
        }
        let agent = match (&file.agent, file.subtask) {
            (Some(agent), true) => self.subagent(agent).map_err(EngineError::Invalid)?,
            (None, true) => self.subagent("general").map_err(EngineError::Invalid)?,
            (agent, false) => {
                let name = agent.clone().unwrap_or_else(|| session.agent.clone());
                crate::agents::find(&self.services.agents, &name).map_err(crate::RunError::from)?.clone()
            }
        };
        let policy = {
            let (services, directory) = (self.services.clone(), directory.clone());
            tokio::task::spawn_blocking(move || services.project_policy(&directory))
                .await
                .map_err(|_| EngineError::internal("the command could not be read"))?
                .map_err(|e| EngineError::Config {
                    origin: "the config of the session's project".into(),
                    reason: e.to_string(),
                })?
        };
        let trusted = self.project_trusted(&directory);
        let runs: Arc<dyn crate::Runs> = Arc::new(self.coordinator.clone());
        let shell = CommandShell::new(self.services.clone(), runs, session.clone(), &agent, policy, trusted);
        let text = file_commands::expand(file, arguments, &shell).await;
        let input = PromptInput {
            agent: (!file.subtask).then(|| file.agent.clone()).flatten(),
            model,
            command: Some(file.name.clone()),
            allowed_tools: file.allowed_tools.clone(),
            effort,
            ..PromptInput::text(text)
        };
        if !file.subtask {
            return self.submit_prompt_accepted(id, input, delivery, accepted).await;
        }
        self.check_prompt(id, &input).await?;
        let child = crate::subagent::command_child(&self.services, &session, &agent, &file.name)
            .map_err(EngineError::internal)?;
        Ok(self.coordinator.prompt_accepted(&child.id, input, Delivery::Queue, accepted).await?)
    }
}

fn is_builtin(name: &str) -> bool {
    name == file_commands::COMPACT || name == file_commands::INIT
}
