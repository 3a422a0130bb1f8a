//! The web page (DESIGN.md §5i): a browser client served at `/`, its static files under `/assets/`,
//! all embedded in the binary (no build step, nothing from another host). The page is a client of the
//! documented API like any other; the server only hands it out.
//!
//! Owns: the embedded files, their content types and validators, and the headers that wall the page in
//! (a strict Content-Security-Policy: scripts, styles and connections from this origin only, no inline
//! script, no plugins, no framing).
//! Must not: carry data: the page and its files are the same for everyone, so they are open without the
//! token (`security::guard` asks [`is_page_path`]); everything the page shows comes through the API with
//! the token the page holds.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::OnceLock;

use crate::AppState;
use crate::error::ApiError;

/// Where the page's files live (besides `/` itself).
const ASSETS: &str = "/assets/";

/// The policy of every page response. `connect-src 'self'` keeps `fetch` (the API and `/event`) on this
/// origin; `default-src 'self'` without `'unsafe-inline'` means no inline script or style attribute
/// runs; images (the icon) come from here too; `form-action`, `base-uri`, `frame-ancestors` and
/// `object-src` close the usual side doors.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    /// Its name under `/assets/` (`index.html` is served at `/`, naming the others by version).
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset { name: $name, content_type: $type, body: include_str!(concat!("../web/", $name)) }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static FILES: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("js/boot.js", JS),
    asset!("js/main.js", JS),
    asset!("js/state.js", JS),
    asset!("js/session.js", JS),
    asset!("js/events.js", JS),
    asset!("js/actions.js", JS),
    asset!("js/chrome.js", JS),
    asset!("js/api.js", JS),
    asset!("js/feed.js", JS),
    asset!("js/dom.js", JS),
    asset!("js/markdown.js", JS),
    asset!("js/highlight.js", JS),
    asset!("js/convo.js", JS),
    asset!("js/parts.js", JS),
    asset!("js/timeline.js", JS),
    asset!("js/panels.js", JS),
    asset!("js/commands.js", JS),
    asset!("js/todos.js", JS),
    asset!("js/attach.js", JS),
];

fn find(name: &str) -> Option<&'static Asset> {
    FILES.iter().find(|asset| asset.name == name && asset.name != "index.html")
}

/// The build's version of the files: the assets are addressed as `/assets/v<VERSION>/…`, so a browser
/// may keep them for good (a new build has new addresses) and a warm load asks for nothing but `/`.
fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let all: String = FILES.iter().map(|asset| asset.body).collect();
        format!("v{}", &hash(&all)[..12])
    })
}

/// `index.html` naming the versioned assets.
fn index_html() -> &'static str {
    static INDEX: OnceLock<String> = OnceLock::new();
    INDEX.get_or_init(|| {
        let body = FILES.iter().find(|asset| asset.name == "index.html").map_or("", |asset| asset.body);
        body.replace("\"/assets/", &format!("\"{ASSETS}{}/", version()))
    })
}

/// The embedded file `path` names, and whether it named this build's version (then it never changes).
fn asset(path: &str) -> Option<(&'static Asset, Freshness)> {
    let name = path.strip_prefix(ASSETS)?;
    match name.split_once('/') {
        Some((v, rest)) if v == version() => find(rest).map(|asset| (asset, Freshness::Immutable)),
        _ => find(name).map(|asset| (asset, Freshness::Revalidate)),
    }
}

/// How long a browser may keep a file.
#[derive(Clone, Copy)]
enum Freshness {
    /// A versioned address: for good.
    Immutable,
    /// Ask again each time (`/` itself, and files named without a version).
    Revalidate,
}

/// Whether `path` is the page or one of its files: open without the token. Unknown names under
/// `/assets/` are not (they answer 401 to a client without the token, as any unknown path does).
pub fn is_page_path(path: &str) -> bool {
    path == "/" || asset(path).is_some()
}

/// Total size of the embedded files, in bytes (reported by tests and the README).
pub fn page_size() -> usize {
    FILES.iter().map(|asset| asset.body.len()).sum()
}

/// `GET /` and `GET /assets/{*file}`.
pub fn routes() -> Router<AppState> {
    Router::new().route("/", get(index)).route("/assets/{*file}", get(file))
}

async fn index(headers: HeaderMap) -> Response {
    serve(index_html(), "text/html; charset=utf-8", Freshness::Revalidate, &headers)
}

async fn file(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match asset(&format!("{ASSETS}{name}")) {
        Some((asset, freshness)) => serve(asset.body, asset.content_type, freshness, &headers),
        None => ApiError::not_found(format!("no such file of the web page: {ASSETS}{name}")).into_response(),
    }
}

/// The file, or 304 when the browser's copy is current.
fn serve(
    body: &'static str,
    content_type: &'static str,
    freshness: Freshness,
    request: &HeaderMap,
) -> Response {
    let etag = format!("\"{}\"", hash(body));
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    let mut response = if fresh { StatusCode::NOT_MODIFIED.into_response() } else { body.into_response() };
    let headers = response.headers_mut();
    if !fresh {
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, value);
    }
    let cache = match freshness {
        Freshness::Immutable => "public, max-age=31536000, immutable",
        Freshness::Revalidate => "no-cache",
    };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// FNV-1a, as 16 hex digits: stable across runs of one binary, different when a build changes a file.
fn hash(body: &str) -> String {
    let hash = body.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_page_and_its_known_files_are_page_paths() {
        assert!(is_page_path("/"));
        assert!(is_page_path("/assets/js/main.js"));
        assert!(is_page_path("/assets/style.css"));
        assert!(is_page_path(&format!("/assets/{}/js/main.js", version())));
        for path in [
            "/assets/",
            "/assets/nope.js",
            "/assets/index.html",
            "/index.html",
            "/session",
            "//",
            "/assets/v0/x.js",
        ] {
            assert!(!is_page_path(path), "{path}");
        }
    }

    #[test]
    fn the_index_names_this_builds_versioned_files() {
        let index = index_html();
        assert!(index.contains(&format!("src=\"/assets/{}/js/main.js\"", version())), "{index}");
        assert!(!index.contains("\"/assets/js/"), "{index}");
    }

    #[test]
    fn every_file_is_embedded_and_not_empty() {
        for asset in FILES {
            assert!(!asset.body.trim().is_empty(), "{}", asset.name);
        }
        assert!(page_size() > 0);
    }

    #[test]
    fn the_page_loads_no_inline_script_and_nothing_from_another_host() {
        let index = index_html();
        for (at, _) in index.match_indices("<script") {
            let tag = &index[at..at + index[at..].find('>').unwrap()];
            assert!(tag.contains(" src=\"/assets/"), "inline or foreign script: {tag}");
            let after = &index[at + tag.len() + 1..];
            assert!(after.starts_with("</script>"), "a script with a body: {tag}");
        }
        let handler = |text: &str| {
            text.split(|c: char| c.is_whitespace()).any(|word| {
                word.strip_prefix("on").is_some_and(|rest| {
                    rest.split_once('=').is_some_and(|(name, _)| name.chars().all(|c| c.is_ascii_lowercase()))
                })
            })
        };
        assert!(!handler(index), "inline event handler in index.html");
        for asset in FILES {
            // The SVG namespace names a URI; it is never fetched.
            let body = asset.body.replace("http://www.w3.org/2000/svg", "");
            assert!(
                !body.contains("http://") && !body.contains("https://"),
                "{} names another host",
                asset.name
            );
        }
    }

    #[test]
    fn the_index_preloads_every_module_so_none_is_found_late() {
        let index = find_index();
        for asset in FILES.iter().filter(|asset| asset.content_type == JS && asset.name != "js/boot.js") {
            let link = format!("href=\"/assets/{}\"", asset.name);
            let script = format!("src=\"/assets/{}\"", asset.name);
            assert!(index.contains(&link) || index.contains(&script), "{} is not preloaded", asset.name);
        }
    }

    fn find_index() -> &'static str {
        FILES.iter().find(|asset| asset.name == "index.html").unwrap().body
    }

    #[test]
    fn no_script_of_the_page_turns_text_into_markup() {
        for asset in FILES.iter().filter(|asset| asset.content_type == JS) {
            for line in asset.body.lines().filter(|line| !line.trim_start().starts_with("//")) {
                for needle in [
                    "innerHTML",
                    "outerHTML",
                    "insertAdjacentHTML",
                    "document.write",
                    "eval(",
                    "new Function",
                    "srcdoc",
                ] {
                    assert!(!line.contains(needle), "{}: {line}", asset.name);
                }
            }
        }
    }

    #[test]
    fn hashes_differ_with_content() {
        assert_ne!(hash("a"), hash("b"));
        assert_eq!(hash("a"), hash("a"));
    }
}
