use serde::{Deserialize, Serialize};

use crate::{MessageId, Millis, PermissionRule, SessionId, Tokens};

/// A pending revert: the messages from `message_id` on are hidden from the model and their files put
/// back; `snapshot` is the tree an unrevert restores `files` from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revert {
    pub message_id: MessageId,
    pub snapshot: String,
    #[serde(default)]
    pub files: Vec<String>,
    /// Calls in the reverted range that acted outside the project (commands, MCP tools, fetches): a
    /// revert puts files back, it cannot undo these (DESIGN.md §5m).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_undone: Vec<NotUndone>,
}

/// A call a revert cannot undo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotUndone {
    pub call_id: String,
    pub tool: String,
    pub title: String,
    /// When it started (ms since the epoch).
    pub time: crate::Millis,
}

/// A conversation with its working directory, model and running totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub id: SessionId,
    pub title: String,
    pub directory: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<SessionId>,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// Session-level permission rules (layered after agent and config rules).
    #[serde(default)]
    pub permission: Vec<PermissionRule>,
    /// Sum of every step's tokens in this session.
    #[serde(default)]
    pub tokens: Tokens,
    /// Sum of every step's cost in USD.
    #[serde(default)]
    pub cost: f64,
    pub time: SessionTime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert: Option<Revert>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTime {
    pub created: Millis,
    pub updated: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacting: Option<Millis>,
}

impl Session {
    /// A new root session in `directory` with the default title `New session - <ISO time>`.
    pub fn new(directory: impl Into<String>, agent: impl Into<String>, model: Option<ModelRef>) -> Self {
        let now = crate::now_ms();
        Self {
            id: SessionId::new(),
            title: format!("New session - {}", iso8601(now)),
            directory: directory.into(),
            parent_id: None,
            agent: agent.into(),
            model,
            permission: Vec::new(),
            tokens: Tokens::default(),
            cost: 0.0,
            time: SessionTime { created: now, updated: now, compacting: None },
            revert: None,
        }
    }
}

/// `provider/model`, e.g. `openai/gpt-4.1`; the model part may itself contain slashes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelRef {
    pub provider_id: String,
    pub model_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid model `{0}`: expected `provider/model`, e.g. `openai/gpt-4.1`")]
pub struct ModelRefError(pub String);

impl ModelRef {
    pub fn new(provider_id: impl Into<String>, model_id: impl Into<String>) -> Self {
        Self { provider_id: provider_id.into(), model_id: model_id.into() }
    }
}

impl std::str::FromStr for ModelRef {
    type Err = ModelRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((provider, model)) if !provider.is_empty() && !model.is_empty() => {
                Ok(Self::new(provider, model))
            }
            _ => Err(ModelRefError(s.to_owned())),
        }
    }
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider_id, self.model_id)
    }
}

/// Which file-editing tools a model is offered (reference §8.2): `apply_patch` for the models trained on
/// it (the GPT-5 and codex families), `edit` and `write` for the others. Set per model with
/// `tools = "patch" | "edit"` in `[provider.NAME.models.ID]`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, strum::IntoStaticStr, strum::VariantArray,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum ToolProfile {
    /// `apply_patch` (a multi-file patch envelope).
    Patch,
    /// `edit` (exact string replacement) and `write` (whole files).
    Edit,
}

impl ToolProfile {
    /// The config value: `patch` or `edit`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Formats epoch milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC, RFC 3339) without a date crate.
pub fn iso8601(ms: Millis) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The calendar date (`YYYY-MM-DD`, UTC) of epoch milliseconds.
pub fn date_of(ms: Millis) -> String {
    iso8601(ms)[..10].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_formats_known_instants() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_798_675_200_123), "2026-12-31T00:00:00.123Z");
        assert_eq!(date_of(951_782_400_000), "2000-02-29");
    }

    #[test]
    fn model_ref_parses_provider_and_nested_model() {
        let m: ModelRef = "openrouter/anthropic/claude-sonnet-4.5".parse().unwrap();
        assert_eq!(m.provider_id, "openrouter");
        assert_eq!(m.model_id, "anthropic/claude-sonnet-4.5");
        assert!("gpt-4".parse::<ModelRef>().is_err());
    }
}

#[cfg(test)]
mod toolprofile_text {
    use super::ToolProfile;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in ToolProfile::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
