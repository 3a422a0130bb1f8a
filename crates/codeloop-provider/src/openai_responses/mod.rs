//! OpenAI Responses (`api = "openai-responses"`): OpenAI and servers that copy it (OpenRouter, LM
//! Studio, DeepSeek).

mod decode;
mod request;

pub use decode::ResponsesDecoder;
pub use request::build_body;
pub(crate) use request::encode;
