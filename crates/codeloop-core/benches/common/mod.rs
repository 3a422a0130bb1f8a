//! Shared bench setup: an engine on a temp dir pointed at a fake provider.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use codeloop_core::config::{Config, ModelSettings, ProviderSettings};
use codeloop_core::permission::AskPolicy;
use codeloop_core::{Engine, EngineOptions};
use codeloop_provider::WireApi;

pub fn config(base_url: &str) -> Config {
    let mut models = BTreeMap::new();
    models.insert(
        "test".to_owned(),
        ModelSettings { context: Some(1_000_000), output: Some(8_000), ..Default::default() },
    );
    let mut config = Config { model: Some("fake/test".into()), ..Default::default() };
    config.compaction.prune = false;
    config.provider.insert(
        "fake".into(),
        ProviderSettings {
            api: WireApi::OpenAiChat,
            base_url: Some(base_url.to_owned()),
            models,
            ..Default::default()
        },
    );
    config
}

pub fn engine(data: &std::path::Path, base_url: &str) -> Engine {
    let mut options = EngineOptions::new(data, config(base_url));
    options.ask_policy = AskPolicy::Allow;
    options.env = Arc::new(|_| None);
    options.skill_dirs = Some(Vec::new());
    Engine::open(options).unwrap()
}
