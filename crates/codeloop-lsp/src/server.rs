//! One running language server: started from a ready-made command (the caller puts the walls up), the
//! `initialize` handshake, full-text document sync, the diagnostics it publishes, and requests.
//!
//! Owns: the server's process, its stdio and what it has told us. Must not: decide which server serves
//! which file, or wall the process (the caller does both).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use codeloop_types::LockExt as _;
use lsp_types::{Diagnostic, ServerCapabilities};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};

use crate::incoming;
use crate::rpc::{self, RpcError};

/// After a file's first diagnostics arrive, how long another publish for it may follow (servers that
/// send syntax errors first and type errors a moment later).
const SETTLE: Duration = Duration::from_millis(50);

/// How to run one server and what it serves.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerSpec {
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// File extensions served, without the dot (`py`, `ts`).
    pub extensions: Vec<String>,
    /// Files or folders that mark a project root for this server (`pyproject.toml`, `package.json`).
    pub root_markers: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Sent as `initializationOptions`; its sections also answer `workspace/configuration`.
    pub initialization: Option<Value>,
}

impl ServerSpec {
    pub fn serves(&self, path: &Path) -> bool {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or_default();
        self.extensions.iter().any(|e| e.trim_start_matches('.').eq_ignore_ascii_case(ext))
    }
}

/// Why talking to a server failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LspError {
    #[error("cannot start `{program}`: {reason}")]
    Start { program: String, reason: String },
    #[error("no answer to `{method}` within {} s{}", waited.as_secs_f32(), last_words(.stderr))]
    Timeout { method: String, waited: Duration, stderr: Option<String> },
    #[error("the server is gone ({reason}){}", last_words(.stderr))]
    Gone { reason: String, stderr: Option<String> },
    #[error("`{method}` failed: {error}")]
    Refused { method: String, error: RpcError },
    #[error("the server's answer to `{method}` is not what LSP says: {reason}")]
    Malformed { method: String, reason: String },
}

fn last_words(stderr: &Option<String>) -> String {
    stderr.as_ref().map(|line| format!("; its last words: {line}")).unwrap_or_default()
}

/// What a server said of one file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Published {
    pub(crate) items: Vec<Diagnostic>,
    /// The publish counter when it arrived.
    pub(crate) seq: u64,
}

/// The reader task's side: what arrived, shared with the callers.
pub(crate) struct Shared {
    pub(crate) pending: std::sync::Mutex<HashMap<i64, oneshot::Sender<Result<Value, RpcError>>>>,
    pub(crate) diagnostics: std::sync::Mutex<HashMap<PathBuf, Published>>,
    /// Counts publishes; waiters watch it.
    pub(crate) publishes: watch::Sender<u64>,
    /// Why the connection ended; `None` while it is up.
    pub(crate) ended: std::sync::Mutex<Option<String>>,
    pub(crate) stderr: std::sync::Mutex<VecDeque<String>>,
    /// Work-done progress tokens begun and not ended (indexing, analysis).
    pub(crate) working: std::sync::Mutex<HashSet<String>>,
    /// Messages that were not JSON-RPC, skipped.
    pub(crate) malformed: std::sync::atomic::AtomicU64,
    pub(crate) root: PathBuf,
    pub(crate) settings: Option<Value>,
}

impl Shared {
    pub(crate) fn last_stderr(&self) -> Option<String> {
        self.stderr.locked().back().map(|line| codeloop_types::escape_controls(line).into_owned())
    }

    pub(crate) fn end(&self, reason: String) {
        self.ended.locked().get_or_insert(reason);
        // Dropping the senders answers every waiting request with "gone".
        self.pending.locked().clear();
        self.publishes.send_modify(|n| *n += 1);
    }
}

/// What waiting for a file's diagnostics gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Waited {
    /// The file's diagnostics as of the change (possibly none).
    Published(Vec<Diagnostic>),
    /// Nothing came within the wait; `indexing` when the server said it is still working.
    Pending { indexing: bool },
}

/// An open document.
struct Document {
    version: i32,
    stamp: Option<Stamp>,
}

/// What tells a file changed on disk without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: std::time::SystemTime,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp { modified: meta.modified().ok()?, len: meta.len() })
}

/// A started server.
pub struct Server {
    name: String,
    shared: Arc<Shared>,
    /// Our messages, written in order by the writer task. Unbounded on purpose: the reader answers the
    /// server's requests through it and must never wait for the server to read.
    out: mpsc::UnboundedSender<Vec<u8>>,
    next_id: AtomicI64,
    /// Open documents: their versions and what the file was when last sent.
    docs: std::sync::Mutex<HashMap<PathBuf, Document>>,
    child: std::sync::Mutex<Option<tokio::process::Child>>,
    pid: Option<u32>,
    capabilities: ServerCapabilities,
    started: Instant,
}

impl Server {
    /// Spawns `command` (stdio is set here), sends `initialize` and waits up to `timeout` for the answer.
    pub async fn start(
        spec: &ServerSpec,
        root: &Path,
        mut command: tokio::process::Command,
        timeout: Duration,
    ) -> Result<Arc<Self>, LspError> {
        let program = spec.command.first().cloned().unwrap_or_default();
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| LspError::Start { program: program.clone(), reason: e.to_string() })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(LspError::Start { program, reason: "its stdio could not be piped".into() });
        };
        let shared = Arc::new(Shared {
            pending: Default::default(),
            diagnostics: Default::default(),
            publishes: watch::Sender::new(0),
            ended: Default::default(),
            stderr: Default::default(),
            working: Default::default(),
            malformed: Default::default(),
            root: root.to_owned(),
            settings: spec.initialization.clone(),
        });
        let (out, outgoing) = mpsc::unbounded_channel();
        tokio::spawn(incoming::write_all(stdin, outgoing, shared.clone()));
        tokio::spawn(incoming::read_all(stdout, out.clone(), shared.clone()));
        tokio::spawn(incoming::keep_stderr(stderr, shared.clone()));
        let mut server = Self {
            name: spec.name.clone(),
            shared,
            out,
            next_id: AtomicI64::new(1),
            docs: Default::default(),
            pid: child.id(),
            child: std::sync::Mutex::new(Some(child)),
            capabilities: ServerCapabilities::default(),
            started: Instant::now(),
        };
        let answer = server.request("initialize", initialize_params(root, spec), timeout).await?;
        server.capabilities = serde_json::from_value(answer.get("capabilities").cloned().unwrap_or_default())
            .map_err(|e| LspError::Malformed { method: "initialize".into(), reason: e.to_string() })?;
        server.notify("initialized", json!({}));
        if let Some(settings) = &spec.initialization {
            server.notify("workspace/didChangeConfiguration", json!({ "settings": settings }));
        }
        Ok(Arc::new(server))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    pub fn capabilities(&self) -> &ServerCapabilities {
        &self.capabilities
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Why the server is gone; `None` while it runs.
    pub fn gone(&self) -> Option<String> {
        self.shared.ended.locked().clone()
    }

    /// Whether it says it is still indexing or analysing.
    pub fn indexing(&self) -> bool {
        !self.shared.working.locked().is_empty()
    }

    /// Messages it sent that were not JSON-RPC.
    pub fn malformed(&self) -> u64 {
        self.shared.malformed.load(Ordering::Relaxed)
    }

    pub fn last_stderr(&self) -> Option<String> {
        self.shared.last_stderr()
    }

    fn gone_error(&self) -> LspError {
        LspError::Gone {
            reason: self.gone().unwrap_or_else(|| "it closed the connection".into()),
            stderr: self.shared.last_stderr(),
        }
    }

    pub fn notify(&self, method: &str, params: Value) {
        let _ = self.out.send(rpc::frame(&json!({"jsonrpc": "2.0", "method": method, "params": params})));
    }

    /// Sends a request and waits up to `timeout` for its answer.
    pub async fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, LspError> {
        if self.gone().is_some() {
            return Err(self.gone_error());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.shared.pending.locked().insert(id, tx);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if self.out.send(rpc::frame(&message)).is_err() {
            self.shared.pending.locked().remove(&id);
            return Err(self.gone_error());
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(error))) => Err(LspError::Refused { method: method.into(), error }),
            Ok(Err(_)) => Err(self.gone_error()),
            Err(_) => {
                self.shared.pending.locked().remove(&id);
                // Tell the server to stop working on it (servers may ignore this).
                self.notify("$/cancelRequest", json!({ "id": id }));
                Err(LspError::Timeout {
                    method: method.into(),
                    waited: timeout,
                    stderr: self.shared.last_stderr(),
                })
            }
        }
    }

    /// A typed request.
    pub async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<T, LspError> {
        let value = self.request(method, params, timeout).await?;
        serde_json::from_value(value)
            .map_err(|e| LspError::Malformed { method: method.into(), reason: e.to_string() })
    }

    /// Tells the server what `path` holds now (open, change and save; close when it is gone). Returns the
    /// publish counter before the change: diagnostics newer than it are the change's.
    pub async fn sync(&self, path: &Path, language_id: &str) -> Result<u64, LspError> {
        if self.gone().is_some() {
            return Err(self.gone_error());
        }
        let before = *self.shared.publishes.borrow();
        let Some(uri) = crate::uri::from_path(path) else { return Ok(before) };
        let stamp = stamp(path);
        let text = tokio::fs::read_to_string(path).await.ok();
        let version = {
            let mut docs = self.docs.locked();
            match (&text, docs.get_mut(path)) {
                (None, Some(_)) => {
                    docs.remove(path);
                    None
                }
                (None, None) => return Ok(before),
                (Some(_), Some(doc)) => {
                    doc.version += 1;
                    doc.stamp = stamp;
                    Some((doc.version, false))
                }
                (Some(_), None) => {
                    docs.insert(path.to_owned(), Document { version: 1, stamp });
                    Some((1, true))
                }
            }
        };
        let document = json!({ "uri": uri.as_str() });
        match (version, text) {
            (None, _) => {
                self.notify("textDocument/didClose", json!({ "textDocument": document }));
                self.shared.diagnostics.locked().remove(path);
            }
            (Some((version, true)), Some(text)) => {
                self.notify(
                    "textDocument/didOpen",
                    json!({"textDocument": {"uri": uri.as_str(), "languageId": language_id, "version": version, "text": text}}),
                );
            }
            (Some((version, false)), Some(text)) => {
                self.notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": uri.as_str(), "version": version}, "contentChanges": [{"text": text}]}),
                );
                self.notify("textDocument/didSave", json!({"textDocument": document, "text": text}));
            }
            (Some(_), None) => {}
        }
        Ok(before)
    }

    /// Open documents whose file changed on disk (or went away) since they were last sent: what a
    /// command changed behind the server's back.
    pub fn stale_documents(&self) -> Vec<PathBuf> {
        let mut stale: Vec<PathBuf> = self
            .docs
            .locked()
            .iter()
            .filter(|(path, doc)| stamp(path) != doc.stamp)
            .map(|(path, _)| path.clone())
            .collect();
        stale.sort();
        stale
    }

    /// Waits up to `wait` for diagnostics of `path` newer than `since` (see [`Server::sync`]).
    pub async fn wait_for(&self, path: &Path, since: u64, wait: Duration) -> Waited {
        let mut publishes = self.shared.publishes.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        let newer =
            |shared: &Shared| shared.diagnostics.locked().get(path).filter(|p| p.seq > since).map(|p| p.seq);
        loop {
            if let Some(seq) = newer(&self.shared) {
                // Another publish may follow at once (type errors after syntax errors): take the last.
                let settle = (tokio::time::Instant::now() + SETTLE).min(deadline);
                let mut last = seq;
                while tokio::time::timeout_at(settle, publishes.changed()).await.is_ok_and(|r| r.is_ok()) {
                    match newer(&self.shared) {
                        Some(seq) if seq > last => last = seq,
                        _ => {}
                    }
                }
                let items = self.shared.diagnostics.locked().get(path).map(|p| p.items.clone());
                return Waited::Published(items.unwrap_or_default());
            }
            if self.gone().is_some() {
                return Waited::Pending { indexing: false };
            }
            match tokio::time::timeout_at(deadline, publishes.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Waited::Pending { indexing: self.indexing() },
            }
        }
    }

    /// Files other than `except` whose diagnostics were published after `since`.
    pub fn published_since(&self, since: u64, except: &[PathBuf]) -> Vec<(PathBuf, Vec<Diagnostic>)> {
        let mut out: Vec<_> = self
            .shared
            .diagnostics
            .locked()
            .iter()
            .filter(|(path, p)| p.seq > since && !except.contains(path))
            .map(|(path, p)| (path.clone(), p.items.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Everything it has published, by file.
    pub fn all_diagnostics(&self) -> Vec<(PathBuf, Vec<Diagnostic>)> {
        self.published_since(0, &[])
    }

    /// The current diagnostics of one file, if it published any.
    pub fn diagnostics_of(&self, path: &Path) -> Option<Vec<Diagnostic>> {
        self.shared.diagnostics.locked().get(path).map(|p| p.items.clone())
    }

    /// `shutdown` and `exit`, then the process is killed if it is still there.
    pub async fn shutdown(&self) {
        if self.gone().is_none() {
            let _ = self.request("shutdown", Value::Null, Duration::from_secs(2)).await;
            self.notify("exit", Value::Null);
        }
        let child = self.child.locked().take();
        if let Some(mut child) = child
            && tokio::time::timeout(Duration::from_secs(2), child.wait()).await.is_err()
        {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        self.shared.end("shut down".into());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // kill_on_drop ends the process (the walls' helper ends its whole tree with it).
        self.child.locked().take();
    }
}

fn initialize_params(root: &Path, spec: &ServerSpec) -> Value {
    let uri = crate::uri::from_path(root).map(|u| u.as_str().to_owned());
    let name = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    json!({
        "processId": std::process::id(),
        "clientInfo": {"name": "codeloop", "version": env!("CARGO_PKG_VERSION")},
        "rootUri": uri,
        "rootPath": root,
        "workspaceFolders": [{"uri": uri, "name": name}],
        "initializationOptions": spec.initialization,
        "capabilities": {
            "textDocument": {
                "synchronization": {"didSave": true, "dynamicRegistration": false},
                "publishDiagnostics": {"relatedInformation": false, "versionSupport": true},
                "hover": {"contentFormat": ["plaintext", "markdown"]},
                "definition": {"linkSupport": true},
                "references": {},
                "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                "rename": {"prepareSupport": false}
            },
            "workspace": {
                "configuration": true,
                "workspaceFolders": true,
                "symbol": {},
                "workspaceEdit": {"documentChanges": true}
            },
            "window": {"workDoneProgress": true},
            "general": {"positionEncodings": ["utf-16"]}
        }
    })
}
