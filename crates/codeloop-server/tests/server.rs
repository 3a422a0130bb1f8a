//! The server over real HTTP on 127.0.0.1: a real engine with SQLite in a temp dir and the test kit's
//! fake provider. One binary; the behaviours live in the submodules.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

#[path = "server/api.rs"]
mod api;
#[path = "server/browser.rs"]
mod browser;
#[path = "server/browser_more.rs"]
mod browser_more;
#[path = "server/commands.rs"]
mod commands;
#[path = "server/load.rs"]
mod load;
#[path = "server/security.rs"]
mod security;
#[path = "server/slow.rs"]
mod slow;
#[path = "server/stream.rs"]
mod stream;
#[path = "server/support.rs"]
mod support;
#[path = "server/telemetry.rs"]
mod telemetry;
#[path = "server/web.rs"]
mod web;
#[path = "server/webdriver.rs"]
mod webdriver;
