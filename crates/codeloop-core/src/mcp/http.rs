//! The HTTP clients of remote MCP servers and their sign-in, made once per process: building a reqwest
//! client with the platform's certificate verifier costs 7 ms (70 ms the first time, reading the
//! system's certificates) on the async thread a run streams on. These share one TLS setup instead — the
//! ring provider and the webpki roots, as the provider clients use.
//!
//! Owns: the shared transport client, and rmcp's [`OAuthHttpClient`] over two shared clients (one that
//! follows redirects for discovery, one that never does for token requests), with bounded bodies.
//! Must not: decide anything about MCP or OAuth.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt as _;
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy, OAuthHttpRequest,
};

/// Longest an OAuth request may take (discovery, registration, tokens).
pub(crate) const OAUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest OAuth response body read.
pub(crate) const MAX_OAUTH_BODY: usize = 1024 * 1024;
/// Redirects an OAuth discovery request follows.
const MAX_REDIRECTS: usize = 10;

fn tls() -> Result<rustls::ClientConfig, String> {
    static TLS: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    TLS.get_or_init(|| {
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    })
    .clone()
}

fn builder() -> Result<reqwest_mcp::ClientBuilder, String> {
    super::ensure_crypto_provider();
    Ok(reqwest_mcp::Client::builder()
        .tls_backend_preconfigured(tls()?)
        .tcp_nodelay(true)
        .user_agent(concat!("codeloop/", env!("CARGO_PKG_VERSION"))))
}

/// The client every remote MCP server's transport uses (each start and call is bounded by the server's
/// own `timeout_ms` around it; connecting is bounded here too).
pub(crate) fn transport_client() -> Result<reqwest_mcp::Client, String> {
    static CLIENT: OnceLock<Result<reqwest_mcp::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            builder()?
                .connect_timeout(super::DEFAULT_MCP_TIMEOUT)
                .build()
                .map_err(|e| format!("cannot set up an HTTP client: {e}"))
        })
        .clone()
}

/// rmcp's OAuth requests, over the shared clients.
pub(crate) struct OAuthHttp {
    follow: reqwest_mcp::Client,
    stop: reqwest_mcp::Client,
}

/// The OAuth client, shared by every sign-in and refresh of the process.
pub(crate) fn oauth_client() -> Result<Arc<dyn OAuthHttpClient>, String> {
    static CLIENT: OnceLock<Result<Arc<OAuthHttp>, String>> = OnceLock::new();
    let client = CLIENT
        .get_or_init(|| {
            let build = |policy| {
                builder()?
                    .timeout(OAUTH_TIMEOUT)
                    .redirect(policy)
                    .build()
                    .map_err(|e| format!("cannot set up an HTTP client: {e}"))
            };
            Ok(Arc::new(OAuthHttp {
                follow: build(reqwest_mcp::redirect::Policy::limited(MAX_REDIRECTS))?,
                stop: build(reqwest_mcp::redirect::Policy::none())?,
            }))
        })
        .clone()?;
    Ok(client)
}

fn boxed(error: impl std::error::Error + Send + Sync + 'static) -> OAuthHttpClientError {
    Box::new(error)
}

#[derive(Debug, thiserror::Error)]
#[error("the OAuth response is larger than {MAX_OAUTH_BODY} bytes")]
struct TooLarge;

impl OAuthHttpClient for OAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let timeout = request.timeout;
            let mut request = reqwest_mcp::Request::try_from(request.request).map_err(boxed)?;
            if let Some(timeout) = timeout {
                *request.timeout_mut() = Some(timeout.min(OAUTH_TIMEOUT));
            }
            let response = client.execute(request).await.map_err(boxed)?;
            let mut answer = http::Response::builder().status(response.status()).version(response.version());
            for (name, value) in response.headers() {
                answer = answer.header(name, value);
            }
            let mut body = Vec::new();
            let mut chunks = response.bytes_stream();
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk.map_err(boxed)?;
                if body.len() + chunk.len() > MAX_OAUTH_BODY {
                    return Err(boxed(TooLarge));
                }
                body.extend_from_slice(&chunk);
            }
            answer.body(body).map_err(boxed)
        })
    }
}
