//! Shared by the engine and fault test binaries: a config pointing at the test kit's fake provider.

use std::collections::BTreeMap;

use codeloop_core::config::{Config, CostSettings, ModelSettings, ProviderSettings};
use codeloop_provider::WireApi;

/// `model = "fake/test"` on `[provider.fake]` at `base_url`: a 128 000-token window, 8 000 output, and
/// prices so costs are not zero.
pub fn config_for(base_url: &str) -> Config {
    let mut models = BTreeMap::new();
    models.insert(
        "test".to_owned(),
        ModelSettings {
            context: Some(128_000),
            output: Some(8_000),
            cost: Some(CostSettings { input: 1.0, output: 2.0, cache_read: 0.5, cache_write: 0.0 }),
            ..Default::default()
        },
    );
    let mut config = Config { model: Some("fake/test".into()), ..Default::default() };
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
