//! What this process knows of each live session, in one place: its status (busy or retrying; mirrored
//! from other workers too), the prompt prefix its last step was sent with (`session.cache` compares the
//! next one with it), whether its SessionStart hooks fired here and whether SessionEnd hooks are owed.
//! One map behind one lock, reached only through these methods; the lock is held for a map operation,
//! never across store work, an event or a hook.
//!
//! Bounded: past [`KEPT`] sessions, the entries of idle sessions with no SessionEnd owed are dropped (a
//! dropped prefix is compared with the stored history instead; a dropped "started" makes a session that
//! comes back fire SessionStart with `resume`, as a new process would).
//!
//! Must not: run sessions (the coordinator does), publish events, touch the store, or run hooks.

use std::collections::HashMap;
use std::sync::Mutex;

use codeloop_types::{LockExt, SessionId, SessionStatus};

use crate::prefix::Prefix;

/// Sessions kept before idle ones are forgotten.
const KEPT: usize = 1024;

#[derive(Default)]
pub(crate) struct LiveSessions {
    sessions: Mutex<HashMap<SessionId, Live>>,
}

#[derive(Default)]
struct Live {
    /// Busy or retrying; `None` when idle.
    status: Option<SessionStatus>,
    prefix: Option<Prefix>,
    /// Its SessionStart hooks fired in this process.
    started: bool,
    /// Prompted here while SessionEnd hooks exist: they run when the client is done with it.
    end_owed: bool,
}

impl Live {
    fn forgettable(&self) -> bool {
        self.status.is_none() && !self.end_owed
    }
}

impl LiveSessions {
    fn with<T>(&self, id: &SessionId, change: impl FnOnce(&mut Live) -> T) -> T {
        let mut sessions = self.sessions.locked();
        if !sessions.contains_key(id) && sessions.len() >= KEPT {
            sessions.retain(|_, live| !live.forgettable());
        }
        change(sessions.entry(id.clone()).or_default())
    }

    /// Records a session's status; `true` when it changed what was known (an idle session that was
    /// marked busy, or any busy status).
    pub fn set_status(&self, id: &SessionId, status: &SessionStatus) -> bool {
        let status = (!matches!(status, SessionStatus::Idle)).then(|| status.clone());
        let mut sessions = self.sessions.locked();
        match sessions.get_mut(id) {
            Some(live) => {
                let changed = live.status.is_some() || status.is_some();
                live.status = status;
                changed
            }
            None if status.is_none() => false,
            None => {
                drop(sessions);
                self.with(id, |live| live.status = status);
                true
            }
        }
    }

    /// Whether the session is marked busy or retrying (here or, mirrored, on another worker).
    pub fn is_marked_busy(&self, id: &SessionId) -> bool {
        self.sessions.locked().get(id).is_some_and(|live| live.status.is_some())
    }

    /// Every session marked busy or retrying, with its status.
    pub fn statuses(&self) -> HashMap<SessionId, SessionStatus> {
        let sessions = self.sessions.locked();
        sessions.iter().filter_map(|(id, live)| Some((id.clone(), live.status.clone()?))).collect()
    }

    /// Records the prefix of the step about to be sent; returns the previous one.
    pub fn swap_prefix(&self, id: &SessionId, prefix: Prefix) -> Option<Prefix> {
        self.with(id, |live| live.prefix.replace(prefix))
    }

    /// Marks the session's SessionStart hooks as fired; `true` the first time.
    pub fn start(&self, id: &SessionId) -> bool {
        self.with(id, |live| !std::mem::replace(&mut live.started, true))
    }

    /// SessionEnd hooks are owed for this session.
    pub fn owe_end(&self, id: &SessionId) {
        self.with(id, |live| live.end_owed = true);
    }

    /// The session's SessionEnd hooks are running now: no longer owed.
    pub fn settle_end(&self, id: &SessionId) {
        if let Some(live) = self.sessions.locked().get_mut(id) {
            live.end_owed = false;
        }
    }

    /// Every session SessionEnd hooks are owed for, each then no longer owed.
    pub fn take_ends_owed(&self) -> Vec<SessionId> {
        let mut sessions = self.sessions.locked();
        sessions
            .iter_mut()
            .filter(|(_, live)| live.end_owed)
            .map(|(id, live)| {
                live.end_owed = false;
                id.clone()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_hold_only_busy_sessions_and_idle_ones_are_forgotten_past_the_bound() {
        let live = LiveSessions::default();
        let busy = SessionId::from("ses_busy");
        assert!(live.set_status(&busy, &SessionStatus::Busy));
        live.owe_end(&SessionId::from("ses_owed"));
        for n in 0..KEPT * 2 {
            let id = SessionId::from(format!("ses_{n}").as_str());
            assert!(live.start(&id), "the first start");
            assert!(!live.start(&id), "once");
        }
        assert!(live.sessions.locked().len() <= KEPT + 2);
        assert!(live.is_marked_busy(&busy), "a busy session is never forgotten");
        assert_eq!(live.take_ends_owed(), [SessionId::from("ses_owed")], "nor one SessionEnd is owed for");
        assert!(live.take_ends_owed().is_empty());
        assert_eq!(live.statuses().len(), 1);
        assert!(live.set_status(&busy, &SessionStatus::Idle));
        assert!(!live.set_status(&busy, &SessionStatus::Idle), "already idle");
        assert!(live.statuses().is_empty());
    }
}
