//! MCP servers (DESIGN.md §4 "Tools", §5e): the tools, resources and prompts of the configured Model
//! Context Protocol servers — local ones over stdio, remote ones over Streamable HTTP with OAuth (or the
//! legacy HTTP+SSE transport of 2024-11-05).
//!
//! Owns: starting every enabled `[mcp.NAME]` once per process, in parallel, each bounded by its own
//! time-out (on the first run that needs tools, so commands like `session list` never pay for it);
//! the tools each offers (refreshed for the next step on `tools/list_changed`, withdrawn when its
//! connection ends, which restarts it once after a back-off); what the user and the model are told
//! about it ([`McpNotice`]); the state a listing shows ([`ServerStatus`]); prompts for commands
//! ([`McpServers::prompts`], DESIGN.md §5g).
//! Must not: decide permissions — every MCP tool asks under its own name (`NAME_TOOL`, pattern `*`) —
//! or wait on a sign-in: a server that needs one is skipped with a warning naming
//! `codeloop mcp login NAME`.

mod auth;
mod connect;
mod edit;
mod http;
mod legacy_sse;
mod login;
mod prompts;
mod search;
mod settings;
mod step_up;
mod tool;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use codeloop_tools::Tool;
use codeloop_types::LockExt;
use serde::Serialize;

pub use auth::{AuthRecord, AuthState, AuthStore, REFRESH_MARGIN, resource_of};
pub use connect::{SAMPLING_META_KEY, SAMPLING_PERMISSION, StartContext, StartFailure, WithheldEnv};
pub use edit::{ConfigEditError, add_server, remove_server};
pub use login::{LoginError, LoginOptions, PendingLogin, SignedIn, begin_login, begin_login_with};
pub use prompts::{McpPrompt, McpPromptArgument, McpPromptError, McpPromptText};
pub use search::TOOL_SEARCH;
pub use settings::{
    DEFAULT_MCP_TIMEOUT, DEFAULT_TOOL_BUDGET_BYTES, DEFAULT_TOOL_BUDGET_TOOLS, McpConfig, McpOrigin,
    McpSettings, OAuthClientSettings, OAuthConfig, RemoteTransport, TransportKind,
};
pub use tool::{LIST_RESOURCES, OPERATION_KEY, READ_RESOURCE, REQUEST_SENT_KEY, hook_name, tool_key};

use connect::Signals;
use tool::{Link, McpTool, ResourceServers};

/// Wait before the one restart of a server whose connection ended.
pub const RESTART_BACKOFF: Duration = Duration::from_secs(1);

/// reqwest (through rmcp) needs a process-wide TLS crypto provider: the ring one the rest of codeloop
/// uses (no aws-lc).
pub fn ensure_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err: the program installed one already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Something the user (and maybe the model) should hear about a server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpNotice {
    pub server: String,
    /// For the person: what happened and what to do (a warning event).
    pub message: String,
    /// For the model, in its next request: which tools came or went.
    pub for_model: Option<String>,
}

/// A server's state in a listing (`codeloop mcp list --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
#[serde(rename_all = "kebab-case")]
pub enum ServerState {
    Connected,
    NeedsLogin,
    Failed,
    Disabled,
}

impl ServerState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One row of `codeloop mcp list`: `{name, transport, state, tools, auth, error?}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub transport: TransportKind,
    pub state: ServerState,
    pub tools: usize,
    pub auth: AuthState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The tools the servers offer now; `generation` changes whenever they may have.
#[derive(Clone)]
pub struct McpTools {
    pub generation: u64,
    pub tools: Arc<[Arc<dyn Tool>]>,
}

/// The configured servers, started lazily and kept for the life of the process.
pub struct McpServers {
    inner: Arc<Inner>,
}

struct Inner {
    slots: Vec<Arc<Slot>>,
    context: StartContext,
    generation: Arc<AtomicU64>,
    started: tokio::sync::OnceCell<()>,
    notices: Mutex<Vec<McpNotice>>,
    offered: Mutex<Option<McpTools>>,
    resource_tools: [Arc<dyn Tool>; 2],
}

struct Slot {
    name: String,
    settings: McpSettings,
    signals: Arc<Signals>,
    state: Mutex<State>,
    /// Set by the first restart: a server is restarted once.
    restarted: AtomicBool,
    epochs: AtomicU64,
    relisting: tokio::sync::Mutex<()>,
}

enum State {
    NotStarted,
    Disabled,
    Starting,
    Connected(Arc<Live>),
    NeedsLogin {
        expired: bool,
        detail: String,
    },
    Failed(String),
    /// The connection ended; the restart is pending.
    Restarting(String),
}

/// One live connection and what it offers.
struct Live {
    epoch: u64,
    link: Arc<Link>,
    tools: Mutex<Vec<Arc<dyn Tool>>>,
    resources: bool,
    prompts: bool,
    prompt_list: tokio::sync::Mutex<Option<Vec<McpPrompt>>>,
    auth: AuthState,
    stop: tokio_util::sync::CancellationToken,
    /// How it was reached, when that differs from its settings (the legacy fallback).
    transport: Option<TransportKind>,
}

/// Why a server is being started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    First,
    Restart,
}

impl McpServers {
    pub fn new(settings: BTreeMap<String, McpSettings>, context: StartContext) -> Self {
        let generation = Arc::new(AtomicU64::new(1));
        let slots = settings
            .into_iter()
            .map(|(name, settings)| {
                let state = if settings.enabled { State::NotStarted } else { State::Disabled };
                Arc::new(Slot {
                    signals: Arc::new(Signals::new(&name, generation.clone())),
                    name,
                    settings,
                    state: Mutex::new(state),
                    restarted: AtomicBool::new(false),
                    epochs: AtomicU64::new(0),
                    relisting: tokio::sync::Mutex::new(()),
                })
            })
            .collect();
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let servers: Weak<dyn ResourceServers> = me.clone();
            Inner {
                slots,
                context,
                generation,
                started: tokio::sync::OnceCell::new(),
                notices: Mutex::new(Vec::new()),
                offered: Mutex::new(None),
                resource_tools: [
                    Arc::new(tool::ListResources::new(servers.clone())),
                    Arc::new(tool::ReadResource::new(servers)),
                ],
            }
        });
        Self { inner }
    }

    /// No server to start.
    pub fn is_empty(&self) -> bool {
        !self.inner.slots.iter().any(|s| s.settings.enabled)
    }

    /// Starts every enabled server (once; later calls wait for the first): all at once, each bounded by
    /// its own time-out, so the slowest failure costs only its own `timeout_ms`.
    pub async fn start(&self) {
        let inner = &self.inner;
        inner
            .started
            .get_or_init(|| async {
                let starts = inner
                    .slots
                    .iter()
                    .filter(|s| s.settings.enabled)
                    .map(|slot| Inner::start_slot(inner.clone(), slot.clone(), Start::First));
                futures::future::join_all(starts).await;
            })
            .await;
    }

    /// The tools offered now (starting the servers first, and listing again those that said their tools
    /// changed).
    pub async fn tools(&self) -> McpTools {
        self.start().await;
        self.inner.relist_stale().await;
        self.inner.offered()
    }

    /// Notices not yet given to anyone, oldest first (each is given once).
    pub fn drain_notices(&self) -> Vec<McpNotice> {
        let mut notices = std::mem::take(&mut *self.inner.notices.locked());
        for slot in &self.inner.slots {
            let logged = std::mem::take(&mut *slot.signals.logged.locked());
            notices.extend(logged.into_iter().map(|message| McpNotice {
                server: slot.name.clone(),
                message,
                for_model: None,
            }));
        }
        notices
    }

    /// Every server's state, after starting them.
    pub async fn status(&self) -> Vec<ServerStatus> {
        self.start().await;
        self.inner.slots.iter().map(|slot| self.inner.status_of(slot)).collect()
    }
}

impl Drop for McpServers {
    fn drop(&mut self) {
        for slot in &self.inner.slots {
            if let Some(live) = slot.live() {
                live.stop.cancel();
            }
        }
    }
}

impl Slot {
    fn live(&self) -> Option<Arc<Live>> {
        match &*self.state.locked() {
            State::Connected(live) => Some(live.clone()),
            _ => None,
        }
    }

    fn set(&self, state: State) {
        *self.state.locked() = state;
    }

    /// How to sign in: `codeloop mcp login NAME` (with the URL for a server an editor passed).
    fn login_hint(&self) -> String {
        match (&self.settings.origin, &self.settings.url) {
            (McpOrigin::Editor, Some(url)) => format!("codeloop mcp login {} --url {url}", self.name),
            _ => format!("codeloop mcp login {}", self.name),
        }
    }
}

impl Inner {
    async fn start_slot(inner: Arc<Inner>, slot: Arc<Slot>, why: Start) {
        slot.set(State::Starting);
        let timeout = slot.settings.timeout();
        let name = slot.name.clone();
        let started = tokio::time::timeout(timeout, async {
            let connected =
                connect::connect(&name, &slot.settings, &inner.context, slot.signals.clone()).await?;
            let listed = connected.peer.list_all_tools().await.map_err(|e| {
                StartFailure::Failed(format!("it answered but listed no tools: {}", connect::describe(&e)))
            })?;
            Ok((connected, listed))
        })
        .await;
        let outcome = match started {
            Err(_) => Err(StartFailure::Failed(format!(
                "it did not start within {} ms (timeout_ms in [mcp.{name}])",
                timeout.as_millis()
            ))),
            Ok(result) => result,
        };
        match outcome {
            Ok((mut connected, listed)) => {
                let epoch = slot.epochs.fetch_add(1, Ordering::SeqCst) + 1;
                let lost = {
                    let (inner, slot) = (Arc::downgrade(&inner), Arc::downgrade(&slot));
                    move |why: String| Inner::lost(&inner, &slot, epoch, why)
                };
                let step_up = connected.credentials.clone().map(|credentials| step_up::StepUp {
                    settings: slot.settings.clone(),
                    context: inner.context.clone(),
                    credentials,
                });
                let link = Arc::new(Link {
                    step_up,
                    signals: slot.signals.clone(),
                    server: name.clone(),
                    peer: connected.peer.clone(),
                    timeout,
                    lost: Box::new(lost.clone()),
                });
                let tools = offered_tools(&link, &slot.settings, listed);
                let count = tools.len();
                let live = Arc::new(Live {
                    epoch,
                    link,
                    tools: Mutex::new(tools),
                    resources: connected.capabilities.resources.is_some(),
                    prompts: connected.capabilities.prompts.is_some(),
                    prompt_list: tokio::sync::Mutex::new(None),
                    auth: connected.auth,
                    stop: connected.stop.clone(),
                    transport: connected.transport,
                });
                tracing::debug!(server = %name, protocol = %connected.protocol, tools = count, "MCP server connected");
                connected.watch(lost);
                slot.set(State::Connected(live));
                if why == Start::Restart {
                    inner.notice(
                        &name,
                        format!("MCP server {name} restarted: its {count} tools are offered again"),
                        Some(format!("The MCP server `{name}` restarted: its tools are available again.")),
                    );
                }
            }
            Err(StartFailure::NeedsLogin { expired, detail }) => {
                let message =
                    format!("MCP server {name} needs sign-in ({detail}): run `{}`", slot.login_hint());
                slot.set(State::NeedsLogin { expired, detail });
                inner.notice(&name, message, None);
            }
            Err(StartFailure::Failed(why_failed)) => {
                let message = match why {
                    Start::First => {
                        format!("MCP server {name} is not available: {why_failed}; its tools are not offered")
                    }
                    Start::Restart => {
                        format!("MCP server {name} did not restart: {why_failed}; its tools stay withdrawn")
                    }
                };
                slot.set(State::Failed(why_failed));
                inner.notice(&name, message, None);
            }
        }
        inner.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// A connection ended (the watcher saw it, or a call met a closed transport): its tools go, and the
    /// server is restarted once after [`RESTART_BACKOFF`].
    fn lost(inner: &Weak<Inner>, slot: &Weak<Slot>, epoch: u64, why: String) {
        let (Some(inner), Some(slot)) = (inner.upgrade(), slot.upgrade()) else { return };
        let live = {
            let mut state = slot.state.locked();
            match &*state {
                State::Connected(live) if live.epoch == epoch => {
                    let live = live.clone();
                    *state = State::Restarting(why.clone());
                    live
                }
                _ => return,
            }
        };
        live.stop.cancel();
        inner.generation.fetch_add(1, Ordering::SeqCst);
        let name = slot.name.clone();
        let for_model = Some(format!("The MCP server `{name}` stopped: its tools are not available now."));
        if slot.restarted.swap(true, Ordering::SeqCst) {
            slot.set(State::Failed(format!("it stopped again ({why}) after its one restart")));
            inner.notice(
                &name,
                format!("MCP server {name} stopped again ({why}); its tools are withdrawn (it was restarted once already)"),
                for_model,
            );
            return;
        }
        inner.notice(
            &name,
            format!(
                "MCP server {name} stopped ({why}); its tools are withdrawn and it is restarted in {} s",
                RESTART_BACKOFF.as_secs()
            ),
            for_model,
        );
        tokio::spawn(async move {
            tokio::time::sleep(RESTART_BACKOFF).await;
            Inner::start_slot(inner, slot, Start::Restart).await;
        });
    }

    fn notice(&self, server: &str, message: String, for_model: Option<String>) {
        // The message carries what the server said (an error page, its stderr): outside text.
        let message = codeloop_types::escape_controls(&message).into_owned();
        let for_model = for_model.map(|m| codeloop_types::escape_controls(&m).into_owned());
        tracing::debug!("{message}");
        self.notices.locked().push(McpNotice { server: server.to_owned(), message, for_model });
    }

    /// Lists again, within their time-outs, the tools of servers that said theirs changed.
    async fn relist_stale(&self) {
        let stale: Vec<(Arc<Slot>, Arc<Live>)> = self
            .slots
            .iter()
            .filter(|s| s.signals.tools_stale.swap(false, Ordering::SeqCst))
            .filter_map(|s| s.live().map(|live| (s.clone(), live)))
            .collect();
        let relists = stale.iter().map(|(slot, live)| async move {
            let _one_at_a_time = slot.relisting.lock().await;
            let link = &live.link;
            match tokio::time::timeout(link.timeout, link.peer.list_all_tools()).await {
                Ok(Ok(listed)) => {
                    let tools = offered_tools(link, &slot.settings, listed);
                    *live.tools.locked() = tools;
                }
                Ok(Err(e)) => tracing::debug!("MCP server {} could not list its tools again: {e}", slot.name),
                Err(_) => tracing::debug!("MCP server {} did not list its tools again in time", slot.name),
            }
        });
        futures::future::join_all(relists).await;
        if !stale.is_empty() {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn offered(&self) -> McpTools {
        let generation = self.generation.load(Ordering::SeqCst);
        let mut offered = self.offered.locked();
        if let Some(tools) = offered.as_ref().filter(|t| t.generation == generation) {
            return tools.clone();
        }
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        let mut resources = false;
        for slot in &self.slots {
            if let Some(live) = slot.live() {
                tools.extend(live.tools.locked().iter().cloned());
                resources |= live.resources;
            }
        }
        if resources {
            tools.extend(self.resource_tools.iter().cloned());
        }
        // Offered only when the tools exceed the budget (the run's offer decides).
        if !tools.is_empty() {
            let all: Arc<[Arc<dyn Tool>]> = tools.clone().into();
            tools.push(Arc::new(search::ToolSearch::new(all)));
        }
        let tools = McpTools { generation, tools: tools.into() };
        *offered = Some(tools.clone());
        tools
    }

    fn status_of(&self, slot: &Slot) -> ServerStatus {
        let configured = slot.settings.transport_kind();
        let transport = slot.live().and_then(|live| live.transport).unwrap_or(configured);
        let saved = || match (configured, &slot.settings.url) {
            (TransportKind::Http | TransportKind::Sse, Some(url)) => self
                .context
                .auth
                .find(&slot.name, &resource_of(url))
                .map(|(_, record)| record.state())
                .unwrap_or(AuthState::None),
            _ => AuthState::None,
        };
        let (state, tools, auth, error) = match &*slot.state.locked() {
            State::Connected(live) => {
                let tools = live.tools.locked().len();
                (ServerState::Connected, tools, live.auth, None)
            }
            State::Disabled => (ServerState::Disabled, 0, saved(), None),
            State::NeedsLogin { expired, detail } => (
                ServerState::NeedsLogin,
                0,
                if *expired { AuthState::Expired } else { AuthState::NeedsLogin },
                Some(format!("{detail}: run `{}`", slot.login_hint())),
            ),
            State::Failed(why) => (ServerState::Failed, 0, saved(), Some(why.clone())),
            State::Restarting(why) => {
                (ServerState::Failed, 0, saved(), Some(format!("it stopped ({why}); restarting")))
            }
            State::NotStarted | State::Starting => {
                (ServerState::Failed, 0, saved(), Some("it has not started yet".to_owned()))
            }
        };
        // What a server said is outside text: shown with its control characters escaped everywhere.
        let error = error.map(|e| codeloop_types::escape_controls(&e).into_owned());
        ServerStatus { name: slot.name.clone(), transport, state, tools, auth, error }
    }
}

impl ResourceServers for Inner {
    fn resource_links(&self) -> Vec<Arc<Link>> {
        self.slots.iter().filter_map(|s| s.live()).filter(|l| l.resources).map(|l| l.link.clone()).collect()
    }
}

/// The server's tools that its filters let through, as codeloop tools.
fn offered_tools(
    link: &Arc<Link>,
    settings: &McpSettings,
    listed: Vec<rmcp::model::Tool>,
) -> Vec<Arc<dyn Tool>> {
    listed
        .into_iter()
        .filter(|tool| settings.offers_tool(&tool.name))
        .map(|tool| Arc::new(McpTool::new(link, tool)) as Arc<dyn Tool>)
        .collect()
}

#[cfg(test)]
mod serverstate_text {
    use super::ServerState;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in ServerState::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
