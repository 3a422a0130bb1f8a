//! The HTTP side of a running `codeloop serve`, shared by the UI's attached client and `codeloop run
//! --attach`: the base URL and bearer token, JSON calls that surface the server's own error message,
//! and the opened `GET /event` stream.
//!
//! Must not: interpret events (each client reads the stream its own way).

use std::pin::Pin;

use anyhow::Context;
use futures::Stream;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The SSE stream of `GET /event`, as opened.
pub type SseStream = Pin<
    Box<
        dyn Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

/// A server's address and an HTTP client that sends its token.
#[derive(Clone)]
pub struct ServerHttp {
    base: String,
    http: reqwest::Client,
}

impl ServerHttp {
    /// `url` is the server's base URL; `token` its bearer token, if it needs one (named by `token_source`
    /// in the error when it is not a valid header value).
    pub fn new(url: &str, token: Option<&str>, token_source: &str) -> anyhow::Result<ServerHttp> {
        let base = url.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") && !base.starts_with("https://") {
            anyhow::bail!("--attach needs a server URL such as http://127.0.0.1:4096, got `{url}`");
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .with_context(|| format!("{token_source} is not a valid header value"))?;
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let http = reqwest::Client::builder().default_headers(headers).build()?;
        Ok(ServerHttp { base, http })
    }

    /// `path` on the server, with query parameters.
    pub fn url(&self, path: &str, query: &[(&str, &str)]) -> anyhow::Result<reqwest::Url> {
        let url = format!("{}{path}", self.base);
        Ok(if query.is_empty() {
            reqwest::Url::parse(&url)?
        } else {
            reqwest::Url::parse_with_params(&url, query)?
        })
    }

    /// Sends `request`; a failure says which server and, for an error answer, the server's message.
    /// An empty body reads as `null`.
    pub async fn send<T: DeserializeOwned>(&self, request: reqwest::RequestBuilder) -> anyhow::Result<T> {
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach the codeloop server at {}", self.base))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        if !status.is_success() {
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or(text);
            anyhow::bail!("the server answered {status}: {message}");
        }
        let text = if text.is_empty() { "null".to_owned() } else { text };
        serde_json::from_str(&text).context("the server sent an unexpected answer")
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str, query: &[(&str, &str)]) -> anyhow::Result<T> {
        self.send(self.http.get(self.url(path, query)?)).await
    }

    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body)).await
    }

    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        self.send(self.http.delete(format!("{}{path}", self.base))).await
    }

    /// Opens `GET /event` with `query`, resuming after `last` when given (`Last-Event-ID`).
    pub async fn events(&self, query: &[(&str, &str)], last: Option<u64>) -> anyhow::Result<SseStream> {
        let mut request = self.http.get(self.url("/event", query)?);
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last.to_string());
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach the codeloop server at {}", self.base))?;
        if !response.status().is_success() {
            anyhow::bail!("the server refused the event stream: {}", response.status());
        }
        Ok(Box::pin(eventsource_stream::EventStream::new(response.bytes_stream())))
    }
}
