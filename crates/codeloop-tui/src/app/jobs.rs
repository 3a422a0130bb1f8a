//! `/jobs` (DESIGN.md §5f): the open session's background jobs — listed, one's newest output shown, one
//! ended — and the count of running ones that the status line shows, kept current by `job.*` events.

use codeloop_types::{Job, JobId, JobState, SessionId};

use super::{Action, App, Outcome};
use crate::client::Client;
use crate::convo::Notice;

/// How much of a job's newest output `/jobs read` shows.
pub const JOB_OUTPUT_BYTES: usize = 4096;

/// What `/jobs` asks of the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobsAction {
    /// Only learn the count (on opening a session).
    Count,
    List,
    Read(JobId),
    Kill(JobId),
}

impl App {
    /// `/jobs`, `/jobs read ID`, `/jobs kill ID` (an id alone reads).
    pub(super) fn jobs_command(&mut self, session: SessionId, arg: &str) -> Vec<Action> {
        let words: Vec<&str> = arg.split_whitespace().collect();
        let action = match words.as_slice() {
            [] | ["list"] => JobsAction::List,
            ["read" | "output", id] | [id] if id.starts_with(JobId::PREFIX) => {
                JobsAction::Read(JobId::from(*id))
            }
            ["kill" | "stop", id] => JobsAction::Kill(JobId::from(*id)),
            _ => {
                self.convo.notice(Notice::error(
                    "usage: /jobs (list) · /jobs read job_… (newest output) · /jobs kill job_… (end it)",
                ));
                return Vec::new();
            }
        };
        if let JobsAction::Kill(id) = &action {
            self.convo.notice(Notice::info(format!("ending {id} (TERM, then KILL after 2 s)…")));
        }
        vec![Action::Jobs(session, action)]
    }

    /// Running jobs of the open session.
    pub fn running_jobs(&self) -> usize {
        self.jobs.values().filter(|s| s.is_running()).count()
    }

    pub(super) fn jobs_loaded(&mut self, session: &SessionId, jobs: Vec<Job>, show: bool) -> Vec<Action> {
        if self.session_id() != Some(session) {
            return Vec::new();
        }
        self.jobs = jobs.iter().map(|j| (j.id.clone(), j.state)).collect();
        if !show {
            return Vec::new();
        }
        if jobs.is_empty() {
            self.convo.notice(Notice::info("no background jobs in this session"));
            return Vec::new();
        }
        let lines: Vec<String> = jobs
            .iter()
            .map(|j| {
                let code = j.exit_code.map(|c| format!(" (exit {c})")).unwrap_or_default();
                format!("{}  {}{code}  {}", j.id, j.state, crate::wrap::truncate(&j.command, 80))
            })
            .collect();
        self.convo.notice(Notice::info(format!(
            "background jobs:\n{}\n/jobs read ID shows one's newest output · /jobs kill ID ends it",
            lines.join("\n")
        )));
        Vec::new()
    }

    pub(super) fn job_output(&mut self, job: &JobId, output: &str) -> Vec<Action> {
        let text = if output.trim().is_empty() { "(no output yet)" } else { output.trim_end() };
        self.convo.notice(Notice::info(format!("{job} (newest output):\n{text}")));
        Vec::new()
    }

    pub(super) fn job_started(&mut self, job: JobId, command: &str) {
        self.convo
            .notice(Notice::info(format!("⚙ job {job} started: {}", crate::wrap::truncate(command, 120))));
        self.jobs.insert(job, JobState::Running);
    }

    pub(super) fn job_exited(&mut self, job: JobId, state: JobState, exit_code: Option<i32>) {
        let code = exit_code.map(|c| format!(" (exit {c})")).unwrap_or_default();
        self.convo.notice(Notice::info(format!("⚙ job {job} {state}{code}")));
        self.jobs.insert(job, state);
    }
}

/// Carries out a `/jobs` action.
pub async fn perform_jobs(client: &dyn Client, session: SessionId, action: JobsAction) -> Option<Outcome> {
    let error = |e: anyhow::Error| Some(Outcome::Notice(Notice::error(format!("{e:#}"))));
    match action {
        JobsAction::Count | JobsAction::List => match client.jobs(&session).await {
            Ok(jobs) => Some(Outcome::Jobs(session, jobs, action == JobsAction::List)),
            // Counting is a courtesy: a server without jobs says nothing.
            Err(_) if action == JobsAction::Count => None,
            Err(e) => error(e),
        },
        JobsAction::Read(job) => match client.job_output(&session, &job).await {
            Ok(output) => Some(Outcome::JobOutput(job, output)),
            Err(e) => error(e),
        },
        JobsAction::Kill(job) => match client.kill_job(&session, &job).await {
            Ok(job) => {
                let code = job.exit_code.map(|c| format!(" (exit {c})")).unwrap_or_default();
                Some(Outcome::Notice(Notice::info(format!("{} {}{code}", job.id, job.state))))
            }
            Err(e) => error(e),
        },
    }
}
