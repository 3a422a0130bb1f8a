//! `bash_output` and `bash_kill`: reading and ending the session's background jobs (DESIGN.md §5f).
//! `bash_output` returns `{state: running|exited|killed|lost, exit_code?, output}` with the output since
//! the last read (only lines matching `filter`, when given), cut to the output limits with the path of the
//! saved full output.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use codeloop_types::{JobId, JobState};

use crate::jobs::{Job, Jobs, Unread};
use crate::schema::{decode, schema_for};
use crate::truncate::{Keep, cut};
use crate::{Tool, ToolContext, ToolFailure, ToolOutput};
use codeloop_types::LockExt;

/// How long `bash_kill` waits for the job's end (TERM, 2 s, KILL, and the reaping).
const KILL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

const OUTPUT_DESCRIPTION: &str = "Read a background job's output since your last read, and its state \
(running, exited with its code, killed, lost). `filter`: a regular expression; only matching lines are returned.";

const KILL_DESCRIPTION: &str =
    "Stop a background job (SIGTERM to its whole process tree, SIGKILL after 2 s) and wait for its end.";

#[derive(Deserialize, JsonSchema)]
struct OutputParams {
    /// The job id `bash` returned (`job_…`).
    job_id: String,
    /// Only lines matching this regular expression.
    filter: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct KillParams {
    /// The job id `bash` returned (`job_…`).
    job_id: String,
}

/// Reads a background job.
pub struct BashOutputTool {
    parameters: Value,
}

impl BashOutputTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<OutputParams>() }
    }
}

impl Default for BashOutputTool {
    fn default() -> Self {
        Self::new()
    }
}

/// Stops a background job.
pub struct BashKillTool {
    parameters: Value,
}

impl BashKillTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<KillParams>() }
    }
}

impl Default for BashKillTool {
    fn default() -> Self {
        Self::new()
    }
}

/// The session's job `id`, or a failure that lists the session's jobs.
fn find(ctx: &ToolContext, id: &str) -> Result<(std::sync::Arc<Jobs>, std::sync::Arc<Job>), ToolFailure> {
    let jobs = ctx
        .host
        .jobs()
        .ok_or_else(|| ToolFailure::Failed("Background jobs are not available here.".into()))?;
    if let Some(job) = jobs.get(&ctx.call.session_id, &JobId::from(id)) {
        return Ok((jobs, job));
    }
    let known: Vec<String> =
        jobs.list(&ctx.call.session_id).iter().map(|j| format!("{} ({})", j.id, j.state)).collect();
    let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
    Err(ToolFailure::Failed(format!(
        "No background job {id} in this session (its jobs: {known}). Start one with bash and run_in_background."
    )))
}

#[async_trait]
impl Tool for BashOutputTool {
    fn name(&self) -> &str {
        "bash_output"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::ReadOnly
    }

    fn description(&self) -> &str {
        OUTPUT_DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn permission(&self) -> &str {
        "bash"
    }

    fn needs(&self) -> crate::Needs {
        crate::Needs::Jobs
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: OutputParams = decode(self.name(), args)?;
        let filter = match params.filter.as_deref().filter(|f| !f.is_empty()) {
            Some(filter) => Some(regex::Regex::new(filter).map_err(|e| {
                ToolFailure::Failed(format!("The filter is not a valid regular expression: {e}"))
            })?),
            None => None,
        };
        let (_, job) = find(ctx, &params.job_id)?;
        // The state first: output read after it is complete for an ended job.
        let info = job.info();
        let unread = job.output.locked().take_unread();
        let (saved, cut_at) = {
            let output = job.output.locked();
            (output.saved.clone(), output.cut)
        };
        let text = render_output(unread, filter.as_ref(), ctx, saved.as_deref(), cut_at);
        let mut answer = json!({"state": info.state.as_str(), "output": text});
        if let Some(code) = info.exit_code {
            answer["exit_code"] = json!(code);
        }
        let output = serde_json::to_string_pretty(&answer).unwrap_or_default();
        let metadata = json!({
            "job_id": info.id.as_str(),
            "state": info.state.as_str(),
            "exit_code": info.exit_code,
            "truncated": true,
        });
        Ok(ToolOutput { title: format!("output of {}", info.id), output, metadata, attachments: Vec::new() })
    }
}

/// The unread output as the model gets it: filtered, cut to the limits (the newest part kept), with where
/// the whole output is when some of it is not here.
fn render_output(
    unread: Unread,
    filter: Option<&regex::Regex>,
    ctx: &ToolContext,
    saved: Option<&std::path::Path>,
    cut_at_cap: bool,
) -> String {
    let text = String::from_utf8_lossy(&unread.bytes);
    let text = match filter {
        Some(filter) => {
            let mut kept = String::new();
            for line in text.lines().filter(|l| filter.is_match(l)) {
                kept.push_str(line);
                kept.push('\n');
            }
            kept
        }
        None => text.into_owned(),
    };
    let (shown, _) = cut(&text, ctx.limits, Keep::Tail);
    let was_cut = shown.len() < text.len();
    let mut notes = Vec::new();
    if unread.dropped > 0 {
        notes.push(format!("{} earlier bytes of new output are no longer in memory", unread.dropped));
    }
    if was_cut {
        notes.push("only the newest part is shown".to_owned());
    }
    if !notes.is_empty()
        && let Some(saved) = saved
    {
        let cap = if cut_at_cap { " (cut at [tool_output] max_saved_bytes)" } else { "" };
        notes.push(format!(
            "the whole output is saved in {}{cap}; read it with the read tool",
            saved.display()
        ));
    }
    if notes.is_empty() { shown } else { format!("[{}]\n{shown}", notes.join("; ")) }
}

#[async_trait]
impl Tool for BashKillTool {
    fn name(&self) -> &str {
        "bash_kill"
    }

    fn description(&self) -> &str {
        KILL_DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn permission(&self) -> &str {
        "bash"
    }

    fn needs(&self) -> crate::Needs {
        crate::Needs::Jobs
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: KillParams = decode(self.name(), args)?;
        let (_, job) = find(ctx, &params.job_id)?;
        let before = job.info();
        let output = if before.state == JobState::Running {
            job.kill();
            if job.wait(KILL_WAIT).await {
                format!("Background job {} was stopped.", before.id)
            } else {
                format!("Background job {} was told to stop; it has not ended yet.", before.id)
            }
        } else {
            format!("Background job {} had already ended ({}).", before.id, before.state)
        };
        let info = job.info();
        let metadata =
            json!({"job_id": info.id.as_str(), "state": info.state.as_str(), "exit_code": info.exit_code});
        Ok(ToolOutput { title: format!("kill {}", info.id), output, metadata, attachments: Vec::new() })
    }
}
