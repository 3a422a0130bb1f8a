//! Store URLs in messages and logs: the password never shows.
//!
//! Owns: the redaction rule. Must not: parse URLs for connecting (the stores do).

/// The URL with its password replaced by `***` (the `password=` option too), for messages and logs.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let Some(at) = authority.rfind('@') {
            let userinfo = &authority[..at];
            if let Some(colon) = userinfo.find(':') {
                out = format!("{scheme}://{}:***{}", &userinfo[..colon], &rest[at..]);
            }
        }
    }
    // `?password=…` or `&password=…` in the query string.
    let lower = out.to_ascii_lowercase();
    if let Some(start) = lower.find("password=") {
        let value_start = start + "password=".len();
        let value_end = out[value_start..].find('&').map_or(out.len(), |end| value_start + end);
        out.replace_range(value_start..value_end, "***");
    }
    out
}
