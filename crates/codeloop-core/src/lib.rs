//! The codeloop engine (DESIGN.md §1, §4): run loop → processor → tools → compaction, with the
//! coordinator, bus, permissions, retry policy and config around them, and the walls of DESIGN.md §5a:
//! project trust ([`trust`], [`config`]) and the sandbox policy of a run ([`walls`]).
//!
//! Owns: the rules — when to call the model again, stop or compact; how stream events become parts;
//! which calls are allowed; how history becomes the next request.
//! Must not: speak wire formats (codeloop-provider), touch SQLite directly (codeloop-store), implement
//! tools (codeloop-tools), or read environment variables outside [`EngineOptions`].

pub mod agents;
mod bus;
mod command;
pub mod compaction;
pub mod config;
mod coordinator;
pub mod credentials;
pub mod doom_loop;
pub mod elicitation;
mod engine;
mod error;
pub mod file_commands;
pub mod hooks;
pub mod input;
pub mod instructions;
pub mod jobs;
mod live;
pub mod local_models;
pub mod lsp;
pub mod mcp;
pub mod models;
mod outcome;
pub mod peers;
pub mod permission;
mod prefix;
pub mod processor;
pub mod projection;
pub mod question;
pub mod retry;
mod run;
mod runs;
mod sampling;
mod services;
pub mod snapshot;
pub mod stats;
mod stores;
mod subagent;
mod tool_host;
pub mod trust;
pub mod walls;

pub use bus::{Bus, DEFAULT_CHANNEL_CAPACITY, DEFAULT_REPLAY_CAPACITY, Replay};
pub use command::{CommandOutcome, PermissionAnswer, SessionCommand};
pub use coordinator::{Coordinator, RunResult, WeakCoordinator};
pub use engine::{AgentChoice, GC_MIN_AGE, GcPolicy, GcReport, ProjectItem, ProjectReport, StorageUsage};
pub use engine::{Engine, EngineOptions, ProjectConfigLoader, ScaleFigures, TOOL_OUTPUT_RETENTION};
pub use error::{EngineError, ErrorKind, RunError, SharedStoreError};
pub use file_commands::{CommandInfo, CommandSource};
pub use hooks::TurnHooks;
pub use input::{Delivery, InputPart, PromptInput};
pub use outcome::{Blocked, RunOutcome, StopReason};
pub use run::Inbox;
pub use runs::Runs;
pub use services::{Batch, Journal, Services};
pub use stores::{DATABASE_URL_ENV, EventIds, StoreChoice, open_store};
pub use tool_host::ToolGate;
