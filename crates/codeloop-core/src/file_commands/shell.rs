//! A command's `` !`cmd` `` parts and `@path` reads, done for one session as its tools would do them: the
//! bash tool itself runs each command, with the session's rules (agent, config, session, an untrusted
//! project's narrowing), asks, OS walls and PreToolUse/PostToolUse hooks, so a template gets no more
//! than a tool call would.

use std::path::PathBuf;
use std::sync::Arc;

use codeloop_tools::{CallInfo, PermissionAsk, ToolContext};
use codeloop_types::{MessageId, PermissionRule, Session};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agents::Agent;
use crate::instructions::ProjectInfo;
use crate::processor::{TOOL_WATCHDOG, hooked};
use crate::runs::Runs;
use crate::services::Services;
use crate::tool_host::ToolGate;

pub(crate) struct CommandShell {
    services: Arc<Services>,
    gate: Arc<ToolGate>,
    paths: codeloop_tools::ProjectPaths,
    walls: Option<Arc<codeloop_tools::Walls>>,
    session: Session,
    agent: String,
    cwd: PathBuf,
    root: PathBuf,
    trusted: bool,
}

impl CommandShell {
    /// The shell of `session` under `agent`; `trusted` says whether the project's own commands may run
    /// theirs.
    pub(crate) fn new(
        services: Arc<Services>,
        runs: Arc<dyn Runs>,
        session: Session,
        agent: &Agent,
        policy: crate::services::ProjectPolicy,
        trusted: bool,
    ) -> Self {
        let project = ProjectInfo::discover(std::path::Path::new(&session.directory));
        let paths = services.project_paths(&project, &session.id);
        let walls = crate::walls::walls_for(&services.walls, &services.config.sandbox, &paths, &agent.name)
            .map(Arc::new);
        let mut layers: Vec<PermissionRule> = agent.permission.clone();
        layers.extend(policy.permission.iter().cloned());
        layers.extend(session.permission.iter().cloned());
        // Its `` !`cmd` `` parts are Bash calls to the session's PreToolUse/PostToolUse hooks too.
        let hooks =
            services.turn_hooks(&session.id, &project.directory, policy.hooks.clone(), Default::default());
        let gate = Arc::new(
            ToolGate::new(
                services.clone(),
                runs,
                session.id.clone(),
                session.parent_id.clone(),
                Arc::new(layers),
                policy.narrowing.clone(),
                project.root.display().to_string(),
            )
            .with_hooks(hooks),
        );
        Self {
            services,
            gate,
            paths,
            walls,
            agent: agent.name.clone(),
            cwd: project.directory,
            root: project.root,
            session,
            trusted,
        }
    }

    pub(crate) fn trusted(&self) -> bool {
        self.trusted
    }

    /// `@path` as text, or a note in its place (outside the project; a file the read rules ask about).
    pub(crate) fn inline_file(&self, path: &str) -> String {
        let readable = |real: &std::path::Path| {
            let root = self.root.canonicalize().unwrap_or_else(|_| self.root.clone());
            let relative = real.strip_prefix(&root).unwrap_or(real).display().to_string();
            self.gate.allows(&PermissionAsk {
                permission: "read".into(),
                patterns: vec![relative],
                always: Vec::new(),
                metadata: serde_json::Value::Null,
                grant: Default::default(),
            })
        };
        super::template::inline_file(path, &self.cwd, &self.root, readable)
    }

    /// The output of `command`, run by the bash tool; a refusal or failure becomes a note.
    pub(crate) async fn run(&self, command: &str) -> String {
        let (events, _drained) = tokio::sync::mpsc::unbounded_channel();
        let ctx = ToolContext {
            call: CallInfo {
                session_id: self.session.id.clone(),
                // Not a stored message: the template is expanded before its message exists.
                message_id: MessageId::new(),
                call_id: format!("command_{}", codeloop_types::now_ms()),
                agent: self.agent.clone(),
            },
            project: self.paths.clone(),
            tool_output_dir: self.services.tool_output_dir.clone(),
            limits: self.services.limits(),
            cancel: CancellationToken::new(),
            host: self.gate.host(events),
            walls: self.walls.clone(),
            seen: None,
        };
        let input = json!({ "command": command, "description": "command template" });
        let limit = self.services.tools.get("bash").and_then(|t| t.deadline(&input)).unwrap_or(TOOL_WATCHDOG);
        let run =
            hooked::execute(self.gate.clone(), self.services.tools.clone(), "bash".into(), input, ctx, limit);
        match run.await {
            Ok(output) if output.output == "(no output)" => String::new(),
            Ok(output) => output.output.trim_end_matches('\n').to_owned(),
            Err(failure) => format!("[not run: {failure}]"),
        }
    }
}
