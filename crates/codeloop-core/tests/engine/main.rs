//! Engine integration tests: the real pipeline (coordinator, run loop, processor, tools, SQLite store)
//! against the test kit's scripted fake provider over HTTP on 127.0.0.1, in a real temp workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache_notes;
mod commands_files;
#[path = "../common/mod.rs"]
mod common;
mod compaction;
mod coordinator;
mod effort;
mod harness;
mod hooks;
mod hooks_claude;
mod hooks_events;
mod jobs;
mod limits;
mod loop_rules;
mod lsp;
mod mcp;
mod mcp_auth;
mod mcp_old;
mod permissions;
mod prompt_cache;
mod providers;
mod real_models;
mod snapshots;
mod stores;
mod turns;
