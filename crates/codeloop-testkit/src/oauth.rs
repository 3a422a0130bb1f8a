//! A small OAuth 2.1 authorization server on loopback for the MCP sign-in tests (feature `mcp`): RFC 8414
//! metadata, dynamic registration (RFC 7591), an authorization endpoint that approves at once and
//! redirects back (with `iss`, RFC 9207), and a token endpoint for the code (PKCE S256 checked: a wrong
//! verifier is refused) and refresh grants. Every call is recorded with its parameters, so tests see the
//! `resource` of each request (RFC 8707).

use codeloop_types::LockExt;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The access tokens an authorization server issued and still honours (shared with the resource).
#[derive(Clone, Default)]
pub struct Tokens(Arc<Mutex<HashSet<String>>>);

impl Tokens {
    pub fn valid(&self, token: &str) -> bool {
        self.0.locked().contains(token)
    }

    fn issue(&self, token: String) {
        self.0.locked().insert(token);
    }

    /// Forgets every access token (as a revocation or a server restart would).
    pub fn revoke_all(&self) {
        self.0.locked().clear();
    }
}

/// What `iss` the redirect carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Iss {
    Correct,
    Wrong,
    Missing,
}

#[derive(Debug, Clone)]
pub struct OAuthOptions {
    /// `code_challenge_methods_supported` (None: the field is absent).
    pub pkce_methods: Option<Vec<String>>,
    /// `authorization_response_iss_parameter_supported`.
    pub iss_supported: bool,
    pub iss: Iss,
    /// `expires_in` of every access token.
    pub token_lifetime_secs: u64,
    /// A `registration_endpoint` (dynamic registration).
    pub registration: bool,
    /// `client_id_metadata_document_supported`.
    pub metadata_documents: bool,
    /// A pre-registered client: its id and secret.
    pub client: Option<(String, String)>,
    /// Publish the metadata only as OpenID Connect discovery (`/.well-known/openid-configuration`).
    pub openid_only: bool,
}

impl Default for OAuthOptions {
    fn default() -> Self {
        Self {
            pkce_methods: Some(vec!["S256".into()]),
            iss_supported: true,
            iss: Iss::Correct,
            token_lifetime_secs: 3600,
            registration: true,
            metadata_documents: false,
            client: None,
            openid_only: false,
        }
    }
}

/// One call to the authorization server.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthCall {
    /// `register`, `authorize`, `token`.
    pub endpoint: String,
    /// Query (authorize) or form (token) parameters, or the registration body's fields.
    pub params: HashMap<String, String>,
    /// The token request's `Authorization` header, if any (client_secret_basic).
    pub authorization: Option<String>,
    /// The status it was answered with.
    pub status: u16,
}

impl OAuthCall {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }
}

struct Grant {
    challenge: String,
    client_id: String,
    redirect_uri: String,
}

struct AsState {
    issuer: String,
    options: Mutex<OAuthOptions>,
    calls: Mutex<Vec<OAuthCall>>,
    clients: Mutex<HashSet<String>>,
    codes: Mutex<HashMap<String, Grant>>,
    refresh_tokens: Mutex<HashSet<String>>,
    refuse_refresh: std::sync::atomic::AtomicBool,
    tokens: Tokens,
    counter: AtomicU64,
}

impl AsState {
    fn next(&self, prefix: &str) -> String {
        format!("{prefix}-{}-{}", self.counter.fetch_add(1, Ordering::SeqCst), std::process::id())
    }

    fn record(
        &self,
        endpoint: &str,
        params: HashMap<String, String>,
        authorization: Option<String>,
        status: u16,
    ) {
        let call = OAuthCall { endpoint: endpoint.into(), params, authorization, status };
        self.calls.locked().push(call);
    }
}

/// A running authorization server; dropping it stops it.
pub struct OAuthTestServer {
    addr: SocketAddr,
    state: Arc<AsState>,
    stop: CancellationToken,
}

impl OAuthTestServer {
    pub async fn start(options: OAuthOptions) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let metadata_path = if options.openid_only {
            "/.well-known/openid-configuration"
        } else {
            "/.well-known/oauth-authorization-server"
        };
        let clients: HashSet<String> = options.client.iter().map(|(id, _)| id.clone()).collect();
        let state = Arc::new(AsState {
            issuer: format!("http://{addr}"),
            options: Mutex::new(options),
            calls: Mutex::new(Vec::new()),
            clients: Mutex::new(clients),
            codes: Mutex::new(HashMap::new()),
            refresh_tokens: Mutex::new(HashSet::new()),
            refuse_refresh: Default::default(),
            tokens: Tokens::default(),
            counter: AtomicU64::new(1),
        });
        let router = Router::new()
            .route(metadata_path, get(metadata))
            .route("/register", post(register))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .with_state(state.clone());
        let stop = CancellationToken::new();
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                // Small writes go out at once (no Nagle wait on the delayed ACK).
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, router).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        });
        Ok(Self { addr, state, stop })
    }

    /// `http://127.0.0.1:PORT` (also its `issuer`).
    pub fn issuer(&self) -> String {
        self.state.issuer.clone()
    }

    pub fn tokens(&self) -> Tokens {
        self.state.tokens.clone()
    }

    pub fn calls(&self) -> Vec<OAuthCall> {
        self.state.calls.locked().clone()
    }

    pub fn calls_to(&self, endpoint: &str) -> Vec<OAuthCall> {
        self.calls().into_iter().filter(|c| c.endpoint == endpoint).collect()
    }

    /// Refresh grants are refused (`invalid_grant`) from now on.
    pub fn refuse_refresh(&self) {
        self.state.refuse_refresh.store(true, Ordering::SeqCst);
    }

    pub fn set_token_lifetime(&self, secs: u64) {
        self.state.options.locked().token_lifetime_secs = secs;
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for OAuthTestServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn metadata(State(state): State<Arc<AsState>>) -> Response {
    let options = state.options.locked().clone();
    let issuer = &state.issuer;
    let mut metadata = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_basic"],
        "scopes_supported": ["mcp", "offline_access"],
        "authorization_response_iss_parameter_supported": options.iss_supported,
        "client_id_metadata_document_supported": options.metadata_documents,
    });
    if let Some(methods) = &options.pkce_methods {
        metadata["code_challenge_methods_supported"] = json!(methods);
    }
    if options.registration {
        metadata["registration_endpoint"] = json!(format!("{issuer}/register"));
    }
    axum::Json(metadata).into_response()
}

async fn register(State(state): State<Arc<AsState>>, axum::Json(body): axum::Json<Value>) -> Response {
    let client_id = state.next("dyn");
    state.clients.locked().insert(client_id.clone());
    let params: HashMap<String, String> =
        body.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), v.to_string())).collect();
    state.record("register", params, None, 201);
    let mut answer = body.clone();
    answer["client_id"] = json!(client_id);
    answer["token_endpoint_auth_method"] = json!("none");
    (StatusCode::CREATED, axum::Json(answer)).into_response()
}

async fn authorize(
    State(state): State<Arc<AsState>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let options = state.options.locked().clone();
    let get = |k: &str| params.get(k).cloned().unwrap_or_default();
    let client_id = get("client_id");
    let known = state.clients.locked().contains(&client_id)
        || (options.metadata_documents && client_id.starts_with("https://"));
    if !known || get("code_challenge_method") != "S256" || get("code_challenge").is_empty() {
        state.record("authorize", params.clone(), None, 400);
        return (StatusCode::BAD_REQUEST, "unknown client or no S256 challenge").into_response();
    }
    let code = state.next("code");
    let redirect_uri = get("redirect_uri");
    state.codes.locked().insert(
        code.clone(),
        Grant { challenge: get("code_challenge"), client_id, redirect_uri: redirect_uri.clone() },
    );
    let mut location = reqwest_free_url(&redirect_uri, &[("code", &code), ("state", &get("state"))]);
    match options.iss {
        Iss::Correct => location.push_str(&format!("&iss={}", encode(&state.issuer))),
        Iss::Wrong => location.push_str(&format!("&iss={}", encode("http://impostor.invalid"))),
        Iss::Missing => {}
    }
    state.record("authorize", params, None, 302);
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

async fn token(
    State(state): State<Arc<AsState>>,
    headers: HeaderMap,
    Form(params): Form<HashMap<String, String>>,
) -> Response {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let get = |k: &str| params.get(k).cloned().unwrap_or_default();
    let refuse = |description: &str| {
        (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "invalid_grant", "error_description": description})),
        )
            .into_response()
    };
    let answer = match get("grant_type").as_str() {
        "authorization_code" => {
            let grant = state.codes.locked().remove(&get("code"));
            match grant {
                None => refuse("unknown or used code"),
                Some(grant) if pkce_s256(&get("code_verifier")) != grant.challenge => {
                    refuse("PKCE verification failed")
                }
                Some(grant) if grant.redirect_uri != get("redirect_uri") => refuse("redirect_uri mismatch"),
                Some(grant) if !get("client_id").is_empty() && grant.client_id != get("client_id") => {
                    refuse("client mismatch")
                }
                Some(_) => issue(&state),
            }
        }
        "refresh_token" => {
            let known = state.refresh_tokens.locked().remove(&get("refresh_token"));
            if !known || state.refuse_refresh.load(Ordering::SeqCst) {
                refuse("refresh token refused")
            } else {
                issue(&state)
            }
        }
        _ => {
            (StatusCode::BAD_REQUEST, axum::Json(json!({"error": "unsupported_grant_type"}))).into_response()
        }
    };
    state.record("token", params, authorization, answer.status().as_u16());
    answer
}

fn issue(state: &AsState) -> Response {
    let lifetime = state.options.locked().token_lifetime_secs;
    let access = state.next("access");
    let refresh = state.next("refresh");
    state.tokens.issue(access.clone());
    state.refresh_tokens.locked().insert(refresh.clone());
    axum::Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": lifetime,
        "refresh_token": refresh,
        "scope": "mcp offline_access",
    }))
    .into_response()
}

/// BASE64URL(SHA256(verifier)) without padding (RFC 7636).
pub fn pkce_s256(verifier: &str) -> String {
    use sha2::Digest as _;
    base64url(&sha2::Sha256::digest(verifier.as_bytes()))
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        let emit = chunk.len() + 1;
        for i in 0..emit {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn reqwest_free_url(base: &str, params: &[(&str, &str)]) -> String {
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", encode(v))).collect();
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_matches_the_rfc_example() {
        // RFC 7636 appendix B.
        assert_eq!(
            pkce_s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
