//! Test fixtures: a temp project, a fake [`ToolHost`] and helpers to run tools.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use codeloop_tools::{
    BuiltinConfig, CallInfo, OutputLimits, PermissionAsk, PermissionError, ProjectPaths, ToolContext,
    ToolFailure, ToolHost, ToolOutput, ToolRegistry,
};
use codeloop_types::Todo;
use serde_json::Value;
use tempfile::TempDir;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Records every ask and progress update; denies the permissions listed in `deny`.
#[derive(Default)]
pub struct FakeHost {
    pub asks: Mutex<Vec<PermissionAsk>>,
    pub deny: Mutex<Vec<String>>,
    pub progress: Mutex<Vec<Value>>,
    pub progressed: Notify,
    pub todos: Mutex<Vec<Todo>>,
}

#[async_trait]
impl ToolHost for FakeHost {
    async fn ask(&self, _call: &CallInfo, ask: PermissionAsk) -> Result<(), PermissionError> {
        let denied = self.deny.lock().unwrap().contains(&ask.permission);
        self.asks.lock().unwrap().push(ask);
        if denied { Err(PermissionError::Denied { message: "denied by test".into() }) } else { Ok(()) }
    }

    fn progress(&self, _call: &CallInfo, _title: Option<String>, metadata: Option<Value>) {
        if let Some(metadata) = metadata {
            self.progress.lock().unwrap().push(metadata);
        }
        self.progressed.notify_waiters();
    }

    async fn set_todos(&self, _call: &CallInfo, todos: Vec<Todo>) -> Result<(), String> {
        *self.todos.lock().unwrap() = todos;
        Ok(())
    }
}

pub struct Env {
    pub project: TempDir,
    pub output_dir: TempDir,
    pub host: Arc<FakeHost>,
    pub registry: ToolRegistry,
    pub cancel: CancellationToken,
    pub limits: OutputLimits,
    /// The session's temp dir, when a test gives it one.
    pub temp_dir: Option<PathBuf>,
}

impl Env {
    pub fn new() -> Self {
        let project = tempfile::tempdir().unwrap();
        let skills = project.path().join(".codeloop/skills");
        Self {
            registry: ToolRegistry::builtin_with(BuiltinConfig { skill_dirs: vec![skills] }),
            project,
            output_dir: tempfile::tempdir().unwrap(),
            host: Arc::new(FakeHost::default()),
            cancel: CancellationToken::new(),
            limits: OutputLimits::default(),
            temp_dir: None,
        }
    }

    pub fn root(&self) -> &Path {
        self.project.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    pub fn deny(&self, permission: &str) {
        self.host.deny.lock().unwrap().push(permission.to_string());
    }

    pub fn asks(&self) -> Vec<PermissionAsk> {
        self.host.asks.lock().unwrap().clone()
    }

    pub fn asks_for(&self, permission: &str) -> Vec<PermissionAsk> {
        self.asks().into_iter().filter(|a| a.permission == permission).collect()
    }

    pub fn ctx(&self) -> ToolContext {
        ToolContext {
            call: CallInfo {
                session_id: "ses_test".into(),
                message_id: "msg_test".into(),
                call_id: "call_1".into(),
                agent: "build".into(),
            },
            project: ProjectPaths {
                temp_dir: self.temp_dir.clone(),
                ..ProjectPaths::new(self.root(), self.root())
            },
            tool_output_dir: self.output_dir.path().to_path_buf(),
            limits: self.limits,
            cancel: self.cancel.clone(),
            host: self.host.clone(),
            walls: None,
            seen: None,
        }
    }

    pub async fn run(&self, tool: &str, args: Value) -> Result<ToolOutput, ToolFailure> {
        self.registry.execute(tool, args, &self.ctx()).await
    }

    /// Runs a call that must succeed.
    pub async fn ok(&self, tool: &str, args: Value) -> ToolOutput {
        match self.run(tool, args).await {
            Ok(out) => out,
            Err(e) => panic!("{tool} failed: {e}"),
        }
    }

    /// Runs a call that must fail with an ordinary failure; returns its message.
    pub async fn fail(&self, tool: &str, args: Value) -> String {
        match self.run(tool, args).await {
            Err(ToolFailure::Failed(message)) => message,
            other => panic!("{tool}: expected a failure, got {other:?}"),
        }
    }
}
