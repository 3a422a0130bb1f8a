//! Anthropic Messages (`api = "anthropic"`): Anthropic, Vertex/Bedrock-style gateways and compatible
//! servers.

mod decode;
mod request;

pub use decode::AnthropicDecoder;
pub(crate) use request::encode;
pub use request::{DEFAULT_MAX_TOKENS, build_body};
