use serde::{Deserialize, Serialize};

/// Why an assistant message failed (DESIGN.md §3). Serialised with a `name` tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(tag = "name")]
pub enum AssistantError {
    /// Missing or rejected credentials.
    ProviderAuth {
        message: String,
        provider_id: String,
    },
    /// An HTTP or stream error from the provider.
    Api {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        retryable: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
    },
    /// The request did not fit the model's context window.
    ContextOverflow {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
    },
    /// The answer hit the output token limit.
    OutputLength {
        message: String,
    },
    /// The run was interrupted, or the process died mid-turn.
    Aborted {
        message: String,
    },
    /// The provider blocked the answer.
    ContentFilter {
        message: String,
    },
    Unknown {
        message: String,
    },
}

impl AssistantError {
    pub fn message(&self) -> &str {
        match self {
            AssistantError::ProviderAuth { message, .. }
            | AssistantError::Api { message, .. }
            | AssistantError::ContextOverflow { message, .. }
            | AssistantError::OutputLength { message }
            | AssistantError::Aborted { message }
            | AssistantError::ContentFilter { message }
            | AssistantError::Unknown { message } => message,
        }
    }

    pub fn name(&self) -> &'static str {
        self.into()
    }

    pub fn aborted() -> Self {
        AssistantError::Aborted { message: "The operation was aborted.".into() }
    }

    pub fn is_aborted(&self) -> bool {
        matches!(self, AssistantError::Aborted { .. })
    }
}

impl std::fmt::Display for AssistantError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name(), self.message())
    }
}
