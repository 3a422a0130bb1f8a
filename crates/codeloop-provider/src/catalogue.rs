//! The model catalogue: limits, prices and capabilities per provider and model, in the models.dev shape
//! (`limit {context, input?, output}`, `cost` in USD per million tokens, `reasoning`, `tool_call`,
//! `modalities`). A built-in snapshot is embedded and parsed on first use; config entries override or
//! extend it; unknown models get sensible limits and zero cost, marked so callers can warn.
//!
//! Owns: model metadata and pricing. Must not: fetch anything at run time (no network on the start path).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use codeloop_types::Effort;

use crate::Usage;

/// The embedded snapshot (`src/catalogue.json`).
const BUILTIN: &str = include_str!("catalogue.json");

/// Limits for a model nobody describes: a common window, a cautious output.
pub const DEFAULT_LIMIT: Limit = Limit { context: 128_000, input: None, output: 8_192 };

/// Raw input (including cached tokens) above which `context_over_200k` prices apply (reference §4.2).
const LONG_CONTEXT_TOKENS: u64 = 200_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub id: String,
    #[serde(default)]
    pub name: String,
    /// The model thinks (reasoning tokens, thinking blocks).
    #[serde(default)]
    pub reasoning: bool,
    #[serde(default = "yes")]
    pub tool_call: bool,
    /// The model accepts a temperature.
    #[serde(default = "yes")]
    pub temperature: bool,
    #[serde(default)]
    pub modalities: Modalities,
    pub limit: Limit,
    #[serde(default)]
    pub cost: Cost,
    /// How thinking is controlled (models.dev's `reasoning_options`): levels, a token budget, on/off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning_options: Vec<ReasoningOption>,
}

/// One of models.dev's `reasoning_options`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReasoningOption {
    /// Levels as the API names them (`minimal`, `low`, …, `xhigh`, `max`).
    Effort { values: Vec<String> },
    /// A thinking budget in tokens.
    BudgetTokens {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u64>,
    },
    /// Thinking can be switched on or off, nothing finer.
    Toggle,
    #[serde(other)]
    Other,
}

/// The smallest budget Anthropic accepts, and the default floor for a model that names none.
const MIN_BUDGET: u64 = 1_024;

impl ModelInfo {
    /// What `effort` becomes on `wire` for this model, within `max_output` tokens: `Ok(None)` sends nothing
    /// (the model does not think, or Anthropic's "no thinking" default), `Err` says why the level cannot be
    /// honoured. A reasoning model the catalogue says nothing more about takes the family's usual control.
    pub fn reasoning_for(
        &self,
        effort: Effort,
        wire: crate::WireApi,
        max_output: u64,
    ) -> Result<Option<crate::Reasoning>, String> {
        use crate::{Reasoning, WireApi};
        if !self.reasoning {
            return if effort == Effort::None { Ok(None) } else { Err("the model does not reason".into()) };
        }
        // A service's effort follows its wire format (Azure is OpenAI Chat).
        let wire = wire.format();
        if effort == Effort::None && wire == WireApi::Anthropic {
            return Ok(None);
        }
        let defaults;
        let options = if self.reasoning_options.is_empty() {
            defaults = match wire {
                WireApi::OpenAiChat | WireApi::OpenAiResponses | WireApi::Azure => {
                    vec![ReasoningOption::Effort {
                        values: vec!["low".into(), "medium".into(), "high".into()],
                    }]
                }
                WireApi::Anthropic | WireApi::Gemini => {
                    vec![ReasoningOption::BudgetTokens { min: Some(MIN_BUDGET), max: None }]
                }
            };
            &defaults
        } else {
            &self.reasoning_options
        };
        let levels = options.iter().find_map(|o| match o {
            ReasoningOption::Effort { values } => Some(values),
            _ => None,
        });
        let budget = options.iter().find_map(|o| match o {
            ReasoningOption::BudgetTokens { min, max } => Some((*min, *max)),
            _ => None,
        });
        let named = |values: &Vec<String>| {
            let wanted: &[&str] = match effort {
                Effort::None => &["none", "minimal"],
                Effort::Low => &["low"],
                Effort::Medium => &["medium"],
                Effort::High => &["high"],
                Effort::Max => &["max", "xhigh"],
            };
            wanted.iter().find(|w| values.iter().any(|v| v == *w)).map(|w| (*w).to_owned())
        };
        // Anthropic's adaptive thinking came with `max` (4.6); before it, a model with levels and a budget
        // (Opus 4.5) thinks by budget, its levels needing a beta codeloop does not send.
        let prefer_budget = wire == WireApi::Anthropic
            && budget.is_some()
            && levels.is_some_and(|values| !values.iter().any(|v| v == "max"));
        if wire != WireApi::OpenAiChat
            && wire != WireApi::OpenAiResponses
            && let Some((min, max)) = budget
            && (prefer_budget || levels.is_none())
        {
            if effort == Effort::None {
                return if min == Some(0) {
                    Ok(Some(Reasoning::Budget(0)))
                } else {
                    Err("the model cannot stop thinking".into())
                };
            }
            let tokens = budget_tokens(effort, max_output, min.unwrap_or(MIN_BUDGET), max);
            return tokens.map(|t| Some(Reasoning::Budget(t))).ok_or_else(|| {
                format!("an output limit of {max_output} tokens leaves no room for a thinking budget")
            });
        }
        match levels {
            Some(values) => named(values)
                .map(|level| Some(Reasoning::Effort(level)))
                .ok_or_else(|| format!("the model takes effort {}", values.join(", "))),
            None => Err("the model takes no effort setting".into()),
        }
    }
}

/// A budget for `effort` out of `max_output` (low ⅛, medium ¼, high ½, max ¾), within the model's range
/// and leaving at least as much for the answer as the smallest budget; `None` when that cannot fit.
fn budget_tokens(effort: Effort, max_output: u64, min: u64, max: Option<u64>) -> Option<u64> {
    let share = match effort {
        Effort::None => return Some(0),
        Effort::Low => max_output / 8,
        Effort::Medium => max_output / 4,
        Effort::High => max_output / 2,
        Effort::Max => max_output / 4 * 3,
    };
    let tokens = share.max(min).min(max.unwrap_or(u64::MAX));
    (tokens + MIN_BUDGET <= max_output).then_some(tokens)
}

fn yes() -> bool {
    true
}

/// Token limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limit {
    pub context: u64,
    /// Some models limit the input separately from the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<u64>,
    pub output: u64,
}

/// USD per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub input: f64,
    pub output: f64,
    #[serde(default)]
    pub cache_read: f64,
    #[serde(default)]
    pub cache_write: f64,
    /// Prices when the raw input exceeds 200 000 tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_over_200k: Option<Box<Cost>>,
}

impl Cost {
    /// The dollar cost of one step: reasoning at the output rate, cache reads and writes at theirs.
    pub fn of(&self, usage: &Usage) -> f64 {
        let raw_input = usage.input + usage.cache_read + usage.cache_write;
        let prices = match &self.context_over_200k {
            Some(long) if raw_input > LONG_CONTEXT_TOKENS => long,
            _ => self,
        };
        (usage.input as f64 * prices.input
            + (usage.output + usage.reasoning) as f64 * prices.output
            + usage.cache_read as f64 * prices.cache_read
            + usage.cache_write as f64 * prices.cache_write)
            / 1_000_000.0
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Modalities {
    pub input: Vec<Modality>,
    pub output: Vec<Modality>,
}

impl Default for Modalities {
    fn default() -> Self {
        Self { input: vec![Modality::Text], output: vec![Modality::Text] }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Modality {
    Text,
    Image,
    Pdf,
    Audio,
    Video,
    #[serde(other)]
    Other,
}

/// The dollar cost of a step on a model (see [`Cost::of`]).
pub fn cost(model: &ModelInfo, usage: &Usage) -> f64 {
    model.cost.of(usage)
}

/// What a config `[provider.NAME.models.ID]` entry may set.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelOverride {
    pub context: Option<u64>,
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cost: Option<Cost>,
    /// The model thinks (`reasoning = true` for a model the catalogue does not describe).
    pub reasoning: Option<bool>,
}

/// Where a resolved model's data came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The catalogue entry for this provider and model.
    Catalogue,
    /// The same model listed under another provider: its limits and capabilities, but zero cost
    /// (that provider's prices say nothing about this one, e.g. a local server).
    OtherProvider(String),
    /// Set or changed by config.
    Config,
    /// Nobody knows the model: [`DEFAULT_LIMIT`] and zero cost. Callers should warn.
    Default,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub model: ModelInfo,
    pub source: Source,
}

impl Resolved {
    /// False when the limits are guesses ([`Source::Default`]).
    pub fn is_known(&self) -> bool {
        self.source != Source::Default
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ProviderModels {
    #[serde(default)]
    name: String,
    #[serde(default)]
    models: BTreeMap<String, ModelInfo>,
    /// Only in the `_source` entry: where the snapshot comes from and when it was taken.
    #[serde(default)]
    commit: Option<String>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    date: Option<String>,
}

/// Models by provider. Cheap to clone (a few dozen entries) so config can extend a copy.
#[derive(Debug, Clone, Default)]
pub struct Catalogue {
    providers: BTreeMap<String, ProviderModels>,
    /// `(provider, model)` entries set by config.
    overridden: BTreeSet<(String, String)>,
    source: Option<String>,
}

/// The catalogue file's entry that names its source instead of a provider.
const SOURCE_KEY: &str = "_source";

/// Where a refreshed catalogue is cached (set once at start-up, before the first model lookup).
static CACHED_PATH: OnceLock<std::path::PathBuf> = OnceLock::new();

/// Uses the catalogue cached at `path` (if there and valid) instead of the built-in one.
pub fn use_cached(path: std::path::PathBuf) {
    let _ = CACHED_PATH.set(path);
}

/// A cached catalogue, or `None` (with a warning when the file is there but unusable).
fn read_cached(path: &std::path::Path) -> Option<Catalogue> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(
                "cannot read the cached model catalogue {}: {e}; using the built-in one",
                path.display()
            );
            return None;
        }
    };
    match Catalogue::from_json(&text) {
        Ok(catalogue) if catalogue.models().next().is_some() => Some(catalogue),
        Ok(_) | Err(_) => {
            tracing::warn!(
                "the cached model catalogue {} is invalid; using the built-in one (run `codeloop models --refresh`)",
                path.display()
            );
            None
        }
    }
}

/// What a downloaded models.dev-shaped catalogue (`{provider: {name, models: {id: model}}}`) keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Refreshed {
    /// The catalogue file to cache, in the built-in snapshot's shape with a `_source` entry.
    pub json: String,
    pub providers: usize,
    pub models: usize,
    /// Entries left out because they do not parse (no limits, …).
    pub skipped: usize,
}

/// Checks and trims a downloaded catalogue: the providers of the built-in one, each model that parses
/// (price tiers above 200k tokens become `context_over_200k`); an error when nothing usable is left.
pub fn refresh_from(text: &str, from: &str, date: &str) -> Result<Refreshed, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("the download is not JSON: {e}"))?;
    let serde_json::Value::Object(providers) = value else {
        return Err("the download is not a catalogue: expected an object of providers".into());
    };
    let wanted: BTreeSet<&str> = Catalogue::builtin().providers.keys().map(String::as_str).collect();
    let mut out = serde_json::Map::new();
    out.insert(SOURCE_KEY.into(), serde_json::json!({ "from": from, "date": date }));
    let (mut models, mut skipped) = (0, 0);
    for (name, provider) in providers.into_iter().filter(|(name, _)| wanted.contains(name.as_str())) {
        let mut kept = serde_json::Map::new();
        for (id, mut model) in provider["models"].as_object().cloned().unwrap_or_default() {
            if let Some(tier) = long_context_tier(&model["cost"]) {
                model["cost"]["context_over_200k"] = tier;
            }
            match serde_json::from_value::<ModelInfo>(model) {
                Ok(info) => {
                    kept.insert(id, serde_json::to_value(info).map_err(|e| e.to_string())?);
                }
                Err(_) => skipped += 1,
            }
        }
        models += kept.len();
        if !kept.is_empty() {
            let display = provider["name"].as_str().unwrap_or(&name).to_owned();
            out.insert(name, serde_json::json!({ "name": display, "models": kept }));
        }
    }
    if models == 0 {
        return Err(format!(
            "no usable model for codeloop's providers ({}) in the download",
            wanted.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let providers = out.len() - 1;
    let json = serde_json::to_string(&out).map_err(|e| e.to_string())?;
    Ok(Refreshed { json, providers, models, skipped })
}

/// models.dev's `cost.tiers` entry for prompts over 200 000 tokens.
fn long_context_tier(cost: &serde_json::Value) -> Option<serde_json::Value> {
    let tier = cost["tiers"].as_array()?.iter().find(|t| t["tier"]["size"] == 200_000)?;
    let mut prices = tier.clone();
    prices.as_object_mut()?.remove("tier");
    Some(prices)
}

impl Catalogue {
    /// The catalogue in use: the one `codeloop models --refresh` cached (see [`use_cached`]) when it is
    /// there and valid, else the built-in one. Read once per process.
    pub fn active() -> &'static Catalogue {
        static ACTIVE: OnceLock<Option<Catalogue>> = OnceLock::new();
        ACTIVE
            .get_or_init(|| CACHED_PATH.get().and_then(|path| read_cached(path)))
            .as_ref()
            .unwrap_or_else(Self::builtin)
    }

    /// The embedded snapshot, parsed once.
    pub fn builtin() -> &'static Catalogue {
        static BUILTIN_CATALOGUE: OnceLock<Catalogue> = OnceLock::new();
        BUILTIN_CATALOGUE.get_or_init(|| match Catalogue::from_json(BUILTIN) {
            Ok(catalogue) => catalogue,
            Err(e) => {
                // A unit test parses the snapshot, so this only happens to a broken build.
                tracing::error!("the built-in model catalogue is invalid: {e}");
                Catalogue::default()
            }
        })
    }

    /// A catalogue in the models.dev shape: `{provider: {name, models: {id: model}}}`.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        let mut providers: BTreeMap<String, ProviderModels> = serde_json::from_str(text)?;
        let source = providers.remove(SOURCE_KEY).map(|s| {
            let mut text = s.from.unwrap_or_default();
            if let Some(commit) = s.commit {
                text.push_str(&format!(" at {commit}"));
            }
            if let Some(date) = s.date {
                text.push_str(&format!(", fetched {date}"));
            }
            text
        });
        Ok(Self { providers, overridden: BTreeSet::new(), source })
    }

    /// Where the catalogue comes from (the embedded snapshot's repository and commit), when it says.
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref().filter(|s| !s.is_empty())
    }

    /// The entry for exactly this provider and model; dated or `-latest` ids (`claude-sonnet-4-5-20250929`,
    /// `gpt-4o-2024-08-06`) also find their undated entry.
    pub fn get(&self, provider: &str, model: &str) -> Option<&ModelInfo> {
        let models = &self.providers.get(provider)?.models;
        models.get(model).or_else(|| models.get(undated(model)))
    }

    /// The model with its source: this provider's entry, else the same model under another provider
    /// (compared without a `vendor/` prefix, e.g. `gpt-oss-20b` on a local server), else the defaults.
    pub fn resolve(&self, provider: &str, model: &str) -> Resolved {
        if let Some(info) = self.get(provider, model) {
            let overridden = self.overridden.contains(&(provider.to_owned(), info.id.clone()));
            return Resolved {
                model: info.clone(),
                source: if overridden { Source::Config } else { Source::Catalogue },
            };
        }
        let wanted = undated(base_name(model));
        for (other, entry) in &self.providers {
            if let Some(info) = entry.models.values().find(|m| undated(base_name(&m.id)) == wanted) {
                let mut info = info.clone();
                info.id = model.to_owned();
                info.cost = Cost::default();
                return Resolved { model: info, source: Source::OtherProvider(other.clone()) };
            }
        }
        Resolved { model: unknown_model(model), source: Source::Default }
    }

    /// Applies a config entry: changes the model's limits or prices, or adds the model (starting from
    /// what [`Catalogue::resolve`] knows about it).
    pub fn set(&mut self, provider: &str, model: &str, changes: &ModelOverride) {
        let mut info = self.resolve(provider, model).model;
        info.id = model.to_owned();
        if let Some(context) = changes.context {
            info.limit.context = context;
        }
        if changes.input.is_some() {
            info.limit.input = changes.input;
        }
        if let Some(output) = changes.output {
            info.limit.output = output;
        }
        if let Some(cost) = &changes.cost {
            info.cost = cost.clone();
        }
        if let Some(reasoning) = changes.reasoning {
            info.reasoning = reasoning;
        }
        let entry = self.providers.entry(provider.to_owned()).or_default();
        entry.models.insert(model.to_owned(), info);
        self.overridden.insert((provider.to_owned(), model.to_owned()));
    }

    /// Every model, as `(provider, model)`, sorted by provider then id.
    pub fn models(&self) -> impl Iterator<Item = (&str, &ModelInfo)> {
        self.providers.iter().flat_map(|(p, entry)| entry.models.values().map(move |m| (p.as_str(), m)))
    }

    /// A provider's display name, if the catalogue lists it.
    pub fn provider_name(&self, provider: &str) -> Option<&str> {
        self.providers.get(provider).map(|p| p.name.as_str()).filter(|n| !n.is_empty())
    }
}

/// What a model nobody describes gets: [`DEFAULT_LIMIT`], zero cost, tools and temperature allowed.
pub fn unknown_model(id: &str) -> ModelInfo {
    ModelInfo {
        id: id.to_owned(),
        name: id.to_owned(),
        reasoning: false,
        tool_call: true,
        temperature: true,
        modalities: Modalities::default(),
        limit: DEFAULT_LIMIT,
        cost: Cost::default(),
        reasoning_options: Vec::new(),
    }
}

/// `openai/gpt-oss-20b` → `gpt-oss-20b`.
fn base_name(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

/// Drops a release suffix: `-latest`, `-20250929`, `-2024-08-06`.
fn undated(id: &str) -> &str {
    if let Some(stripped) = id.strip_suffix("-latest") {
        return stripped;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((head, date)) = id.rsplit_once('-')
        && date.len() == 8
        && digits(date)
    {
        return head;
    }
    // `-YYYY-MM-DD`: three dash-separated numeric parts.
    let mut parts = id.rsplitn(4, '-');
    if let (Some(day), Some(month), Some(year), Some(head)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
        && day.len() == 2
        && month.len() == 2
        && year.len() == 4
        && [day, month, year].iter().all(|p| digits(p))
    {
        return head;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, reasoning: u64, cache_read: u64, cache_write: u64) -> Usage {
        Usage { input, output, reasoning, cache_read, cache_write, total: None }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn builtin_snapshot_parses_and_lists_the_common_models() {
        let catalogue = Catalogue::builtin();
        for (provider, model) in [
            ("openai", "gpt-4.1"),
            ("openai", "gpt-4.1-mini"),
            ("openai", "gpt-4o"),
            ("openai", "gpt-4o-mini"),
            ("openai", "o3"),
            ("openai", "o4-mini"),
            ("openai", "gpt-5"),
            ("openai", "gpt-5-mini"),
            ("anthropic", "claude-sonnet-4-5"),
            ("anthropic", "claude-opus-4-1"),
            ("anthropic", "claude-haiku-4-5"),
            ("anthropic", "claude-sonnet-4-6"),
            ("anthropic", "claude-opus-4-7"),
            ("openai", "gpt-5.5"),
            ("google", "gemini-3.1-pro-preview"),
            ("deepseek", "deepseek-chat"),
            ("deepseek", "deepseek-reasoner"),
            ("groq", "openai/gpt-oss-20b"),
            ("groq", "openai/gpt-oss-120b"),
            ("groq", "llama-3.3-70b-versatile"),
            ("groq", "qwen/qwen3-32b"),
            ("google", "gemini-2.5-pro"),
            ("google", "gemini-2.5-flash"),
            ("google", "gemini-2.0-flash"),
        ] {
            let info = catalogue.get(provider, model).unwrap_or_else(|| panic!("{provider}/{model}"));
            assert!(info.limit.context > info.limit.output, "{provider}/{model}");
            assert!(info.cost.output >= info.cost.input, "{provider}/{model}");
        }
        assert!(catalogue.models().count() >= 100);
        assert!(catalogue.source().is_some_and(|s| s.contains("models.dev")), "{:?}", catalogue.source());
    }

    #[test]
    fn known_usage_on_a_catalogue_model_costs_the_list_price() {
        let gpt41 = Catalogue::builtin().get("openai", "gpt-4.1").unwrap();
        // 1M input at $2 + 1M output at $8.
        assert!(close(cost(gpt41, &usage(1_000_000, 1_000_000, 0, 0, 0)), 10.0));
        // 12 345 input and 678 output tokens.
        let expected = (12_345.0 * 2.0 + 678.0 * 8.0) / 1e6;
        assert!(close(cost(gpt41, &usage(12_345, 678, 0, 0, 0)), expected));
    }

    #[test]
    fn cached_and_reasoning_tokens_are_priced_at_their_rates() {
        let sonnet = Catalogue::builtin().get("anthropic", "claude-sonnet-4-5").unwrap();
        // input $3, output $15 (reasoning too), cache read $0.30, cache write $3.75 per million.
        let got = cost(sonnet, &usage(100_000, 20_000, 30_000, 50_000, 10_000));
        let expected = (100_000.0 * 3.0 + 50_000.0 * 15.0 + 50_000.0 * 0.3 + 10_000.0 * 3.75) / 1e6;
        assert!(close(got, expected), "{got} != {expected}");
        let o4 = Catalogue::builtin().get("openai", "o4-mini").unwrap();
        let got = cost(o4, &usage(0, 100, 900, 2_000_000, 0));
        assert!(close(got, (1_000.0 * 4.4 + 2_000_000.0 * 0.275) / 1e6), "{got}");
    }

    #[test]
    fn long_context_prices_apply_above_200k_input() {
        let pro = Catalogue::builtin().get("google", "gemini-3.1-pro-preview").unwrap();
        let long = pro.cost.context_over_200k.as_deref().unwrap();
        assert!(long.input > pro.cost.input && long.output > pro.cost.output);
        let got = cost(pro, &usage(150_000, 1_000, 0, 60_000, 0));
        let expected = (150_000.0 * long.input + 1_000.0 * long.output + 60_000.0 * long.cache_read) / 1e6;
        assert!(close(got, expected), "{got} != {expected}");
    }

    #[test]
    fn gemini_prices_reasoning_at_the_output_rate_and_long_prompts_higher() {
        let pro = Catalogue::builtin().get("google", "gemini-2.5-pro").unwrap();
        // input $1.25, output $10 (thinking too), cache read $0.125 per million.
        let got = cost(pro, &usage(100_000, 1_000, 9_000, 50_000, 0));
        assert!(close(got, (100_000.0 * 1.25 + 10_000.0 * 10.0 + 50_000.0 * 0.125) / 1e6), "{got}");
        // Above 200k prompt tokens (cached included): $2.50 / $15 / $0.25.
        let got = cost(pro, &usage(150_000, 1_000, 0, 60_000, 0));
        assert!(close(got, (150_000.0 * 2.5 + 1_000.0 * 15.0 + 60_000.0 * 0.25) / 1e6), "{got}");
    }

    #[test]
    fn dated_ids_find_their_entry() {
        let catalogue = Catalogue::builtin();
        assert_eq!(catalogue.get("anthropic", "claude-sonnet-4-6-20260217").unwrap().id, "claude-sonnet-4-6");
        assert_eq!(catalogue.get("anthropic", "claude-sonnet-4-6-latest").unwrap().id, "claude-sonnet-4-6");
        assert_eq!(catalogue.get("openai", "gpt-4o-mini-2024-07-18").unwrap().id, "gpt-4o-mini");
        assert!(catalogue.get("openai", "gpt-3").is_none());
    }

    #[test]
    fn the_same_model_elsewhere_gives_limits_but_no_prices() {
        let resolved = Catalogue::builtin().resolve("llamacpp", "gpt-oss-20b");
        assert_eq!(resolved.source, Source::OtherProvider("groq".into()));
        assert_eq!(resolved.model.limit.context, 131_072);
        assert_eq!(resolved.model.cost, Cost::default());
        assert_eq!(resolved.model.id, "gpt-oss-20b");
    }

    #[test]
    fn unknown_models_get_defaults_callers_can_detect() {
        let resolved = Catalogue::builtin().resolve("mine", "my-finetune");
        assert!(!resolved.is_known());
        assert_eq!(resolved.model.limit, DEFAULT_LIMIT);
        assert_eq!(cost(&resolved.model, &usage(1_000_000, 1_000_000, 0, 0, 0)), 0.0);
    }

    #[test]
    fn config_overrides_and_extends_entries() {
        let mut catalogue = Catalogue::builtin().clone();
        let cheaper = Cost { input: 1.0, output: 4.0, ..Cost::default() };
        catalogue.set(
            "openai",
            "gpt-4.1",
            &ModelOverride { output: Some(16_000), cost: Some(cheaper.clone()), ..Default::default() },
        );
        let resolved = catalogue.resolve("openai", "gpt-4.1");
        assert_eq!(resolved.source, Source::Config);
        assert_eq!(resolved.model.limit, Limit { context: 1_047_576, input: None, output: 16_000 });
        assert_eq!(resolved.model.cost, cheaper);

        catalogue.set(
            "local",
            "my-model",
            &ModelOverride { context: Some(32_000), output: Some(4_000), ..Default::default() },
        );
        let resolved = catalogue.resolve("local", "my-model");
        assert!(resolved.is_known());
        assert_eq!(resolved.model.limit, Limit { context: 32_000, input: None, output: 4_000 });
        // The built-in snapshot is untouched.
        assert_eq!(Catalogue::builtin().resolve("openai", "gpt-4.1").source, Source::Catalogue);
    }

    #[test]
    fn strips_release_suffixes_only() {
        assert_eq!(undated("claude-opus-4-1-20250805"), "claude-opus-4-1");
        assert_eq!(undated("gpt-4.1-2025-04-14"), "gpt-4.1");
        assert_eq!(undated("kimi-k2-instruct-0905"), "kimi-k2-instruct-0905");
        assert_eq!(undated("o3"), "o3");
    }

    #[test]
    fn effort_becomes_each_models_own_control() {
        use crate::{Reasoning, WireApi};
        use codeloop_types::Effort;
        let catalogue = Catalogue::builtin();
        let on = |provider: &str, model: &str, wire, effort, max_output| {
            catalogue.get(provider, model).unwrap().reasoning_for(effort, wire, max_output)
        };
        let level = |l: &str| Ok(Some(Reasoning::Effort(l.into())));
        // Anthropic: adaptive levels from 4.6 on, a budget before, nothing for `none`.
        assert_eq!(on("anthropic", "claude-opus-4-6", WireApi::Anthropic, Effort::Max, 32_000), level("max"));
        assert_eq!(on("anthropic", "claude-opus-4-7", WireApi::Anthropic, Effort::Low, 32_000), level("low"));
        assert_eq!(
            on("anthropic", "claude-sonnet-4-5", WireApi::Anthropic, Effort::High, 32_000),
            Ok(Some(Reasoning::Budget(16_000)))
        );
        assert_eq!(
            on("anthropic", "claude-opus-4-5", WireApi::Anthropic, Effort::Low, 32_000),
            Ok(Some(Reasoning::Budget(4_000)))
        );
        assert_eq!(on("anthropic", "claude-sonnet-4-6", WireApi::Anthropic, Effort::None, 32_000), Ok(None));
        assert!(on("anthropic", "claude-sonnet-4-5", WireApi::Anthropic, Effort::Low, 1_500).is_err());
        // OpenAI: the model's own names (`minimal` before `none` existed, `xhigh` as max).
        assert_eq!(on("openai", "gpt-5", WireApi::OpenAiChat, Effort::None, 32_000), level("minimal"));
        assert_eq!(on("openai", "gpt-5.5", WireApi::OpenAiResponses, Effort::None, 32_000), level("none"));
        assert_eq!(on("openai", "gpt-5.5", WireApi::OpenAiChat, Effort::Max, 32_000), level("xhigh"));
        let refused = on("openai", "o3", WireApi::OpenAiChat, Effort::Max, 32_000).unwrap_err();
        assert!(refused.contains("low, medium, high"), "{refused}");
        assert!(on("openai", "gpt-4.1", WireApi::OpenAiChat, Effort::High, 32_000).is_err());
        assert_eq!(on("openai", "gpt-4.1", WireApi::OpenAiChat, Effort::None, 32_000), Ok(None));
        // Gemini: a budget on 2.5 (0 switches Flash off, Pro cannot stop), levels on 3.
        assert_eq!(
            on("google", "gemini-2.5-flash", WireApi::Gemini, Effort::None, 32_000),
            Ok(Some(Reasoning::Budget(0)))
        );
        assert!(on("google", "gemini-2.5-pro", WireApi::Gemini, Effort::None, 32_000).is_err());
        assert_eq!(
            on("google", "gemini-2.5-flash", WireApi::Gemini, Effort::Max, 65_536),
            Ok(Some(Reasoning::Budget(24_576)))
        );
        assert_eq!(
            on("google", "gemini-3-flash-preview", WireApi::Gemini, Effort::None, 32_000),
            level("minimal")
        );
        assert!(on("google", "gemini-3-pro-preview", WireApi::Gemini, Effort::Medium, 32_000).is_err());
    }
}
#[cfg(test)]
mod timing {
    #[test]
    #[ignore = "a figure, not a check; meaningful in release"]
    fn builtin_parse_time() {
        let started = std::time::Instant::now();
        for _ in 0..20 {
            std::hint::black_box(super::Catalogue::from_json(super::BUILTIN).unwrap());
        }
        eprintln!("catalogue parse: {:?} each", started.elapsed() / 20);
        let catalogue = super::Catalogue::from_json(super::BUILTIN).unwrap();
        let started = std::time::Instant::now();
        for _ in 0..20 {
            std::hint::black_box(catalogue.clone());
        }
        eprintln!("catalogue clone: {:?} each", started.elapsed() / 20);
    }
}
