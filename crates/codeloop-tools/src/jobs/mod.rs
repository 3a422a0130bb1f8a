//! Background jobs (DESIGN.md §5f): the table of one engine's jobs, per session. A job is a `bash` call
//! with `run_in_background` whose process tree (walled like any call, owned by the walls' helper) runs on
//! after the call returned; its output goes to a bounded buffer and a saved file, its end to the
//! [`JobObserver`] (the engine stores it and announces it) and to the notes of the session's next model
//! request.
//!
//! Owns: which jobs run, their output, their kill. Must not: touch the store or the bus (the observer does),
//! or poll: each job is one task that wakes on output, exit or kill.

mod output;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use codeloop_types::LockExt;
use codeloop_types::{Job as JobInfo, JobId, JobState, SessionId, now_ms};
use tokio_util::sync::CancellationToken;

pub use output::MEMORY_CAP;
pub(crate) use output::{JobOutput, Unread};

/// The default of `[bash] max_jobs`: running jobs per session.
pub const DEFAULT_MAX_JOBS: usize = 8;

/// Ended jobs a session keeps in memory (the store keeps all of them).
const ENDED_KEPT: usize = 32;

/// What the engine does when a job starts or ends: store it, announce it.
pub trait JobObserver: Send + Sync {
    fn started(&self, job: &JobInfo);
    fn ended(&self, job: &JobInfo);
    /// Something the user should know of a running job of `session` (protected paths it created were
    /// moved out of the project).
    fn notice(&self, _session: &SessionId, _message: String) {}
    /// Waits until what was observed so far is recorded (the process is about to exit).
    fn flush(&self) {}
}

/// A job's end, for the note in the session's next model request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobNote {
    pub id: JobId,
    pub state: JobState,
    pub exit_code: Option<i32>,
    /// Output the model has not read yet (bytes).
    pub unread: u64,
}

/// What one sweep of a job's project found and moved: the note for the model, a line per path.
pub(crate) struct Swept {
    pub note: String,
    pub lines: Vec<String>,
}

/// Moves out what the job created where only the `write` tool may; blocking (it walks the project).
pub(crate) type Sweeper = Arc<dyn Fn() -> Option<Swept> + Send + Sync>;

/// How often a running job's project is looked at for protected paths it created (DESIGN.md §5j: within
/// 1 s of appearing).
pub const PROTECTED_SWEEP_EVERY: Duration = Duration::from_millis(900);

/// One job.
pub struct Job {
    info: Mutex<JobInfo>,
    pub(crate) output: Mutex<JobOutput>,
    kill: CancellationToken,
    ended: tokio::sync::watch::Sender<bool>,
    /// Its walls' sweep of protected paths, where the walls have one.
    sweeper: Mutex<Option<Sweeper>>,
}

impl Job {
    pub fn info(&self) -> JobInfo {
        self.info.locked().clone()
    }

    pub fn id(&self) -> JobId {
        self.info.locked().id.clone()
    }

    /// The newest `max` bytes of its output as text, leaving the model's read cursor where it is.
    pub fn tail(&self, max: usize) -> String {
        String::from_utf8_lossy(&self.output.locked().tail(max)).into_owned()
    }

    /// Asks the job's task to end it (TERM, then KILL after 2 s).
    pub fn kill(&self) {
        self.kill.cancel();
    }

    pub(crate) fn kill_requested(&self) -> &CancellationToken {
        &self.kill
    }

    /// Sets the sweep of protected paths this job's walls watch.
    pub(crate) fn watch_protected(&self, sweeper: Sweeper) {
        *self.sweeper.locked() = Some(sweeper);
    }

    pub(crate) fn watches_protected(&self) -> bool {
        self.sweeper.locked().is_some()
    }

    /// Waits until the job has ended, at most `limit`; whether it has.
    pub async fn wait(&self, limit: Duration) -> bool {
        let mut ended = self.ended.subscribe();
        tokio::time::timeout(limit, ended.wait_for(|done| *done)).await.is_ok_and(|r| r.is_ok())
    }
}

/// Every job of one engine, by session.
pub struct Jobs {
    sessions: Mutex<HashMap<SessionId, SessionJobs>>,
    observer: Arc<dyn JobObserver>,
    max_jobs: usize,
}

#[derive(Default)]
struct SessionJobs {
    jobs: Vec<Arc<Job>>,
    /// Jobs that ended since the session's last model request.
    notes: Vec<Arc<Job>>,
}

impl Jobs {
    pub fn new(max_jobs: usize, observer: Arc<dyn JobObserver>) -> Arc<Self> {
        Arc::new(Self { sessions: Mutex::new(HashMap::new()), observer, max_jobs })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, SessionJobs>> {
        self.sessions.locked()
    }

    /// A new running job of `session`, or the refusal naming `max_jobs`.
    pub(crate) fn reserve(&self, session: &SessionId, command: &str) -> Result<Arc<Job>, String> {
        let mut sessions = self.lock();
        let entry = sessions.entry(session.clone()).or_default();
        let running = entry.jobs.iter().filter(|j| j.info().state.is_running()).count();
        if running >= self.max_jobs {
            return Err(format!(
                "Cannot start another background job: this session already runs {running}, the most `[bash] \
                 max_jobs` allows ({}). Stop one with bash_kill (its job_id), or wait until one ends \
                 (bash_output shows its state).",
                self.max_jobs
            ));
        }
        let info = JobInfo {
            id: JobId::new(),
            session_id: session.clone(),
            command: command.to_owned(),
            state: JobState::Running,
            exit_code: None,
            started: now_ms(),
            ended: None,
        };
        let job = Arc::new(Job {
            info: Mutex::new(info),
            output: Mutex::new(JobOutput::new()),
            kill: CancellationToken::new(),
            ended: tokio::sync::watch::channel(false).0,
            sweeper: Mutex::new(None),
        });
        entry.jobs.push(job.clone());
        Ok(job)
    }

    /// The job's process started.
    pub(crate) fn started(&self, job: &Job) {
        self.observer.started(&job.info());
    }

    /// A job that could not start: forgotten without a trace.
    pub(crate) fn abandon(&self, job: &Arc<Job>) {
        let session = job.info().session_id;
        if let Some(entry) = self.lock().get_mut(&session) {
            entry.jobs.retain(|j| !Arc::ptr_eq(j, job));
        }
    }

    /// The job ended: recorded, announced, noted for the next request.
    pub(crate) fn finish(&self, job: &Arc<Job>, state: JobState, exit_code: Option<i32>) {
        let info = {
            let mut info = job.info.locked();
            info.state = state;
            info.exit_code = exit_code;
            info.ended = Some(now_ms());
            info.clone()
        };
        {
            let mut sessions = self.lock();
            let entry = sessions.entry(info.session_id.clone()).or_default();
            entry.notes.push(job.clone());
            let ended = entry.jobs.iter().filter(|j| !j.info().state.is_running()).count();
            if ended > ENDED_KEPT
                && let Some(oldest) = entry.jobs.iter().position(|j| !j.info().state.is_running())
            {
                entry.jobs.remove(oldest);
            }
        }
        self.observer.ended(&info);
        job.ended.send_replace(true);
    }

    /// A job of `session` by id.
    pub fn get(&self, session: &SessionId, id: &JobId) -> Option<Arc<Job>> {
        self.lock().get(session)?.jobs.iter().find(|j| &j.id() == id).cloned()
    }

    /// The session's jobs this process knows, oldest first.
    pub fn list(&self, session: &SessionId) -> Vec<JobInfo> {
        self.lock().get(session).map(|e| e.jobs.iter().map(|j| j.info()).collect()).unwrap_or_default()
    }

    /// The session's running jobs.
    pub fn running(&self, session: &SessionId) -> Vec<JobId> {
        self.lock()
            .get(session)
            .map(|e| e.jobs.iter().map(|j| j.info()).filter(|i| i.state.is_running()).map(|i| i.id).collect())
            .unwrap_or_default()
    }

    /// Ends every job of `session` (its deletion) and waits for them, at most `limit`.
    pub async fn end_session(&self, session: &SessionId, limit: Duration) {
        let jobs: Vec<Arc<Job>> = self.lock().remove(session).map(|e| e.jobs).unwrap_or_default();
        for job in &jobs {
            job.kill();
        }
        futures_wait(&jobs, limit).await;
    }

    /// Ends every job (the owning process quits) and waits for them, at most `limit`.
    pub async fn end_all(&self, limit: Duration) {
        let jobs: Vec<Arc<Job>> = self.lock().values().flat_map(|e| e.jobs.iter().cloned()).collect();
        for job in &jobs {
            job.kill();
        }
        futures_wait(&jobs, limit).await;
        // The process exits next: their ends must be on record, not "lost" to the next process.
        let observer = self.observer.clone();
        let _ = tokio::task::spawn_blocking(move || observer.flush()).await;
    }

    /// Moves out of the project the protected paths `job` created (DESIGN.md §5j): the model reads why in
    /// the job's output, the user gets a notice. Blocking: it walks the project.
    pub(crate) fn sweep_job(&self, job: &Job) {
        let sweeper = job.sweeper.locked().clone();
        let Some(swept) = sweeper.and_then(|sweep| sweep()) else { return };
        job.output.locked().push(format!("\n{}\n", swept.note).as_bytes());
        let info = job.info();
        let message = format!(
            "background job {} created protected paths, moved out of the project:\n{}",
            info.id,
            swept.lines.join("\n")
        );
        self.observer.notice(&info.session_id, message);
    }

    /// Sweeps every running job of `session` now (a step boundary, the end of a run). Blocking.
    pub fn sweep_session(&self, session: &SessionId) {
        let running: Vec<Arc<Job>> = self
            .lock()
            .get(session)
            .map(|e| {
                e.jobs
                    .iter()
                    .filter(|j| j.info().state.is_running() && j.watches_protected())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for job in running {
            self.sweep_job(&job);
        }
    }

    /// Whether `session` has a running job whose walls watch protected paths (else a sweep has nothing
    /// to do).
    pub fn watches_protected(&self, session: &SessionId) -> bool {
        self.lock()
            .get(session)
            .is_some_and(|e| e.jobs.iter().any(|j| j.info().state.is_running() && j.watches_protected()))
    }

    /// The jobs of `session` that ended since the last call, with how much of their output is unread.
    pub fn take_notes(&self, session: &SessionId) -> Vec<JobNote> {
        let ended = self.lock().get_mut(session).map(|e| std::mem::take(&mut e.notes)).unwrap_or_default();
        ended
            .iter()
            .map(|job| {
                let info = job.info();
                let unread = job.output.locked().unread();
                JobNote { id: info.id, state: info.state, exit_code: info.exit_code, unread }
            })
            .collect()
    }
}

async fn futures_wait(jobs: &[Arc<Job>], limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    for job in jobs {
        job.wait(deadline.saturating_duration_since(tokio::time::Instant::now())).await;
    }
}
