//! OpenAI Chat Completions (`api = "openai-chat"`): OpenAI and every compatible server (DeepSeek,
//! Groq, OpenRouter, xAI, llama.cpp, vLLM, Ollama…).

mod decode;
mod request;

pub use decode::ChatDecoder;
pub use request::build_body;
pub(crate) use request::encode;
