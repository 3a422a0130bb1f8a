//! Integration tests: a real reqwest client against the fake provider over loopback HTTP.

// Test helpers outside `#[test]` functions may unwrap too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod binary;
mod faults;
mod formats;
mod server;
mod support;
