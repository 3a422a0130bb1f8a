//! Who may talk to the server (DESIGN.md §5, §5c, issue 7 item 4): loopback-only unless a token is set;
//! with a token, `Authorization: Bearer <token>` on every route (compared in constant time) except the
//! open ones — `/health`, and the web page with its static files (§5i), which carry no data; without a
//! token, a request must name a loopback host (a DNS-rebinding guard, for the open paths too); CORS only
//! for configured origins, and only with a token. `codeloop serve` always sets a token (it makes one when
//! the user gives none, DESIGN.md §5c); the tokenless mode is for embedding the router in tests.
//!
//! Owns: the bind check, the request guard and the CORS layer.
//! Must not: know any route beyond which paths are open ([`is_open_path`]).

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::AppState;
use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error(
        "refusing to listen on {0} without a token: anyone who can reach this address could run commands \
         on this machine. Pass --token <secret> (or set CODELOOP_SERVER_TOKEN), or bind 127.0.0.1"
    )]
    PublicWithoutToken(SocketAddr),
    #[error("invalid CORS origin `{0}`: expected e.g. https://app.example.com")]
    InvalidOrigin(String),
    #[error(
        "refusing --cors without a token: any web page you visit from an allowed origin ({0}) could drive \
         this server and run commands on this machine. Pass --token <secret> (or set CODELOOP_SERVER_TOKEN) \
         together with --cors"
    )]
    CorsWithoutToken(String),
}

/// Binding anything but loopback needs a token.
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), BindError> {
    let has_token = token.is_some_and(|t| !t.is_empty());
    if addr.ip().is_loopback() || has_token { Ok(()) } else { Err(BindError::PublicWithoutToken(addr)) }
}

/// CORS lets browser pages of other origins read the answers; without a token, any such page could use
/// the API (the loopback `Host` guard does not stop a page the user opens), so CORS needs a token.
pub fn check_cors(origins: &[String], token: Option<&str>) -> Result<(), BindError> {
    let has_token = token.is_some_and(|t| !t.is_empty());
    if origins.is_empty() || has_token {
        Ok(())
    } else {
        Err(BindError::CorsWithoutToken(origins.join(", ")))
    }
}

/// Equal in time independent of where the strings differ (the length is not secret).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// `localhost`, `127.x.y.z`, `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Paths served without the token: the liveness check, and the web page and its files (the same for
/// everyone; the page asks for the token before it reads anything). Exact paths: an unknown path is never
/// open.
pub fn is_open_path(path: &str) -> bool {
    path == "/health" || crate::web::is_page_path(path)
}

fn is_read(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// Checks the token on every request but reads of the open paths; without a token, only loopback `Host`s are
/// served.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    match &state.options.token {
        Some(_) if is_read(request.method()) && is_open_path(request.uri().path()) => {}
        Some(token) => {
            let given = bearer(request.headers()).unwrap_or("");
            if !constant_time_eq(given.as_bytes(), token.as_bytes()) {
                let mut response = ApiError::unauthorized().into_response();
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
        }
        None => {
            let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok());
            if host.is_some_and(|h| !is_loopback_host(h)) {
                return ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden_host",
                    "this server has no token and only answers requests for localhost / 127.0.0.1; \
                     start it with --token to serve other host names",
                )
                .into_response();
            }
        }
    }
    next.run(request).await
}

/// A CORS layer for the configured origins (`*` allows any), or `None` when CORS is off.
pub fn cors(origins: &[String]) -> Result<Option<CorsLayer>, BindError> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|o| {
                HeaderValue::from_str(o.trim_end_matches('/'))
                    .map_err(|_| BindError::InvalidOrigin(o.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::HeaderName::from_static("last-event-id"),
            ]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_binds_without_a_token() {
        let public: SocketAddr = "0.0.0.0:4096".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:4096".parse().unwrap();
        let local6: SocketAddr = "[::1]:4096".parse().unwrap();
        assert!(check_bind(local, None).is_ok());
        assert!(check_bind(local6, None).is_ok());
        assert_eq!(check_bind(public, None), Err(BindError::PublicWithoutToken(public)));
        assert_eq!(check_bind(public, Some("")), Err(BindError::PublicWithoutToken(public)));
        assert!(check_bind(public, Some("secret")).is_ok());
    }

    #[test]
    fn cors_needs_a_token() {
        let any = vec!["*".to_owned()];
        let one = vec!["https://app.example".to_owned()];
        assert!(check_cors(&[], None).is_ok());
        assert_eq!(check_cors(&any, None), Err(BindError::CorsWithoutToken("*".into())));
        assert!(matches!(check_cors(&one, Some("")), Err(BindError::CorsWithoutToken(_))));
        assert!(check_cors(&one, Some("secret")).is_ok());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn loopback_hosts() {
        for host in ["localhost", "localhost:4096", "127.0.0.1:80", "[::1]:4096", "127.1.2.3"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["example.com", "evil.localhost.example:80", "10.0.0.1:4096", "[::2]:1"] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
