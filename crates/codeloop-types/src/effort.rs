//! How hard a model is asked to think (DESIGN.md §5l): one scale for every provider family, mapped to
//! each family's own request fields by the provider adapters.

use serde::{Deserialize, Serialize};

/// `effort = "none" | "low" | "medium" | "high" | "max"`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, strum::IntoStaticStr,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    /// No thinking: nothing is asked for (or thinking is switched off where the model thinks by default).
    None,
    Low,
    Medium,
    High,
    /// The deepest the model offers (Anthropic `max`, OpenAI `xhigh`).
    Max,
}

impl Effort {
    pub const ALL: [Effort; 5] = [Effort::None, Effort::Low, Effort::Medium, Effort::High, Effort::Max];

    /// The config value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for Effort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An effort value that is not one of the levels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown effort `{0}`: use one of none, low, medium, high, max")]
pub struct EffortError(pub String);

impl std::str::FromStr for Effort {
    type Err = EffortError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = text.trim().to_ascii_lowercase();
        Effort::ALL.into_iter().find(|e| e.as_str() == wanted).ok_or_else(|| EffortError(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::Effort;

    #[test]
    fn levels_read_as_written_and_unknown_ones_name_the_levels() {
        assert_eq!("High".parse::<Effort>(), Ok(Effort::High));
        for effort in Effort::ALL {
            assert_eq!(effort.as_str().parse::<Effort>(), Ok(effort));
            assert_eq!(serde_json::to_value(effort).ok(), Some(serde_json::json!(effort.as_str())));
        }
        let error = "xhigh".parse::<Effort>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("`xhigh`") && error.contains("none, low, medium, high, max"), "{error}");
    }
}
