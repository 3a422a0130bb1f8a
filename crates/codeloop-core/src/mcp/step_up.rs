//! Step-up sign-in (DESIGN.md §5o): a call a server refuses with 403 `insufficient_scope` is signed in
//! again with the wider scope and retried once, on the same connection.
//!
//! The person is asked through the call's own session, as a URL elicitation ("sign in at this link");
//! the sign-in's redirect comes back to a loopback listener as with `codeloop mcp login`. Where no one
//! can answer (a headless run), the call fails with the command that widens the sign-in.
//!
//! Owns: the scope to ask for (what was granted and what the challenge names), waiting for either the
//! redirect or the person's answer, and handing the new token to the live connection. Must not: open a
//! browser, or retry more than once (a server that keeps refusing is reported, not looped on).

use std::time::Duration;

use codeloop_tools::{ToolContext, ToolFailure};
use codeloop_types::{ElicitationAction, ElicitationAsk, ElicitationMode};

use super::auth::{FileCredentials, resource_of};
use super::connect::StartContext;
use super::login::{LoginOptions, begin_login_with};
use super::settings::McpSettings;

/// How long a step-up waits for the sign-in to come back once the person said they are on it.
const SIGN_IN_WAIT: Duration = Duration::from_secs(300);

/// What a signed-in connection needs to widen its sign-in.
pub(crate) struct StepUp {
    pub settings: McpSettings,
    pub context: StartContext,
    pub credentials: FileCredentials,
}

/// The challenge of a 403 `insufficient_scope` a request met: `(WWW-Authenticate, required scope)`.
pub(crate) fn insufficient_scope(error: &rmcp::ServiceError) -> Option<(String, Option<String>)> {
    use rmcp::transport::streamable_http_client::InsufficientScopeError;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(e) = current.downcast_ref::<InsufficientScopeError>() {
            return Some((e.www_authenticate_header.clone(), e.required_scope.clone()));
        }
        source = current.source();
    }
    None
}

/// `scope="a b"` of a `WWW-Authenticate` challenge.
fn challenge_scope(challenge: &str) -> Option<String> {
    let start = challenge.find("scope=\"")? + "scope=\"".len();
    let end = challenge[start..].find('"')?;
    Some(challenge[start..start + end].to_owned())
}

impl StepUp {
    /// Signs `server` in again with what it asks for; `Ok` once the connection holds the wider token.
    pub async fn run(
        &self,
        server: &str,
        tool: &str,
        challenge: &str,
        required: Option<String>,
        ctx: &ToolContext,
    ) -> Result<(), ToolFailure> {
        let required = required.or_else(|| challenge_scope(challenge)).unwrap_or_default();
        let granted = self.credentials.record().credentials.map(|c| c.granted_scopes).unwrap_or_default();
        let mut scopes = granted;
        for scope in required.split_whitespace() {
            if !scopes.iter().any(|s| s == scope) {
                scopes.push(scope.to_owned());
            }
        }
        let spelled = scopes.join(" ");
        let by_hand = format!("codeloop mcp login {server} --scope \"{spelled}\"");
        let failed = |why: String| {
            ToolFailure::Failed(format!(
                "The MCP server `{server}` needs more access for `{tool}` (scope {required}): {why}. \
                 Widen the sign-in with `{by_hand}`, then try again."
            ))
        };
        let options = LoginOptions { scopes: Some(scopes.clone()) };
        let pending = begin_login_with(server, &self.settings, &self.context, options)
            .await
            .map_err(|e| failed(format!("a new sign-in could not start ({e})")))?;
        let ask = ElicitationAsk {
            server: server.to_owned(),
            message: format!(
                "MCP server {server} needs more access for `{tool}` (scope {required}). Sign in at the link, then \
                 answer Done."
            ),
            mode: ElicitationMode::Url,
            schema: None,
            url: Some(pending.authorization_url().to_owned()),
        };
        let finish = pending.finish(SIGN_IN_WAIT);
        tokio::pin!(finish);
        let signed = tokio::select! {
            signed = &mut finish => signed,
            reply = ctx.host.elicit(&ctx.call, ask) => match reply.action {
                // "Done" may come before the redirect: wait for it.
                ElicitationAction::Accept => tokio::select! {
                    signed = &mut finish => signed,
                    _ = ctx.cancel.cancelled() => return Err(ToolFailure::Cancelled),
                },
                ElicitationAction::Decline | ElicitationAction::Cancel => {
                    return Err(failed("the sign-in was not given here".into()));
                }
            },
            _ = ctx.cancel.cancelled() => return Err(ToolFailure::Cancelled),
        };
        signed.map_err(|e| failed(e.to_string()))?;
        let resource = resource_of(self.settings.url.as_deref().unwrap_or_default());
        let Some((_, record)) = self.context.auth.find(server, &resource) else {
            return Err(failed("the new sign-in was not saved".into()));
        };
        tracing::info!(server, scope = %spelled, "MCP sign-in widened");
        self.credentials.replace(record);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_comes_from_the_challenge() {
        let challenge = r#"Bearer scope="mcp:basic mcp:write", resource_metadata="http://x/.well-known/oauth-protected-resource/mcp", error="insufficient_scope""#;
        assert_eq!(challenge_scope(challenge).as_deref(), Some("mcp:basic mcp:write"));
        assert_eq!(challenge_scope("Bearer error=\"insufficient_scope\""), None);
    }
}
