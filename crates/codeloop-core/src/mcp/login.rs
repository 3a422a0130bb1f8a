//! Signing in to a remote MCP server (DESIGN.md §5e), for `codeloop mcp login NAME`: OAuth 2.1 as the
//! MCP authorization spec says, through rmcp's OAuth machinery.
//!
//! 1. An unauthenticated request; its 401 `WWW-Authenticate` challenge starts discovery: RFC 9728
//!    protected resource metadata (from the challenge or the well-known URIs), then RFC 8414 / OpenID
//!    discovery of the authorization server.
//! 2. A server whose metadata lacks `S256` in `code_challenge_methods_supported` is refused.
//! 3. The client: the configured one (`oauth.client_id`), else the Client ID Metadata Document that
//!    `oauth.client_metadata_url` names (when the server takes them), else dynamic registration.
//! 4. The authorization URL (PKCE S256, `state`, and `resource` = the configured URL without a
//!    fragment); the redirect comes back to a loopback listener on 127.0.0.1; `iss` is checked (and
//!    required when the server's metadata says `authorization_response_iss_parameter_supported`); the
//!    code is exchanged with the verifier and `resource`; the tokens go to `mcp-auth/`.
//!
//! Must not: print or log a token, a code or a verifier; open a browser (the caller does, if there is
//! one).

use std::path::PathBuf;
use std::time::Duration;

use rmcp::transport::auth::{AuthorizationManager, AuthorizationMetadataSource, OAuthClientConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::auth::{AuthRecord, AuthStore, FileCredentials, resource_of};
use super::connect::{StartContext, client_secret, describe, probe_challenge};
use super::settings::{McpSettings, TransportKind};

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("MCP server {0} is a local (stdio) server: only remote servers (`url = …`) sign in")]
    Local(String),
    #[error("[mcp.{0}] has oauth = false, so codeloop never signs in to it: remove that line first")]
    OAuthOff(String),
    #[error("MCP server {0} does not ask for a sign-in: it answered without one, so there is nothing to do")]
    NotNeeded(String),
    #[error(
        "the authorization server of MCP server {name} does not offer PKCE with S256 \
         (code_challenge_methods_supported: {offered}); codeloop does not sign in without it"
    )]
    NoPkce { name: String, offered: String },
    #[error(
        "no sign-in came back within {secs} s: run `codeloop mcp login {name}` again and finish it in the \
         browser (or pass --timeout SECS for more time)"
    )]
    TimedOut { name: String, secs: u64 },
    #[error("signing in to MCP server {name} failed: {why}")]
    Failed { name: String, why: String },
}

/// A sign-in under way: the URL to open, and the listener its redirect comes back to.
pub struct PendingLogin {
    name: String,
    authorization_url: String,
    redirect_uri: String,
    manager: AuthorizationManager,
    listener: TcpListener,
    credentials: FileCredentials,
}

/// A finished sign-in.
#[derive(Debug, Clone)]
pub struct SignedIn {
    pub issuer: String,
    pub scopes: Vec<String>,
    /// Where the tokens are (`mcp-auth/…json`).
    pub file: PathBuf,
}

/// The authorization server metadata a 2025-03-26 server publishes at its own origin with an issuer
/// under a path (`issuer: https://host/oauth`, served at `https://host/.well-known/oauth-authorization-server`),
/// which RFC 8414's strict issuer rule refuses. Taken only when the issuer is on the MCP server's own
/// origin: the same party runs both, so there is no one to mix up.
async fn same_origin_metadata(resource: &str) -> Option<rmcp::transport::auth::AuthorizationMetadata> {
    let origin = origin_of(resource)?;
    let http = super::http::transport_client().ok()?;
    let response = http
        .get(format!("{origin}/.well-known/oauth-authorization-server"))
        .timeout(super::http::OAUTH_TIMEOUT)
        .send()
        .await
        .ok()?;
    let too_big = response.content_length().is_some_and(|n| n > super::http::MAX_OAUTH_BODY as u64);
    if !response.status().is_success() || too_big {
        return None;
    }
    let bytes = response.bytes().await.ok()?;
    let metadata: rmcp::transport::auth::AuthorizationMetadata = serde_json::from_slice(&bytes).ok()?;
    let issuer = metadata.issuer.as_deref()?;
    (origin_of(issuer)? == origin).then_some(metadata)
}

/// `scheme://host[:port]` of a URL.
fn origin_of(url: &str) -> Option<String> {
    let url = reqwest_mcp::Url::parse(url).ok()?;
    Some(url.origin().ascii_serialization()).filter(|o| o != "null")
}

/// What a sign-in asks for beyond the server's defaults.
#[derive(Debug, Clone, Default)]
pub struct LoginOptions {
    /// The scopes to ask for (`None`: the configured ones, else what the server's challenge or metadata
    /// suggests).
    pub scopes: Option<Vec<String>>,
}

/// Discovers, registers and prepares the authorization URL of server `name`.
pub async fn begin_login(
    name: &str,
    settings: &McpSettings,
    context: &StartContext,
) -> Result<PendingLogin, LoginError> {
    begin_login_with(name, settings, context, LoginOptions::default()).await
}

/// [`begin_login`] with [`LoginOptions`].
pub async fn begin_login_with(
    name: &str,
    settings: &McpSettings,
    context: &StartContext,
    options: LoginOptions,
) -> Result<PendingLogin, LoginError> {
    let failed = |why: String| LoginError::Failed { name: name.to_owned(), why };
    match settings.transport(name).map_err(failed)? {
        TransportKind::Stdio => return Err(LoginError::Local(name.to_owned())),
        TransportKind::Http | TransportKind::Sse => {}
    }
    if !settings.oauth.enabled() {
        return Err(LoginError::OAuthOff(name.to_owned()));
    }
    let resource = resource_of(settings.url.as_deref().unwrap_or_default());
    let challenge =
        match tokio::time::timeout(settings.timeout(), probe_challenge(name, settings, context)).await {
            Err(_) => {
                return Err(failed(format!(
                    "it did not answer within {} ms (timeout_ms in [mcp.{name}])",
                    settings.timeout().as_millis()
                )));
            }
            Ok(Err(why)) => return Err(failed(why)),
            Ok(Ok(None)) => return Err(LoginError::NotNeeded(name.to_owned())),
            Ok(Ok(Some(challenge))) => challenge,
        };
    let http = super::http::oauth_client().map_err(failed)?;
    let mut manager = AuthorizationManager::new_with_oauth_http_client(resource.as_str(), http)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let discovered =
        manager.resolve_metadata_from_challenge(Some(challenge.as_str()).filter(|c| !c.is_empty())).await;
    let metadata = match discovered {
        Ok(found) if found.source == AuthorizationMetadataSource::LegacyEndpointFallback => {
            // The 2025-03-26 revision's default endpoints (`/authorize`, `/token`, `/register` at the
            // server's origin); that revision requires PKCE, so S256 is taken as given.
            tracing::info!(server = %name, "no OAuth metadata published: using the 2025-03-26 default endpoints");
            let mut metadata = found.metadata;
            metadata.code_challenge_methods_supported.get_or_insert_with(|| vec!["S256".into()]);
            metadata
        }
        Ok(found) => found.metadata,
        Err(e @ rmcp::transport::auth::AuthError::AuthorizationServerMismatch { .. }) => {
            match same_origin_metadata(&resource).await {
                Some(metadata) => metadata,
                None => return Err(failed(format!("OAuth discovery failed: {}", describe(&e)))),
            }
        }
        Err(e) => return Err(failed(format!("OAuth discovery failed: {}", describe(&e)))),
    };
    let methods = metadata.code_challenge_methods_supported.clone().unwrap_or_default();
    if !methods.iter().any(|m| m == "S256") {
        let offered = if methods.is_empty() { "none".to_owned() } else { methods.join(", ") };
        return Err(LoginError::NoPkce { name: name.to_owned(), offered });
    }
    manager.set_metadata(metadata.clone());

    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| failed(format!("cannot listen on 127.0.0.1 for the redirect: {e}")))?;
    let port = listener.local_addr().map_err(|e| failed(e.to_string()))?.port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");

    let configured = settings.oauth.client();
    let mut scopes: Vec<String> =
        options.scopes.clone().unwrap_or_else(|| configured.map(|c| c.scopes.clone()).unwrap_or_default());
    if scopes.is_empty() {
        scopes = manager.select_scopes(None, &[]);
    } else if metadata.scopes_supported.as_ref().is_some_and(|s| s.iter().any(|s| s == "offline_access"))
        && !scopes.iter().any(|s| s == "offline_access")
    {
        // A refresh token, from servers that give one only for this scope.
        scopes.push("offline_access".into());
    }
    let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
    let takes_metadata_documents = metadata
        .additional_fields
        .get("client_id_metadata_document_supported")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    let client = match configured {
        Some(client) if client.client_id.is_some() => {
            let id = client.client_id.clone().unwrap_or_default();
            let mut config = OAuthClientConfig::new(id, redirect_uri.clone()).with_scopes(scopes.clone());
            if let Some(secret) = client_secret(name, client, &context.env).map_err(failed)? {
                config = config.with_client_secret(secret);
            }
            config
        }
        Some(client) if client.client_metadata_url.is_some() && takes_metadata_documents => {
            let url = client.client_metadata_url.clone().unwrap_or_default();
            if !url.starts_with("https://") {
                return Err(failed(format!(
                    "oauth.client_metadata_url of [mcp.{name}] must be an https URL"
                )));
            }
            OAuthClientConfig::new(url, redirect_uri.clone()).with_scopes(scopes.clone())
        }
        _ => {
            if metadata.registration_endpoint.is_none() {
                return Err(failed(format!(
                    "its authorization server takes no dynamic registration: register codeloop there and set \
                     oauth = {{ client_id = \"…\" }} in [mcp.{name}]"
                )));
            }
            manager
                .register_client("codeloop", &redirect_uri, &scope_refs)
                .await
                .map_err(|e| failed(format!("dynamic client registration failed: {}", describe(&e))))?
        }
    };
    // A configured client's secret stays in its environment variable; a registered one's is saved.
    let saved_secret =
        if configured.is_some_and(|c| c.client_id.is_some()) { None } else { client.client_secret.clone() };
    let client_id = client.client_id.clone();
    manager.configure_client(client).map_err(|e| failed(e.to_string()))?;

    let issuer = metadata.issuer.clone().unwrap_or_default();
    let store: AuthStore = context.auth.clone();
    let path = store.path_for(name, &issuer);
    let record = AuthRecord {
        server: name.to_owned(),
        issuer,
        resource,
        client_id,
        client_secret: saved_secret,
        redirect_uri: redirect_uri.clone(),
        metadata,
        credentials: None,
    };
    let credentials = FileCredentials::new(store, path, record);
    manager.set_credential_store(credentials.clone());
    let authorization_url = manager
        .get_authorization_url(&scope_refs)
        .await
        .map_err(|e| failed(format!("cannot build the authorization URL: {}", describe(&e))))?;
    Ok(PendingLogin {
        name: name.to_owned(),
        authorization_url,
        redirect_uri,
        manager,
        listener,
        credentials,
    })
}

impl PendingLogin {
    /// The URL to open in a browser.
    pub fn authorization_url(&self) -> &str {
        &self.authorization_url
    }

    pub fn redirect_uri(&self) -> &str {
        &self.redirect_uri
    }

    /// Waits up to `timeout` for the redirect, then exchanges its code for tokens and saves them.
    pub async fn finish(self, timeout: Duration) -> Result<SignedIn, LoginError> {
        let name = self.name.clone();
        let failed = |why: String| LoginError::Failed { name: name.clone(), why };
        let expected = state_of(&self.authorization_url);
        let deadline = tokio::time::Instant::now() + timeout;
        // Only the redirect that carries this sign-in's `state` counts: any other (a forged one, a
        // stale tab) gets an error page, and the listener waits on.
        let (mut stream, query) = loop {
            let accepted = tokio::time::timeout_at(deadline, self.listener.accept()).await;
            let (stream, _) = match accepted {
                Err(_) => return Err(LoginError::TimedOut { name: name.clone(), secs: timeout.as_secs() }),
                Ok(Err(e)) => return Err(failed(format!("the redirect listener failed: {e}"))),
                Ok(Ok(accepted)) => accepted,
            };
            let Some((mut stream, query)) = callback(stream).await else { continue };
            let state = query.iter().find(|(k, _)| k == "state").map(|(_, v)| v.as_str());
            if expected.is_some() && state != expected.as_deref() {
                tracing::warn!(
                    "a redirect to the sign-in listener of MCP server {name} carried the wrong state; ignored"
                );
                respond(
                    &mut stream,
                    "Not this sign-in",
                    "This link does not belong to the sign-in codeloop is waiting for; nothing was done. \
                     Finish the sign-in from the URL codeloop printed.",
                )
                .await;
                continue;
            }
            break (stream, query);
        };
        // What the redirect carries is outside text: shown with its control characters escaped.
        let value = |key: &str| {
            query.iter().find(|(k, _)| k == key).map(|(_, v)| codeloop_types::escape_controls(v).into_owned())
        };
        if let Some(error) = value("error") {
            let description = value("error_description").map(|d| format!(": {d}")).unwrap_or_default();
            respond(
                &mut stream,
                "Sign-in refused",
                "The authorization server refused the sign-in. You can close this tab.",
            )
            .await;
            return Err(failed(format!("the authorization server refused it ({error}{description})")));
        }
        let (Some(code), Some(state)) = (value("code"), value("state")) else {
            respond(&mut stream, "Sign-in failed", "The redirect carried no code. You can close this tab.")
                .await;
            return Err(failed("the redirect carried no code or state".into()));
        };
        let exchanged =
            self.manager.exchange_code_for_token_with_issuer(&code, &state, value("iss").as_deref()).await;
        if let Err(e) = exchanged {
            respond(
                &mut stream,
                "Sign-in failed",
                "codeloop could not finish the sign-in; see the terminal. You can close this tab.",
            )
            .await;
            return Err(failed(describe(&e)));
        }
        respond(&mut stream, "Signed in", "codeloop is signed in. You can close this tab.").await;
        let record = self.credentials.record();
        Ok(SignedIn {
            issuer: record.issuer.clone(),
            scopes: record.credentials.map(|c| c.granted_scopes).unwrap_or_default(),
            file: self.credentials.path().to_owned(),
        })
    }
}

/// The `state` the authorization URL asks to have back.
fn state_of(authorization_url: &str) -> Option<String> {
    let url = reqwest_mcp::Url::parse(authorization_url).ok()?;
    url.query_pairs().find(|(k, _)| k == "state").map(|(_, v)| v.into_owned())
}

/// Reads one request; its query when it is the redirect (`GET /callback?…`), else answers 404.
async fn callback(mut stream: TcpStream) -> Option<(TcpStream, Vec<(String, String)>)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        while !buffer.windows(4).any(|w| w == b"\r\n\r\n") && buffer.len() < 16 * 1024 {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    if read.is_err() {
        return None;
    }
    let head = String::from_utf8_lossy(&buffer);
    let target = head.lines().next().and_then(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("GET")).then(|| words.next()).flatten().map(str::to_owned)
    });
    let url = target.and_then(|t| reqwest_mcp::Url::parse(&format!("http://127.0.0.1{t}")).ok());
    match url {
        Some(url) if url.path() == "/callback" => {
            let query = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
            Some((stream, query))
        }
        _ => {
            let _ = stream
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await;
            None
        }
    }
}

async fn respond(stream: &mut TcpStream, title: &str, text: &str) {
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>{title}</title><body style=\"font-family:sans-serif\"><h1>{title}</h1><p>{text}</p>"
    );
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\ncache-control: no-store\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    // The browser may already be gone: the sign-in stands either way.
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
