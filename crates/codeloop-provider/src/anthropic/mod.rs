//! Anthropic Messages (`api = "anthropic"`): Anthropic, Vertex/Bedrock-style gateways and compatible
//! servers.

mod decode;
mod request;

pub use decode::AnthropicDecoder;
pub use request::{DEFAULT_MAX_TOKENS, INTERLEAVED_THINKING_BETA, build_body};
pub(crate) use request::{beta, encode};
