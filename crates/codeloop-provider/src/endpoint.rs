//! Who is behind an OpenAI-format base URL. OpenAI itself takes fields (`max_completion_tokens`,
//! `prompt_cache_key`) that some compatible servers reject, so they are only sent to it.

/// The server an OpenAI-format request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    OpenAi,
    /// Any other server speaking the format (OpenRouter, Groq, DeepSeek, llama.cpp, vLLM…).
    Compatible,
}

impl Endpoint {
    pub fn of(base_url: &str) -> Self {
        let host = base_url.split("://").nth(1).unwrap_or(base_url).split(['/', ':']).next().unwrap_or("");
        if host == "api.openai.com" { Endpoint::OpenAi } else { Endpoint::Compatible }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_openai_by_host() {
        assert_eq!(Endpoint::of("https://api.openai.com/v1"), Endpoint::OpenAi);
        assert_eq!(Endpoint::of("https://api.openai.com:443/v1/"), Endpoint::OpenAi);
        assert_eq!(Endpoint::of("https://proxy.example/api.openai.com/v1"), Endpoint::Compatible);
        assert_eq!(Endpoint::of("http://127.0.0.1:8080/v1"), Endpoint::Compatible);
    }
}
