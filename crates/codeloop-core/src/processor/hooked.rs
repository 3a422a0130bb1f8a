//! A tool call inside its hooks (DESIGN.md §5d): PreToolUse before the permission check and the tool
//! (a deny is the call's error result, an ask or allow merges with the rules, `updatedInput` replaces
//! the arguments and is checked again by the tool), then exactly one of PostToolUse /
//! PostToolUseFailure before the result reaches the model.

use std::sync::Arc;
use std::time::Duration;

use codeloop_tools::{ToolContext, ToolFailure, ToolOutput, ToolRegistry};
use serde_json::{Value, json};

use crate::hooks::{Decision, HookEvent, tool_names};
use crate::tool_host::ToolGate;

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
    if !tool_events.iter().any(|e| hooks.hooks.any(*e)) {
        return execute_plain(&tools, &name, input, &ctx, limit).await;
    }
    let declared = tools.get(&name).and_then(|t| t.hook_name().map(str::to_owned));
    let names = tool_names(&name, declared.as_deref());
    let subjects: Vec<&str> = names.iter().map(String::as_str).collect();
    let pre = hooks.hooks.matches(HookEvent::PreToolUse, &subjects);
    let post = hooks.hooks.matches(HookEvent::PostToolUse, &subjects)
        || hooks.hooks.matches(HookEvent::PostToolUseFailure, &subjects);
    if !pre && !post {
        return execute_plain(&tools, &name, input, &ctx, limit).await;
    }
    let call_id = ctx.call.call_id.clone();
    if pre {
        let event = json!({
            "tool_name": names[0],
            "tool_input": hook_input(&name, &input, &ctx),
            "tool_use_id": call_id,
        });
        let outcome = hooks.fire(HookEvent::PreToolUse, &subjects, event).await;
        if let Some(reason) = outcome.denial() {
            let reason = if reason.is_empty() { "no reason given".to_owned() } else { reason };
            return Err(ToolFailure::Failed(format!("Blocked by a PreToolUse hook: {reason}")));
        }
        if let Some(updated) = outcome.updated_input.clone() {
            input = updated;
        }
        let verdict = outcome.decision.filter(|d| *d != Decision::Deny);
        if let Some(verdict) = verdict {
            gate.set_verdict(&call_id, Some(verdict));
        }
        let note = outcome.context_text();
        let result = execute_plain(&tools, &name, input.clone(), &ctx, limit).await;
        gate.set_verdict(&call_id, None);
        let result = with_note(result, note);
        if !post {
            return result;
        }
        return after(&hooks, &name, &names, &subjects, &input, &ctx, result).await;
    }
    let result = execute_plain(&tools, &name, input.clone(), &ctx, limit).await;
    after(&hooks, &name, &names, &subjects, &input, &ctx, result).await
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
    name: &str,
    names: &[String],
    subjects: &[&str],
    input: &Value,
    ctx: &ToolContext,
    result: Result<ToolOutput, ToolFailure>,
) -> Result<ToolOutput, ToolFailure> {
    let failed = match &result {
        Err(_) => true,
        Ok(output) => name == "bash" && output.metadata.get("exit").is_some_and(|e| e.as_i64() != Some(0)),
    };
    let mut event = json!({
        "tool_name": names[0],
        "tool_input": hook_input(name, input, ctx),
        "tool_use_id": ctx.call.call_id,
    });
    let kind = if failed { HookEvent::PostToolUseFailure } else { HookEvent::PostToolUse };
    match &result {
        Ok(output) => {
            let response =
                json!({"output": output.output, "title": output.title, "metadata": output.metadata});
            event["tool_response"] = response;
            if failed {
                event["error"] = json!(output.output);
            }
        }
        Err(failure) => event["error"] = json!(failure.to_string()),
    }
    let outcome = hooks.fire(kind, subjects, event).await;
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

/// The model's arguments as a hook sees them: plus `command` for bash (it has one) and an absolute
/// `file_path` for file tools.
fn hook_input(name: &str, input: &Value, ctx: &ToolContext) -> Value {
    let mut input = input.clone();
    let path = input.get("filePath").or_else(|| input.get("file_path")).and_then(Value::as_str);
    if let Some(path) = path.filter(|_| matches!(name, "read" | "write" | "edit")) {
        let path = std::path::Path::new(path);
        let absolute = if path.is_absolute() { path.to_owned() } else { ctx.project.directory.join(path) };
        input["file_path"] = json!(absolute.display().to_string());
    }
    input
}
