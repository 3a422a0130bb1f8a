//! Integration tests of the built-in tools against a real temporary workspace and a fake host that
//! records permission asks and progress.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

#[path = "tools/apply_patch.rs"]
mod apply_patch;
#[path = "tools/bash.rs"]
mod bash;
#[path = "tools/bash_permissions.rs"]
mod bash_permissions;
#[path = "tools/common.rs"]
mod common;
#[path = "tools/edit.rs"]
mod edit;
#[path = "tools/read.rs"]
mod read;
#[path = "tools/registry.rs"]
mod registry;
#[path = "tools/search.rs"]
mod search;
#[path = "tools/walls.rs"]
mod walls;
#[path = "tools/webfetch.rs"]
mod webfetch;
#[path = "tools/write.rs"]
mod write;
