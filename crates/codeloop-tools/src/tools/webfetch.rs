//! `webfetch`: fetches a URL (reference §8.3 webfetch) as Markdown-like text, plain text or raw HTML;
//! images come back as attachments. Asks `webfetch` with the URL. At most 5 MiB, 30 s by default (120 s
//! at most), cancelled with the call.

use std::time::Duration;

use async_trait::async_trait;
use codeloop_types::FilePart;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::read::sniff::{base64, media_type};
use crate::schema::{decode, schema_for};
use crate::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};

/// Largest body read.
pub const MAX_BYTES: usize = 5 * 1024 * 1024;
const DEFAULT_TIMEOUT_SECS: u64 = 30;
const MAX_TIMEOUT_SECS: u64 = 120;
/// Column width for rendered HTML.
const TEXT_WIDTH: usize = 100;

const DESCRIPTION: &str = "Fetch a URL (http or https) and return its content: HTML as Markdown (default), plain text \
or raw HTML; images as attachments. Use it to read documentation or an issue the task refers to. Limited to 5 MB.";

#[derive(Deserialize, JsonSchema, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
enum Format {
    #[default]
    Markdown,
    Text,
    Html,
}

#[derive(Deserialize, JsonSchema)]
struct Params {
    /// The URL to fetch (http:// or https://).
    url: String,
    /// markdown (default), text or html.
    #[serde(default)]
    format: Format,
    /// Seconds to wait, at most 120 (default 30).
    #[serde(default)]
    timeout: Option<u64>,
}

pub struct WebFetchTool {
    parameters: Value,
    client: Option<reqwest::Client>,
}

impl WebFetchTool {
    pub fn new() -> Self {
        let client = reqwest::Client::builder()
            .user_agent(concat!("Mozilla/5.0 (compatible; codeloop/", env!("CARGO_PKG_VERSION"), ")"))
            .build()
            .ok();
        Self { parameters: schema_for::<Params>(), client }
    }
}

impl Default for WebFetchTool {
    fn default() -> Self {
        Self::new()
    }
}

fn failed(message: impl Into<String>) -> ToolFailure {
    ToolFailure::Failed(message.into())
}

/// `https://host[:port]/*`: what an "always" answer approves.
fn origin_pattern(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{}://{host}:{port}/*", url.scheme()),
        (Some(host), None) => format!("{}://{host}/*", url.scheme()),
        (None, _) => url.to_string(),
    }
}

#[async_trait]
impl Tool for WebFetchTool {
    fn name(&self) -> &str {
        "webfetch"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        let url = reqwest::Url::parse(params.url.trim())
            .map_err(|e| failed(format!("Invalid URL {:?}: {e}", params.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(failed(format!("Only http and https URLs can be fetched, not {}", url.scheme())));
        }
        if ctx.walls.as_ref().is_some_and(|w| !w.policy.network) {
            return Err(failed(
                "The network is closed for this session ([sandbox] network = false in the user's config); \
                 webfetch cannot fetch anything. Ask the user if the page is needed.",
            ));
        }
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: "webfetch".into(),
            patterns: vec![url.to_string()],
            always: vec![origin_pattern(&url)],
            metadata: json!({"url": url.as_str()}),
        })
        .await?;
        let client = self.client.as_ref().ok_or_else(|| failed("The HTTP client could not be created"))?;
        let timeout =
            Duration::from_secs(params.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS).clamp(1, MAX_TIMEOUT_SECS));
        let fetch = fetch(client, url.clone(), timeout);
        let (content_type, body) = tokio::select! {
            result = fetch => result?,
            _ = ctx.cancel.cancelled() => return Err(ToolFailure::Cancelled),
        };
        let title = format!("{url} ({content_type})");
        if let Some(mime) = media_type(&body).filter(|m| m.starts_with("image/")) {
            return Ok(ToolOutput {
                title,
                output: "Image fetched successfully".into(),
                metadata: json!({"url": url.as_str(), "bytes": body.len()}),
                attachments: vec![FilePart {
                    mime: mime.to_owned(),
                    filename: url.path_segments().and_then(|mut s| s.next_back()).map(str::to_owned),
                    url: format!("data:{mime};base64,{}", base64(&body)),
                    source: None,
                }],
            });
        }
        let text = String::from_utf8_lossy(&body);
        let output = if content_type.contains("html") && params.format != Format::Html {
            render_html(&body, params.format)
        } else {
            text.into_owned()
        };
        Ok(ToolOutput {
            title,
            output,
            metadata: json!({"url": url.as_str(), "bytes": body.len(), "content_type": content_type}),
            attachments: Vec::new(),
        })
    }
}

async fn fetch(
    client: &reqwest::Client,
    url: reqwest::Url,
    timeout: Duration,
) -> Result<(String, Vec<u8>), ToolFailure> {
    let request = async {
        let mut response = client
            .get(url.clone())
            .header("accept", "text/markdown, text/html;q=0.9, text/plain;q=0.8, */*;q=0.1")
            .send()
            .await
            .map_err(|e| failed(format!("Request to {url} failed: {e}")))?;
        if !response.status().is_success() {
            return Err(failed(format!("Request to {url} failed with status {}", response.status())));
        }
        if response.content_length().is_some_and(|len| len > MAX_BYTES as u64) {
            return Err(failed(format!("The response is larger than {} MB", MAX_BYTES / 1024 / 1024)));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let mut body = Vec::new();
        while let Some(chunk) =
            response.chunk().await.map_err(|e| failed(format!("Reading {url} failed: {e}")))?
        {
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(failed(format!("The response is larger than {} MB", MAX_BYTES / 1024 / 1024)));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((content_type, body))
    };
    tokio::time::timeout(timeout, request)
        .await
        .map_err(|_| failed(format!("Request to {url} timed out after {} s", timeout.as_secs())))?
}

/// HTML as readable text: Markdown-like decorations (headings, emphasis, links as numbered references) or
/// plain text.
fn render_html(html: &[u8], format: Format) -> String {
    let config = match format {
        Format::Text => html2text::config::plain_no_decorate(),
        _ => html2text::config::plain().link_footnotes(true),
    };
    config.string_from_read(html, TEXT_WIDTH).unwrap_or_else(|_| String::from_utf8_lossy(html).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_readable_text_without_scripts() {
        let html = b"<html><head><style>p{}</style><script>alert(1)</script></head><body><h1>Title</h1><p>Some <b>bold</b> text with a <a href='https://x.dev'>link</a>.</p></body></html>";
        let markdown = render_html(html, Format::Markdown);
        assert!(markdown.contains("# Title") && markdown.contains("https://x.dev"), "{markdown}");
        assert!(!markdown.contains("alert"), "{markdown}");
        let text = render_html(html, Format::Text);
        assert!(text.contains("bold text") && !text.contains("**") && !text.contains("alert"), "{text}");
    }

    #[test]
    fn always_approves_the_whole_origin() {
        let url = reqwest::Url::parse("https://docs.rs/tokio/latest/tokio/").unwrap();
        assert_eq!(origin_pattern(&url), "https://docs.rs/*");
    }
}
