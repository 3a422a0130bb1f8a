//! Google Gemini `streamGenerateContent` (`api = "gemini"`): the Gemini API
//! (`https://generativelanguage.googleapis.com/v1beta`, key in `x-goog-api-key`) and Vertex AI's
//! `…/publishers/google` base URLs, which take the same path and bodies.

mod decode;
mod request;
mod schema;

pub use decode::GeminiDecoder;
pub use request::build_body;
pub(crate) use request::encode;

/// `/models/{model}:streamGenerateContent?alt=sse`; a `models/` prefix on the id is not doubled.
pub(crate) fn path(model: &str) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    format!("/models/{model}:streamGenerateContent?alt=sse")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_model_is_named_in_the_path() {
        assert_eq!(super::path("gemini-2.5-pro"), "/models/gemini-2.5-pro:streamGenerateContent?alt=sse");
        assert_eq!(
            super::path("models/gemini-2.5-pro"),
            "/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
    }
}
