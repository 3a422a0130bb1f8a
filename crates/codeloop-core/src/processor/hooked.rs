//! A tool call inside its hooks (DESIGN.md §5d): PreToolUse before the permission check and the tool
//! (a deny is the call's error result, an ask or allow merges with the rules, `updatedInput` replaces
//! the arguments and is checked again by the tool), then exactly one of PostToolUse /
//! PostToolUseFailure before the result reaches the model.

use std::sync::Arc;
use std::time::Duration;

use codeloop_tools::{ToolContext, ToolFailure, ToolOutput, ToolRegistry};
use serde_json::{Value, json};

use crate::hooks::{Decision, HookEvent, claude, tool_names};
use crate::tool_host::{HookedCall, ToolGate};

/// Runs `name` with `input` under the turn's hooks, stopped at `limit` (also a command template's
/// `` !`cmd` ``, a Bash call to a user's guard hook).
pub(crate) async fn execute(
    gate: Arc<ToolGate>,
    tools: Arc<ToolRegistry>,
    name: String,
    mut input: Value,
    ctx: ToolContext,
    limit: Duration,
) -> Result<ToolOutput, ToolFailure> {
    let hooks = gate.hooks().clone();
    let tool_events = [HookEvent::PreToolUse, HookEvent::PostToolUse, HookEvent::PostToolUseFailure];
    let asks = hooks.hooks.any(HookEvent::PermissionRequest);
    if !asks && !tool_events.iter().any(|e| hooks.hooks.any(*e)) {
        return execute_plain(&tools, &name, input, &ctx, limit).await;
    }
    let declared = tools.get(&name).and_then(|t| t.hook_name().map(str::to_owned));
    let names = tool_names(&name, declared.as_deref());
    let subjects: Vec<&str> = names.iter().map(String::as_str).collect();
    let pre = hooks.hooks.matches(HookEvent::PreToolUse, &subjects);
    let post = hooks.hooks.matches(HookEvent::PostToolUse, &subjects)
        || hooks.hooks.matches(HookEvent::PostToolUseFailure, &subjects);
    if !pre && !post && !asks {
        return execute_plain(&tools, &name, input, &ctx, limit).await;
    }
    let call_id = ctx.call.call_id.clone();
    let cwd = ctx.project.directory.clone();
    let mut verdict = None;
    let mut note = None;
    if pre {
        let event = json!({
            "tool_name": names[0],
            "tool_input": claude::tool_input(&name, &input, &cwd),
            "tool_use_id": call_id,
            "operation_id": call_id,
        });
        let outcome = hooks.fire(HookEvent::PreToolUse, &subjects, event).await;
        if let Some(reason) = outcome.denial() {
            let reason = if reason.is_empty() { "no reason given".to_owned() } else { reason };
            return Err(ToolFailure::Failed(format!("Blocked by a PreToolUse hook: {reason}")));
        }
        if let Some(updated) = outcome.updated_input.clone() {
            // A hook written for Claude Code answers in Claude's keys.
            input = claude::codeloop_input(&name, updated);
        }
        verdict = outcome.decision.filter(|d| *d != Decision::Deny);
        note = outcome.context_text();
    }
    let call = HookedCall { names: names.clone(), input: claude::tool_input(&name, &input, &cwd), verdict };
    gate.set_call(&call_id, Some(call));
    // What a Write or Edit replaces, for the response a PostToolUse hook reads.
    let original = if post { claude::read_original(&name, &input, &cwd) } else { None };
    let started = std::time::Instant::now();
    let result = execute_plain(&tools, &name, input.clone(), &ctx, limit).await;
    let took = started.elapsed();
    gate.set_call(&call_id, None);
    let result = with_note(result, note);
    if !post {
        return result;
    }
    let call = Finished { name: &name, names: &names, subjects: &subjects, input: &input, original, took };
    after(&hooks, &call, &ctx, result).await
}

/// A call that ran, as its PostToolUse hooks see it.
struct Finished<'a> {
    name: &'a str,
    names: &'a [String],
    subjects: &'a [&'a str],
    input: &'a Value,
    original: claude::Original,
    took: Duration,
}

async fn execute_plain(
    tools: &ToolRegistry,
    name: &str,
    input: Value,
    ctx: &ToolContext,
    limit: Duration,
) -> Result<ToolOutput, ToolFailure> {
    match tokio::time::timeout(limit, tools.execute(name, input, ctx)).await {
        Ok(result) => result,
        Err(_) => {
            ctx.cancel.cancel();
            Err(ToolFailure::Failed(format!(
                "The {name} tool did not finish within {} s and was stopped.",
                limit.as_secs()
            )))
        }
    }
}

/// PostToolUse or PostToolUseFailure (an error, or bash exiting non-zero): what they say goes to the
/// model with the result.
async fn after(
    hooks: &crate::hooks::TurnHooks,
    call: &Finished<'_>,
    ctx: &ToolContext,
    result: Result<ToolOutput, ToolFailure>,
) -> Result<ToolOutput, ToolFailure> {
    let cwd = &ctx.project.directory;
    let failed = match &result {
        Err(_) => true,
        Ok(output) => {
            call.name == "bash" && output.metadata.get("exit").is_some_and(|e| e.as_i64() != Some(0))
        }
    };
    let mut event = json!({
        "tool_name": call.names[0],
        "tool_input": claude::tool_input(call.name, call.input, cwd),
        "tool_use_id": ctx.call.call_id,
        "operation_id": ctx.call.call_id,
        "duration_ms": u64::try_from(call.took.as_millis()).unwrap_or(u64::MAX),
    });
    let kind = if failed { HookEvent::PostToolUseFailure } else { HookEvent::PostToolUse };
    match &result {
        Ok(output) if failed => {
            event["error"] = json!(claude::failure_error(call.name, output));
            let interrupted = output.metadata.get("exit").is_some_and(Value::is_null);
            event["is_interrupt"] = json!(interrupted);
            if interrupted {
                // codeloop's addition: a command cut short may have acted (DESIGN.md §5m).
                event["outcome"] = json!(codeloop_types::OUTCOME_UNKNOWN);
            }
        }
        Ok(output) => {
            event["tool_response"] = claude::tool_response(call.name, call.input, output, &call.original, cwd)
        }
        Err(failure) => {
            event["error"] = json!(failure.to_string());
            event["is_interrupt"] = json!(false);
        }
    }
    let outcome = hooks.fire(kind, call.subjects, event).await;
    let mut notes: Vec<String> = Vec::new();
    if let Some(reason) = outcome.block.clone().filter(|r| !r.is_empty()) {
        notes.push(format!("{} hook: {reason}", kind.name()));
    }
    notes.extend(outcome.context);
    with_note(result, (!notes.is_empty()).then(|| notes.join("\n\n")))
}

/// `note` added to what the model gets of the call.
fn with_note(
    result: Result<ToolOutput, ToolFailure>,
    note: Option<String>,
) -> Result<ToolOutput, ToolFailure> {
    let Some(note) = note else { return result };
    match result {
        Ok(mut output) => {
            output.output.push_str(&format!("\n\n<hook>\n{note}\n</hook>"));
            Ok(output)
        }
        Err(ToolFailure::Failed(message)) => {
            Err(ToolFailure::Failed(format!("{message}\n\n<hook>\n{note}\n</hook>")))
        }
        Err(other) => Err(other),
    }
}
