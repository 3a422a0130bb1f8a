//! The fault suite (issue 6): the real pipeline (coordinator, run loop, processor, tools, SQLite store)
//! against the test kit's fake provider injecting HTTP errors, broken and stalled streams and in-stream
//! errors; the retry bounds; what failed attempts leave behind; and a property test of the processor
//! over arbitrary event sequences.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod attempts;
mod checks;
mod classification;
#[path = "../common/mod.rs"]
mod common;
mod faults;
mod harness;
mod processor_props;
mod retry;
mod storage;
mod watchdogs;
