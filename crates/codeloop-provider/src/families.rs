//! Model families: what is known of a model from its id alone (reference §8.2 and §13, as OpenCode
//! does): which file-editing tools it was trained on, and the sampling some families need.
//!
//! Owns: those defaults. Config (`[provider.NAME.models.ID] tools, temperature, top_p`) overrides them,
//! and a model that takes no temperature (o3, gpt-5) gets none whatever they say.

use codeloop_types::ToolProfile;

/// The defaults of a model's family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FamilyDefaults {
    pub tools: ToolProfile,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
}

impl FamilyDefaults {
    /// Whether the id names a family with defaults of its own (else every model's defaults).
    pub fn is_specific(&self) -> bool {
        *self != defaults("")
    }
}

/// The defaults for a model id (`gpt-5-codex`, `openai/gpt-oss-20b`, `Qwen2.5-Coder-1.5B-Instruct`).
pub fn defaults(model_id: &str) -> FamilyDefaults {
    let id = model_id.rsplit('/').next().unwrap_or(model_id).to_ascii_lowercase();
    let has = |part: &str| id.contains(part);
    // OpenCode offers `apply_patch` instead of `edit` and `write` to `gpt-` models other than gpt-4 and
    // the open-weight gpt-oss; the codex models are trained on the same format.
    let tools = if (has("gpt-") && !has("oss") && !has("gpt-4")) || has("codex") {
        ToolProfile::Patch
    } else {
        ToolProfile::Edit
    };
    let (temperature, top_p) = if has("qwen") {
        (Some(0.55), Some(1.0))
    } else if has("gemini") || has("minimax-m2") || has("kimi-k2.5") || has("kimi-k2-5") {
        (Some(1.0), Some(0.95))
    } else if has("glm-4.6") || has("glm-4.7") || (has("kimi-k2") && has("thinking")) {
        (Some(1.0), None)
    } else if has("kimi-k2") {
        (Some(0.6), None)
    } else {
        (None, None)
    };
    FamilyDefaults { tools, temperature, top_p }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt5_and_codex_get_apply_patch_and_the_others_edit() {
        for id in ["gpt-5", "gpt-5-mini", "openai/gpt-5.1-codex", "codex-mini-latest", "GPT-5"] {
            assert_eq!(defaults(id).tools, ToolProfile::Patch, "{id}");
        }
        for id in ["gpt-4.1", "gpt-4o", "openai/gpt-oss-20b", "claude-sonnet-4-5", "qwen2.5-coder-1.5b", "o3"]
        {
            assert_eq!(defaults(id).tools, ToolProfile::Edit, "{id}");
        }
    }

    #[test]
    fn families_that_need_sampling_get_it() {
        let qwen = defaults("Qwen2.5-Coder-1.5B-Instruct");
        assert_eq!((qwen.temperature, qwen.top_p), (Some(0.55), Some(1.0)));
        assert_eq!(defaults("qwen/qwen3-32b").temperature, Some(0.55));
        assert_eq!(defaults("gemini-2.5-pro").top_p, Some(0.95));
        assert_eq!(defaults("moonshotai/kimi-k2-instruct-0905").temperature, Some(0.6));
        assert_eq!(defaults("kimi-k2-thinking").temperature, Some(1.0));
        let claude = defaults("claude-sonnet-4-5");
        assert_eq!((claude.temperature, claude.top_p), (None, None));
        assert!(!claude.is_specific() && qwen.is_specific() && defaults("gpt-5").is_specific());
    }
}
