//! The OpenTelemetry semantic conventions for generative AI, as codeloop reports them: the attribute and
//! metric names (from the `opentelemetry-semantic-conventions` crate), the advised histogram buckets,
//! the well-known provider names and each provider family's own finish reasons.
//!
//! Must not: build spans or record anything (`otel` does); this is the vocabulary only.

use codeloop_types::{ModelRef, SessionId};
use opentelemetry::KeyValue;

/// The GenAI conventions' names, from the `opentelemetry-semantic-conventions` crate. It marks them
/// deprecated because they moved to the GenAI conventions' own repository (same names, no crate of its
/// own yet): taken here once, under that allowance.
#[allow(deprecated)]
pub(crate) mod semconv {
    pub const GEN_AI_AGENT_NAME: &str = opentelemetry_semantic_conventions::attribute::GEN_AI_AGENT_NAME;
    pub const GEN_AI_CONVERSATION_ID: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_CONVERSATION_ID;
    pub const GEN_AI_OPERATION_NAME: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_OPERATION_NAME;
    pub const GEN_AI_PROVIDER_NAME: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_PROVIDER_NAME;
    pub const GEN_AI_REQUEST_MODEL: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_REQUEST_MODEL;
    pub const GEN_AI_RESPONSE_FINISH_REASONS: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_RESPONSE_FINISH_REASONS;
    pub const GEN_AI_TOKEN_TYPE: &str = opentelemetry_semantic_conventions::attribute::GEN_AI_TOKEN_TYPE;
    pub const GEN_AI_TOOL_CALL_ID: &str = opentelemetry_semantic_conventions::attribute::GEN_AI_TOOL_CALL_ID;
    pub const GEN_AI_TOOL_NAME: &str = opentelemetry_semantic_conventions::attribute::GEN_AI_TOOL_NAME;
    pub const GEN_AI_TOOL_TYPE: &str = opentelemetry_semantic_conventions::attribute::GEN_AI_TOOL_TYPE;
    pub const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS;
    pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS;
    pub const GEN_AI_USAGE_INPUT_TOKENS: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_USAGE_INPUT_TOKENS;
    pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str =
        opentelemetry_semantic_conventions::attribute::GEN_AI_USAGE_OUTPUT_TOKENS;
    pub const GEN_AI_CLIENT_OPERATION_DURATION: &str =
        opentelemetry_semantic_conventions::metric::GEN_AI_CLIENT_OPERATION_DURATION;
    pub const GEN_AI_CLIENT_TOKEN_USAGE: &str =
        opentelemetry_semantic_conventions::metric::GEN_AI_CLIENT_TOKEN_USAGE;
}

/// The conventions' advised buckets for `gen_ai.client.token.usage`.
pub(crate) const TOKEN_BOUNDS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// The conventions' advised buckets for `gen_ai.client.operation.duration`, in seconds.
pub(crate) const DURATION_BOUNDS: [f64; 14] =
    [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

pub(crate) fn model_attributes(model: &ModelRef) -> [KeyValue; 2] {
    [
        KeyValue::new(semconv::GEN_AI_REQUEST_MODEL, model.model_id.clone()),
        KeyValue::new(semconv::GEN_AI_PROVIDER_NAME, provider_name(&model.provider_id)),
    ]
}

/// The conventions' well-known `gen_ai.provider.name` for a configured provider id; any other id as it
/// is (an OpenAI-compatible server of the user's own, say).
pub(crate) fn provider_name(provider_id: &str) -> String {
    let known = match provider_id.to_ascii_lowercase().as_str() {
        "anthropic" => "anthropic",
        "openai" => "openai",
        "google" | "gemini" => "gcp.gemini",
        "vertex" | "vertexai" | "vertex-ai" | "google-vertex" => "gcp.vertex_ai",
        "bedrock" | "amazon-bedrock" | "aws-bedrock" => "aws.bedrock",
        "azure" | "azure-openai" => "azure.ai.openai",
        "mistral" => "mistral_ai",
        "xai" | "x-ai" => "x_ai",
        "groq" => "groq",
        "deepseek" => "deepseek",
        "perplexity" => "perplexity",
        "cohere" => "cohere",
        _ => return provider_id.to_owned(),
    };
    known.to_owned()
}

/// A step's finish as its provider writes it (the conventions ask for the provider's own words).
pub(crate) fn provider_finish(provider: &str, finish: codeloop_types::Finish) -> &'static str {
    use codeloop_types::Finish;
    match (provider, finish) {
        ("anthropic" | "aws.bedrock" | "gcp.vertex_ai", Finish::Stop) => "end_turn",
        ("anthropic" | "aws.bedrock" | "gcp.vertex_ai", Finish::ToolCalls) => "tool_use",
        ("anthropic" | "aws.bedrock" | "gcp.vertex_ai", Finish::Length) => "max_tokens",
        ("anthropic" | "aws.bedrock" | "gcp.vertex_ai", Finish::ContentFilter) => "refusal",
        ("gcp.gemini", Finish::Stop | Finish::ToolCalls) => "STOP",
        ("gcp.gemini", Finish::Length) => "MAX_TOKENS",
        ("gcp.gemini", Finish::ContentFilter) => "SAFETY",
        (_, Finish::Stop) => "stop",
        (_, Finish::ToolCalls) => "tool_calls",
        (_, Finish::Length) => "length",
        (_, Finish::ContentFilter) => "content_filter",
        (_, Finish::Error) => "error",
        (_, Finish::Unknown) => "unknown",
    }
}

/// A tool span's attributes: the conventions' (`execute_tool`, name, call id, type) and codeloop's.
pub(crate) fn tool_attributes(session: &SessionId, tool: &codeloop_types::ToolPart) -> Vec<KeyValue> {
    vec![
        crate::otel::session_attribute(session),
        KeyValue::new("codeloop.tool.name", tool.tool.clone()),
        KeyValue::new(semconv::GEN_AI_OPERATION_NAME, "execute_tool"),
        KeyValue::new(semconv::GEN_AI_TOOL_NAME, tool.tool.clone()),
        KeyValue::new(semconv::GEN_AI_TOOL_CALL_ID, tool.call_id.clone()),
        // Every tool is a function the model calls by name (the conventions' `function`).
        KeyValue::new(semconv::GEN_AI_TOOL_TYPE, "function"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeloop_types::Finish;

    #[test]
    fn well_known_providers_and_their_own_finish_words() {
        assert_eq!(provider_name("anthropic"), "anthropic");
        assert_eq!(provider_name("google"), "gcp.gemini");
        assert_eq!(provider_name("bedrock"), "aws.bedrock");
        assert_eq!(provider_name("azure"), "azure.ai.openai");
        assert_eq!(provider_name("my-vllm"), "my-vllm", "an id of the user's own stays");
        assert_eq!(provider_finish("anthropic", Finish::ToolCalls), "tool_use");
        assert_eq!(provider_finish("openai", Finish::ToolCalls), "tool_calls");
        assert_eq!(provider_finish("gcp.gemini", Finish::Length), "MAX_TOKENS");
        assert_eq!(provider_finish("my-vllm", Finish::Stop), "stop");
    }
}
