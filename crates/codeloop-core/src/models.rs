//! Model resolution: `provider/model` → a connected provider plus the model's limits and prices, from the
//! built-in catalogue overridden by `[provider.NAME.models.ID]` in config.
//!
//! Owns: provider defaults for well-known names, API-key lookup through the injected environment, and a
//! cache of connected providers. Must not: speak any wire format (codeloop-provider does).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codeloop_provider::catalogue::{Catalogue, ModelInfo, ModelOverride};
use codeloop_provider::families::{self, FamilyDefaults};
use codeloop_provider::{Provider, ProviderConfig, ProviderError, ToolCallText, WireApi};
use codeloop_types::{ModelRef, ToolProfile};

use crate::config::{Config, ModelSettings, ProviderSettings};
use codeloop_types::LockExt;

/// Context window and output limits, and prices in USD per million tokens (the catalogue's own types).
pub use codeloop_provider::catalogue::{Cost as ModelPricing, Limit as ModelLimits};

/// Limits used for a model the catalogue does not know (a warning is shown).
pub const DEFAULT_LIMITS: ModelLimits = codeloop_provider::catalogue::DEFAULT_LIMIT;

#[derive(Clone)]
pub struct ResolvedModel {
    pub reference: ModelRef,
    /// The id sent to the API.
    pub api_id: String,
    pub limits: ModelLimits,
    pub pricing: ModelPricing,
    /// False when neither the catalogue nor config describes the model.
    pub known: bool,
    /// Config's, else the family's default (Qwen 0.55…); `None` for a model that takes none.
    pub temperature: Option<f32>,
    /// The model takes a temperature (agents' temperatures are dropped otherwise).
    pub accepts_temperature: bool,
    /// Nucleus sampling: config's, else the family's default.
    pub top_p: Option<f32>,
    /// The file-editing tools it is offered.
    pub tools: ToolProfile,
    /// What an answer that is a tool call written as text becomes.
    pub tool_call_text: ToolCallText,
    pub wire: WireApi,
    /// The config's default effort for this model.
    pub effort: Option<codeloop_types::Effort>,
    /// What the catalogue says (reasoning options decide what an effort becomes).
    pub info: Arc<ModelInfo>,
    pub provider: Arc<dyn Provider>,
}

impl std::fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("reference", &self.reference)
            .field("api_id", &self.api_id)
            .field("limits", &self.limits)
            .field("known", &self.known)
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error(
        "unknown provider `{0}`: add a [provider.{0}] section with api, base_url and api_key_env to your config"
    )]
    UnknownProvider(String),
    #[error(
        "no model configured: pass --model provider/model, set `model = \"provider/model\"` in your config \
         (`codeloop config init` writes one), or export an API key such as ANTHROPIC_API_KEY or OPENAI_API_KEY"
    )]
    NoModel,
    #[error("invalid model `{0}`: expected provider/model, e.g. openai/gpt-4.1")]
    Invalid(String),
    #[error("{}", unknown_bare(.id, .listed_by))]
    UnknownBare { id: String, listed_by: Vec<String> },
    #[error(
        "model `{id}` is served by more than one configured provider: name one, e.g. --model {}",
        .candidates.join(" or --model ")
    )]
    Ambiguous { id: String, candidates: Vec<String> },
    #[error(
        "API key missing for provider `{provider}`: set ${env} (the variable named by api_key_env in [provider.{provider}])"
    )]
    MissingKey { provider: String, env: String },
    #[error(transparent)]
    Provider(#[from] ProviderError),
}

/// Defaults for providers users commonly name without configuring.
fn builtin_provider(name: &str) -> Option<(WireApi, &'static str, Option<&'static str>)> {
    Some(match name {
        "openai" => (WireApi::OpenAiChat, "https://api.openai.com/v1", Some("OPENAI_API_KEY")),
        "anthropic" => (WireApi::Anthropic, "https://api.anthropic.com/v1", Some("ANTHROPIC_API_KEY")),
        "google" | "gemini" => {
            (WireApi::Gemini, "https://generativelanguage.googleapis.com/v1beta", Some("GEMINI_API_KEY"))
        }
        "openrouter" => (WireApi::OpenAiChat, "https://openrouter.ai/api/v1", Some("OPENROUTER_API_KEY")),
        "deepseek" => (WireApi::OpenAiChat, "https://api.deepseek.com/v1", Some("DEEPSEEK_API_KEY")),
        "groq" => (WireApi::OpenAiChat, "https://api.groq.com/openai/v1", Some("GROQ_API_KEY")),
        "xai" => (WireApi::OpenAiChat, "https://api.x.ai/v1", Some("XAI_API_KEY")),
        "ollama" => (WireApi::OpenAiChat, "http://127.0.0.1:11434/v1", None),
        "llamacpp" => (WireApi::OpenAiChat, "http://127.0.0.1:8080/v1", None),
        "vllm" => (WireApi::OpenAiChat, "http://127.0.0.1:8000/v1", None),
        "lmstudio" => (WireApi::OpenAiChat, "http://127.0.0.1:1234/v1", None),
        _ => return None,
    })
}

/// Where an `api = "azure"` provider's key is read from unless `api_key_env` says otherwise (the Azure
/// OpenAI SDKs' variable).
const AZURE_KEY_ENV: &str = "AZURE_OPENAI_API_KEY";

/// Providers chosen when no model is configured, in this order: the first whose key is in the
/// environment wins, with its default model.
const CHOSEN_BY_KEY: &[(&str, &[&str], &str)] = &[
    ("anthropic", &["ANTHROPIC_API_KEY"], "claude-sonnet-4-5"),
    ("openai", &["OPENAI_API_KEY"], "gpt-4.1"),
    ("google", &["GEMINI_API_KEY", "GOOGLE_API_KEY"], "gemini-2.5-pro"),
    ("openrouter", &["OPENROUTER_API_KEY"], "anthropic/claude-sonnet-4.5"),
    ("deepseek", &["DEEPSEEK_API_KEY"], "deepseek-chat"),
    ("groq", &["GROQ_API_KEY"], "openai/gpt-oss-120b"),
    ("xai", &["XAI_API_KEY"], "grok-4"),
];

/// The providers codeloop picks by API key, in order: `(provider, key variables, default model)`.
pub fn providers_by_key() -> &'static [(&'static str, &'static [&'static str], &'static str)] {
    CHOSEN_BY_KEY
}

/// Environment variables that move a built-in provider's endpoint, as its official SDK reads them
/// (gateways, proxies, local servers), and the path suffix the variable leaves out.
fn base_url_variable(provider: &str) -> Option<(&'static str, &'static str)> {
    match provider {
        "openai" => Some(("OPENAI_BASE_URL", "")),
        // The Anthropic SDK's base URL has no `/v1`; codeloop's endpoint does.
        "anthropic" => Some(("ANTHROPIC_BASE_URL", "/v1")),
        _ => None,
    }
}

/// Why a model is the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice {
    /// `model = …` in config.
    Configured,
    /// No model configured: the first provider whose key is in the environment.
    FromKey { variable: String },
}

fn unknown_bare(id: &str, listed_by: &[String]) -> String {
    match listed_by {
        [] => format!(
            "unknown model `{id}`: give it as provider/model (e.g. openai/gpt-4.1); `codeloop models` lists the \
             known ones"
        ),
        providers => format!(
            "model `{id}` is listed by {} but no such provider is set up here: add its API key or a \
             [provider.NAME] section, or give the model as provider/model",
            providers.join(", ")
        ),
    }
}

/// Reads an environment variable; injected so tests and the server control it.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

pub struct Models {
    config: Config,
    env: EnvLookup,
    catalogue: Catalogue,
    connected: Mutex<HashMap<String, Arc<dyn Provider>>>,
}

impl Models {
    pub fn new(config: Config, env: EnvLookup) -> Self {
        let catalogue = with_config(&config);
        Self { config, env, catalogue, connected: Mutex::new(HashMap::new()) }
    }

    /// The default model: from config, else chosen by the API keys in the environment.
    pub fn default_model(&self) -> Result<ModelRef, ModelError> {
        self.default_model_choice().map(|(model, _)| model)
    }

    /// The default model and why it is the one.
    pub fn default_model_choice(&self) -> Result<(ModelRef, ModelChoice), ModelError> {
        if let Some(text) = self.config.model.as_deref() {
            let model = text.parse().map_err(|_| ModelError::Invalid(text.to_owned()))?;
            return Ok((model, ModelChoice::Configured));
        }
        for (provider, variables, model) in CHOSEN_BY_KEY {
            if let Some(variable) = variables.iter().find(|v| self.has_env(v)) {
                let choice = ModelChoice::FromKey { variable: (*variable).to_owned() };
                return Ok((ModelRef::new(*provider, *model), choice));
            }
        }
        Err(ModelError::NoModel)
    }

    /// The model a bare id means here (`claude-sonnet-4-5`, as Claude Code's command files write it): a
    /// configured provider that lists it, else a provider the catalogue knows it from that can be used
    /// (its key is set); `None` when none can.
    /// A model as a person types it: `provider/model`, or a bare id (`claude-sonnet-4-6`) that exactly one
    /// set-up provider serves — one whose config lists the model, or that the catalogue lists it under
    /// and that is configured or has its API key in the environment.
    pub fn parse_model(&self, text: &str) -> Result<ModelRef, ModelError> {
        let text = text.trim();
        if text.contains('/') {
            return text.parse().map_err(|_| ModelError::Invalid(text.to_owned()));
        }
        if text.is_empty() {
            return Err(ModelError::Invalid(text.to_owned()));
        }
        let mut candidates: Vec<ModelRef> = Vec::new();
        let mut listed_by = Vec::new();
        for (provider, settings) in &self.config.provider {
            if settings.models.contains_key(text) {
                candidates.push(ModelRef::new(provider.clone(), text));
            }
        }
        for (provider, info) in self.catalogue.models() {
            if info.id != text {
                continue;
            }
            listed_by.push(provider.to_owned());
            let key_set = builtin_provider(provider)
                .is_some_and(|(_, _, key)| key.is_none_or(|variable| self.has_env(variable)));
            let set_up = self.config.provider.contains_key(provider) || key_set;
            if set_up && !candidates.iter().any(|c| c.provider_id == provider) {
                candidates.push(ModelRef::new(provider, text));
            }
        }
        match candidates.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(ModelError::UnknownBare { id: text.to_owned(), listed_by }),
            many => Err(ModelError::Ambiguous {
                id: text.to_owned(),
                candidates: many.iter().map(ToString::to_string).collect(),
            }),
        }
    }

    pub fn by_bare_id(&self, id: &str) -> Option<ModelRef> {
        let configured = self
            .config
            .provider
            .iter()
            .filter(|(_, settings)| settings.models.contains_key(id))
            .map(|(provider, _)| ModelRef::new(provider.clone(), id));
        let catalogued = self
            .catalogue
            .models()
            .filter(|(_, info)| info.id == id)
            .map(|(provider, _)| ModelRef::new(provider, id));
        configured.chain(catalogued).find(|model| self.resolve(model).is_ok())
    }

    fn has_env(&self, name: &str) -> bool {
        (self.env)(name).is_some_and(|v| !v.is_empty())
    }

    /// Where a provider lives and which key it uses, after config, built-in defaults and the SDK
    /// environment variables (`OPENAI_BASE_URL`, …). `None` for an unknown provider.
    pub fn provider_endpoint(&self, name: &str) -> Option<ProviderSettings> {
        self.provider_settings(name).ok()
    }

    fn provider_settings(&self, name: &str) -> Result<ProviderSettings, ModelError> {
        let mut settings = self.configured_settings(name)?;
        let configured_url = self.config.provider.get(name).and_then(|p| p.base_url.as_ref());
        if configured_url.is_none()
            && let Some((variable, suffix)) = base_url_variable(name)
            && let Some(url) = (self.env)(variable).filter(|u| !u.trim().is_empty())
        {
            let url = url.trim().trim_end_matches('/');
            let url = if url.ends_with(suffix) { url.to_owned() } else { format!("{url}{suffix}") };
            settings.base_url = Some(url);
        }
        // Google's key goes by two names; the configured one (or GEMINI_API_KEY) comes first.
        if name == "google"
            && settings.api_key_env.as_deref().is_some_and(|v| !self.has_env(v))
            && self.has_env("GOOGLE_API_KEY")
        {
            settings.api_key_env = Some("GOOGLE_API_KEY".to_owned());
        }
        Ok(settings)
    }

    fn configured_settings(&self, name: &str) -> Result<ProviderSettings, ModelError> {
        match (self.config.provider.get(name), builtin_provider(name)) {
            (Some(settings), _) if settings.api == WireApi::Azure => {
                let mut settings = settings.clone();
                if settings.base_url.is_none() {
                    let resource = settings.resource.as_deref().map(str::trim).filter(|r| !r.is_empty());
                    settings.base_url = resource.map(|r| format!("https://{r}.openai.azure.com"));
                }
                settings.api_key_env.get_or_insert_with(|| AZURE_KEY_ENV.to_owned());
                Ok(settings)
            }
            (Some(settings), builtin) => {
                let mut settings = settings.clone();
                if let Some((_, base_url, key_env)) = builtin {
                    settings.base_url.get_or_insert_with(|| base_url.to_owned());
                    if settings.api_key_env.is_none() {
                        settings.api_key_env = key_env.map(str::to_owned);
                    }
                }
                Ok(settings)
            }
            (None, Some((api, base_url, key_env))) => Ok(ProviderSettings {
                api,
                base_url: Some(base_url.to_owned()),
                api_key_env: key_env.map(str::to_owned),
                ..Default::default()
            }),
            (None, None) => Err(ModelError::UnknownProvider(name.to_owned())),
        }
    }

    fn connect(&self, name: &str, settings: &ProviderSettings) -> Result<Arc<dyn Provider>, ModelError> {
        let mut connected = self.connected.locked();
        if let Some(provider) = connected.get(name) {
            return Ok(provider.clone());
        }
        let base_url = settings.base_url.clone().ok_or_else(|| {
            let message = match settings.api {
                WireApi::Azure => format!(
                    "[provider.{name}] with api = \"azure\" needs resource = \"NAME\" (for https://NAME.openai.azure.com) \
                     or base_url"
                ),
                _ => format!("[provider.{name}] needs base_url (e.g. \"http://127.0.0.1:8080/v1\")"),
            };
            ModelError::Provider(ProviderError::Config { message })
        })?;
        let mut config = ProviderConfig::new(name, settings.api, base_url);
        config.api_key_env = settings.api_key_env.clone();
        config.api_key =
            settings.api_key_env.as_deref().and_then(|var| (self.env)(var)).filter(|k| !k.is_empty());
        if let (Some(env), None) = (&config.api_key_env, &config.api_key) {
            return Err(ModelError::MissingKey { provider: name.to_owned(), env: env.clone() });
        }
        config.headers = settings.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        config.deployment = settings.deployment.clone();
        config.api_version = settings.api_version.clone();
        if let Some(ms) = settings.headers_timeout_ms {
            config.headers_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = settings.idle_timeout_ms {
            config.idle_timeout = Duration::from_millis(ms);
        }
        let provider = codeloop_provider::connect(config)?;
        connected.insert(name.to_owned(), provider.clone());
        Ok(provider)
    }

    pub fn resolve(&self, model: &ModelRef) -> Result<ResolvedModel, ModelError> {
        let settings = self.provider_settings(&model.provider_id)?;
        let overrides = settings.models.get(&model.model_id).cloned().unwrap_or_default();
        let resolved = self.catalogue.resolve(&model.provider_id, &model.model_id);
        let known = resolved.is_known();
        let info: ModelInfo = resolved.model;
        let provider = self.connect(&model.provider_id, &settings)?;
        let api_id = overrides.id.clone().unwrap_or_else(|| model.model_id.clone());
        let family = family_of(&api_id, &model.model_id);
        Ok(ResolvedModel {
            reference: model.clone(),
            limits: info.limit,
            // Never send a temperature (or top_p) to a model that refuses one (o3, gpt-5, reasoners).
            temperature: overrides.temperature.or(family.temperature).filter(|_| info.temperature),
            top_p: overrides.top_p.or(family.top_p).filter(|_| info.temperature),
            tools: overrides.tools.unwrap_or(family.tools),
            // Small local models often write their calls as text: the local presets parse them.
            tool_call_text: overrides
                .tool_call_text
                .or(settings.tool_call_text)
                .or_else(|| {
                    crate::local_models::LOCAL_PRESETS
                        .contains(&model.provider_id.as_str())
                        .then_some(codeloop_provider::ToolCallText::Parse)
                })
                .unwrap_or_default(),
            api_id,
            accepts_temperature: info.temperature,
            pricing: info.cost.clone(),
            known,
            wire: settings.api,
            effort: overrides.effort,
            info: Arc::new(info),
            provider,
        })
    }
}

/// The family defaults of a model: by the id sent to the API, else by its key in config (an alias such
/// as `coder` with `id = "qwen2.5-coder-1.5b"` is known by its id; a local server's arbitrary id by the
/// key).
fn family_of(api_id: &str, model_id: &str) -> FamilyDefaults {
    let by_id = families::defaults(api_id);
    if by_id.is_specific() { by_id } else { families::defaults(model_id) }
}

/// The built-in catalogue with `[provider.NAME.models.ID]` entries applied.
fn with_config(config: &Config) -> Catalogue {
    let mut catalogue = Catalogue::active().clone();
    for (provider, settings) in &config.provider {
        for (model, entry) in &settings.models {
            catalogue.set(provider, model, &model_override(entry));
        }
    }
    catalogue
}

fn model_override(settings: &ModelSettings) -> ModelOverride {
    ModelOverride {
        context: settings.context,
        input: settings.input,
        output: settings.output,
        cost: settings.cost.map(|c| ModelPricing {
            input: c.input,
            output: c.output,
            cache_read: c.cache_read,
            cache_write: c.cache_write,
            context_over_200k: None,
        }),
        reasoning: settings.reasoning,
    }
}

/// One row of `codeloop models`.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogueEntry {
    pub reference: ModelRef,
    pub limits: ModelLimits,
    pub pricing: ModelPricing,
    /// The file-editing tools offered (config, else family).
    pub tools: ToolProfile,
    /// Sampling sent unless an agent sets its own temperature (config, else family; none for a model
    /// that takes no temperature).
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// The effort levels the model takes on its provider's API (empty: it does not reason).
    pub effort: Vec<codeloop_types::Effort>,
}

/// Where the catalogue in use comes from: the built-in snapshot's repository and commit, or the URL and
/// date of the one `codeloop models --refresh` cached.
pub fn catalogue_source() -> Option<&'static str> {
    Catalogue::active().source()
}

/// The file in the data dir that `codeloop models --refresh` writes.
pub const CATALOGUE_FILE: &str = "catalogue.json";

/// Uses the catalogue `codeloop models --refresh` cached in `data_dir`, when there and valid (call before
/// the first model lookup).
pub fn use_cached_catalogue(data_dir: &std::path::Path) {
    codeloop_provider::catalogue::use_cached(data_dir.join(CATALOGUE_FILE));
}

/// The API a provider speaks: its config's, else the built-in provider's, else OpenAI chat.
fn wire_of(config: &Config, provider: &str) -> WireApi {
    config
        .provider
        .get(provider)
        .map(|p| p.api)
        .or_else(|| builtin_provider(provider).map(|(wire, ..)| wire))
        .unwrap_or(WireApi::OpenAiChat)
}

/// Every model the built-in catalogue and the config know, sorted by provider then model.
pub fn catalogue(config: &Config) -> Vec<CatalogueEntry> {
    with_config(config)
        .models()
        .map(|(provider, info)| {
            let overrides = config
                .provider
                .get(provider)
                .and_then(|p| p.models.get(&info.id))
                .cloned()
                .unwrap_or_default();
            let api_id = overrides.id.clone().unwrap_or_else(|| info.id.clone());
            let family = family_of(&api_id, &info.id);
            CatalogueEntry {
                reference: ModelRef::new(provider, info.id.clone()),
                limits: info.limit,
                pricing: info.cost.clone(),
                tools: overrides.tools.unwrap_or(family.tools),
                temperature: overrides.temperature.or(family.temperature).filter(|_| info.temperature),
                top_p: overrides.top_p.or(family.top_p).filter(|_| info.temperature),
                effort: effort_levels(info, wire_of(config, provider)),
            }
        })
        .collect()
}

/// The levels `effort` can take for a reasoning model on `wire` (none for a model that does not reason).
fn effort_levels(info: &ModelInfo, wire: WireApi) -> Vec<codeloop_types::Effort> {
    if !info.reasoning {
        return Vec::new();
    }
    let max_output = crate::compaction::max_output(&info.limit);
    codeloop_types::Effort::ALL
        .into_iter()
        .filter(|effort| info.reasoning_for(*effort, wire, max_output).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CostSettings;
    use codeloop_provider::Usage;

    #[test]
    fn pricing_counts_reasoning_as_output_and_cache_at_its_rates() {
        let pricing = ModelPricing {
            input: 2.0,
            output: 8.0,
            cache_read: 0.5,
            cache_write: 2.5,
            context_over_200k: None,
        };
        let usage = Usage {
            input: 1_000_000,
            output: 500_000,
            reasoning: 500_000,
            cache_read: 2_000_000,
            cache_write: 400_000,
            total: None,
        };
        let cost = pricing.of(&usage);
        assert!((cost - (2.0 + 8.0 + 1.0 + 1.0)).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn config_overrides_limits_and_prices_of_catalogue_models() {
        let mut config = Config::default();
        let mut settings = crate::config::ProviderSettings::default();
        settings.models.insert(
            "gpt-4.1".into(),
            ModelSettings {
                context: Some(32_000),
                cost: Some(CostSettings { input: 1.0, output: 2.0, ..Default::default() }),
                ..Default::default()
            },
        );
        config.provider.insert("openai".into(), settings);
        let models =
            Models::new(config, Arc::new(|name| name.ends_with("_API_KEY").then(|| "sk-test".into())));
        let resolved = models.resolve(&ModelRef::new("openai", "gpt-4.1")).unwrap();
        assert_eq!(resolved.limits.context, 32_000);
        assert!(resolved.limits.output > 0, "the catalogue's output limit is kept");
        assert_eq!(resolved.pricing.output, 2.0);
        assert!(resolved.known);
        let unknown = models.resolve(&ModelRef::new("ollama", "my-finetune")).unwrap();
        assert!(!unknown.known);
        assert_eq!(unknown.limits, DEFAULT_LIMITS);
    }

    #[test]
    fn families_choose_edit_tools_and_sampling_and_config_overrides_them() {
        let mut config = Config::default();
        let mut local = crate::config::ProviderSettings {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            tool_call_text: Some(ToolCallText::Parse),
            ..Default::default()
        };
        local.models.insert(
            "coder".into(),
            ModelSettings { id: Some("qwen2.5-coder-1.5b-instruct".into()), ..Default::default() },
        );
        local.models.insert(
            "tuned".into(),
            ModelSettings {
                id: Some("qwen2.5-coder".into()),
                temperature: Some(0.2),
                top_p: Some(0.9),
                tools: Some(ToolProfile::Patch),
                tool_call_text: Some(ToolCallText::Off),
                ..Default::default()
            },
        );
        config.provider.insert("local".into(), local);
        let models =
            Models::new(config.clone(), Arc::new(|name| name.ends_with("_API_KEY").then(|| "sk".into())));
        let coder = models.resolve(&ModelRef::new("local", "coder")).unwrap();
        assert_eq!((coder.temperature, coder.top_p, coder.tools), (Some(0.55), Some(1.0), ToolProfile::Edit));
        assert_eq!(coder.tool_call_text, ToolCallText::Parse, "the provider's setting");
        let tuned = models.resolve(&ModelRef::new("local", "tuned")).unwrap();
        assert_eq!((tuned.temperature, tuned.top_p, tuned.tools), (Some(0.2), Some(0.9), ToolProfile::Patch));
        assert_eq!(tuned.tool_call_text, ToolCallText::Off, "the model's setting wins");
        let gpt5 = models.resolve(&ModelRef::new("openai", "gpt-5")).unwrap();
        assert_eq!((gpt5.tools, gpt5.temperature), (ToolProfile::Patch, None));
        assert_eq!(gpt5.tool_call_text, ToolCallText::Warn, "the default");
        let rows = catalogue(&config);
        let row = rows.iter().find(|r| r.reference == ModelRef::new("local", "tuned")).unwrap();
        assert_eq!((row.tools, row.temperature, row.top_p), (ToolProfile::Patch, Some(0.2), Some(0.9)));
    }

    #[test]
    fn a_bare_model_id_finds_the_one_set_up_provider_that_serves_it() {
        let env = |vars: &'static [&'static str]| -> EnvLookup {
            Arc::new(move |name| vars.contains(&name).then(|| "key".to_owned()))
        };
        let mut config = Config::default();
        let mut local = crate::config::ProviderSettings::default();
        local.models.insert("coder".into(), ModelSettings::default());
        config.provider.insert("local".into(), local);
        let models = Models::new(config.clone(), env(&["ANTHROPIC_API_KEY"]));
        assert_eq!(
            models.parse_model("claude-sonnet-4-6"),
            Ok(ModelRef::new("anthropic", "claude-sonnet-4-6"))
        );
        assert_eq!(models.parse_model("coder"), Ok(ModelRef::new("local", "coder")));
        assert_eq!(models.parse_model("openai/gpt-5"), Ok(ModelRef::new("openai", "gpt-5")));
        // Listed, but its provider is not set up here: says which provider would serve it.
        let error = models.parse_model("gpt-5.5").unwrap_err().to_string();
        assert!(error.contains("listed by openai") && error.contains("API key"), "{error}");
        let error = models.parse_model("no-such-model").unwrap_err().to_string();
        assert!(error.contains("provider/model") && error.contains("codeloop models"), "{error}");
        // Two set-up providers could serve it: the person names one.
        let mut both = config;
        let mut proxy = crate::config::ProviderSettings::default();
        proxy.models.insert("claude-sonnet-4-6".into(), ModelSettings::default());
        both.provider.insert("proxy".into(), proxy);
        let models = Models::new(both, env(&["ANTHROPIC_API_KEY"]));
        let error = models.parse_model("claude-sonnet-4-6").unwrap_err().to_string();
        assert!(
            error.contains("--model proxy/claude-sonnet-4-6 or --model anthropic/claude-sonnet-4-6"),
            "{error}"
        );
    }

    #[test]
    fn a_missing_api_key_is_reported_before_any_request() {
        let models = Models::new(Config::default(), Arc::new(|_| None));
        let error = models.resolve(&ModelRef::new("anthropic", "claude-sonnet-4-5")).unwrap_err();
        assert_eq!(
            error,
            ModelError::MissingKey { provider: "anthropic".into(), env: "ANTHROPIC_API_KEY".into() }
        );
        assert!(models.resolve(&ModelRef::new("llamacpp", "qwen")).is_ok(), "local servers need no key");
    }

    #[test]
    fn without_a_configured_model_the_first_key_found_chooses_one() {
        let env = |vars: &'static [(&'static str, &'static str)]| -> EnvLookup {
            Arc::new(move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
        };
        let models = Models::new(Config::default(), env(&[("OPENAI_API_KEY", "sk"), ("GROQ_API_KEY", "g")]));
        let (model, choice) = models.default_model_choice().unwrap();
        assert_eq!(model, ModelRef::new("openai", "gpt-4.1"));
        assert_eq!(choice, ModelChoice::FromKey { variable: "OPENAI_API_KEY".into() });
        let both =
            Models::new(Config::default(), env(&[("OPENAI_API_KEY", "sk"), ("ANTHROPIC_API_KEY", "a")]));
        assert_eq!(both.default_model().unwrap().provider_id, "anthropic");
        let google = Models::new(Config::default(), env(&[("GOOGLE_API_KEY", "k")]));
        assert_eq!(google.default_model().unwrap(), ModelRef::new("google", "gemini-2.5-pro"));
        assert!(google.resolve(&google.default_model().unwrap()).is_ok(), "GOOGLE_API_KEY is used");
        assert_eq!(Models::new(Config::default(), env(&[])).default_model(), Err(ModelError::NoModel));
        let configured = Config { model: Some("fake/x".into()), ..Config::default() };
        let models = Models::new(configured, env(&[("OPENAI_API_KEY", "sk")]));
        assert_eq!(models.default_model_choice().unwrap().1, ModelChoice::Configured);
    }

    #[test]
    fn sdk_base_url_variables_move_the_builtin_providers() {
        let vars: EnvLookup = Arc::new(|name| match name {
            "OPENAI_BASE_URL" => Some("http://127.0.0.1:9/v1/".into()),
            "ANTHROPIC_BASE_URL" => Some("http://127.0.0.1:9".into()),
            _ => None,
        });
        let models = Models::new(Config::default(), vars);
        assert_eq!(
            models.provider_endpoint("openai").unwrap().base_url.as_deref(),
            Some("http://127.0.0.1:9/v1")
        );
        assert_eq!(
            models.provider_endpoint("anthropic").unwrap().base_url.as_deref(),
            Some("http://127.0.0.1:9/v1")
        );
        // A base_url in config wins over the variable.
        let mut config = Config::default();
        config.provider.insert(
            "openai".into(),
            ProviderSettings { base_url: Some("http://gateway/v1".into()), ..Default::default() },
        );
        let models = Models::new(config, Arc::new(|_| Some("http://127.0.0.1:9/v1".into())));
        assert_eq!(
            models.provider_endpoint("openai").unwrap().base_url.as_deref(),
            Some("http://gateway/v1")
        );
    }
}
