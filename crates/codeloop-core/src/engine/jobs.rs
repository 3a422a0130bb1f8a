//! Background jobs as clients see them (DESIGN.md §5f): a session's jobs (this process's, live, merged
//! with the store's, where jobs of dead processes read as lost), a kill through
//! [`crate::SessionCommand::KillJob`], and the end of every job when the owning process quits.

use std::time::Duration;

use codeloop_types::{Job, JobId, SessionId};

use super::Engine;
use crate::error::EngineError;

/// How long a kill waits for the job's end (TERM, 2 s, KILL, the reaping).
pub(crate) const KILL_WAIT: Duration = Duration::from_secs(5);

impl Engine {
    /// The session's background jobs, oldest first: `[{id, command, state, exit_code?, started, ended?}]`.
    pub async fn jobs(&self, session: &SessionId) -> Result<Vec<Job>, EngineError> {
        self.session(session).await?;
        let live = self.services.jobs.list(session);
        let id = session.clone();
        let stored = self
            .services
            .blocking(move |store| {
                let rows = store.list_jobs(Some(&id))?;
                Ok(rows
                    .into_iter()
                    .map(|(job, owner)| crate::jobs::settle(store, job, &owner))
                    .collect::<Vec<_>>())
            })
            .await?;
        let mut jobs: Vec<Job> =
            stored.into_iter().filter(|job| !live.iter().any(|l| l.id == job.id)).collect();
        jobs.extend(live);
        jobs.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(jobs)
    }

    /// The newest `max` bytes of a job's output, for a person (the model's read cursor stays): from memory
    /// while this process holds the job, else from its saved file.
    pub async fn job_output(
        &self,
        session: &SessionId,
        id: &JobId,
        max: usize,
    ) -> Result<String, EngineError> {
        if let Some(job) = self.services.jobs.get(session, id) {
            return Ok(job.tail(max));
        }
        if !self.jobs(session).await?.iter().any(|job| &job.id == id) {
            return Err(EngineError::JobNotFound { session: session.clone(), job: id.clone() });
        }
        let path = self.services.tool_output_dir.join(format!("{id}.log"));
        let read = tokio::task::spawn_blocking(move || tail_of_file(&path, max)).await;
        Ok(read.ok().flatten().unwrap_or_default())
    }

    /// Ends one background job and returns it as it ended.
    pub(super) async fn submit_kill_job(&self, session: &SessionId, id: &JobId) -> Result<Job, EngineError> {
        if let Some(job) = self.services.jobs.get(session, id) {
            if job.info().state.is_running() {
                job.kill();
                job.wait(KILL_WAIT).await;
            }
            return Ok(job.info());
        }
        let stored = self.jobs(session).await?.into_iter().find(|job| &job.id == id);
        match stored {
            Some(job) if job.state.is_running() => {
                let owner = self.job_owner(id).await.unwrap_or_default();
                Err(EngineError::JobElsewhere { job: id.clone(), owner })
            }
            Some(job) => Ok(job),
            None => Err(EngineError::JobNotFound { session: session.clone(), job: id.clone() }),
        }
    }

    async fn job_owner(&self, id: &JobId) -> Option<String> {
        let id = id.clone();
        let running = self.services.blocking(|store| store.list_jobs(None)).await.ok()?;
        let (_, owner) = running.into_iter().find(|(job, _)| job.id == id)?;
        let pid = crate::jobs::Owner(owner.clone()).pid();
        Some(pid.map_or(owner, |pid| format!("pid {pid}")))
    }

    /// Ends every background job of this process and waits for them (at most a few seconds): what a
    /// client does before it quits, so they are recorded as killed rather than lost.
    pub async fn end_jobs(&self) {
        self.services.jobs.end_all(KILL_WAIT).await;
    }

    /// The session's running jobs in this process.
    pub fn running_jobs(&self, session: &SessionId) -> Vec<JobId> {
        self.services.jobs.running(session)
    }
}

/// The last `max` bytes of a file, as text; `None` when it cannot be read.
fn tail_of_file(path: &std::path::Path, max: usize) -> Option<String> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(max as u64))).ok()?;
    let mut bytes = Vec::new();
    file.take(max as u64).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}
