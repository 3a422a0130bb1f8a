//! Background jobs (DESIGN.md §5f): a `bash` call with `run_in_background` that outlives its call, as
//! stored, listed (`GET /session/:id/job`) and announced (`job.started`, `job.exited`).

use serde::{Deserialize, Serialize};

use crate::{JobId, Millis, SessionId};

/// One background job: `{id, command, state, exit_code?, started, ended?}` (plus its session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    pub session_id: SessionId,
    pub command: String,
    pub state: JobState,
    /// The exit code once it exited by itself (or 128 + a signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub started: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Millis>,
}

/// Where a job is in its life.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Running,
    /// Its command ended by itself (`exit_code` says how).
    Exited,
    /// Ended by `bash_kill`, a client's kill, or its session's deletion.
    Killed,
    /// The codeloop process that ran it died; its processes ended with it.
    Lost,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The state stored as text; `None` for a word this build does not know.
    pub fn parse(text: &str) -> Option<Self> {
        text.parse().ok()
    }

    pub fn is_running(self) -> bool {
        self == Self::Running
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod jobstate_text {
    use super::JobState;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in JobState::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
