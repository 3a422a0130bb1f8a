//! The crash suite (issue 6): the real `codeloop` binary against an in-process fake provider, killed
//! with SIGKILL at different moments, interrupted with SIGINT/SIGTERM, run twice on one data dir, and
//! checked afterwards through the database file, `codeloop session export` and `codeloop run --continue`.
//! `CODELOOP_CRASH_POINTS=N` adds N more kill points to the few that run by default.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod concurrency;
mod kills;
mod messages;
mod signals;
mod storage;
mod support;
