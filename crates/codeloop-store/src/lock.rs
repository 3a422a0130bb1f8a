//! Session run locks: an exclusive OS file lock on `<data_dir>/locks/<session_id>.lock` per running session.
//!
//! The OS releases the lock when the holder closes the file or dies (even by SIGKILL), so a lock can never
//! be left behind by a crash; that is what lets recovery tell a crashed run from a live one.
//! Owns: taking, holding and releasing those locks, and removing lock files of deleted sessions.
//! Must not: decide who may run a session (the coordinator does), or wait for a lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use codeloop_types::SessionId;

use crate::{Result, StoreError};

/// Held for the duration of a run; dropping it releases the lock.
#[derive(Debug)]
pub struct SessionLock {
    session: SessionId,
    path: PathBuf,
    // Held for its lock; closing the file releases it.
    _file: File,
}

impl SessionLock {
    pub fn session_id(&self) -> &SessionId {
        &self.session
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl crate::RunOwnership for SessionLock {
    fn session_id(&self) -> &SessionId {
        &self.session
    }

    /// The OS holds a file lock until it is closed: it cannot be lost while the process lives.
    fn is_held(&self) -> bool {
        true
    }
}

/// How often to retry when the lock file was removed between opening and locking it.
const STALE_FILE_RETRIES: usize = 3;

pub(crate) fn lock_path(dir: &Path, session: &SessionId) -> Result<PathBuf> {
    let id = session.as_str();
    let safe = !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !safe {
        return Err(StoreError::Io {
            path: dir.display().to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid session id {id:?} for a lock file name"),
            ),
        });
    }
    Ok(dir.join(format!("{id}.lock")))
}

/// Takes the lock without waiting; `SessionBusy` if anyone (this process included) holds it.
pub(crate) fn acquire(dir: &Path, session: &SessionId) -> Result<SessionLock> {
    let path = lock_path(dir, session)?;
    let io_error = |source| StoreError::Io { path: path.display().to_string(), source };
    for _ in 0..STALE_FILE_RETRIES {
        let file = match open_lock_file(&path) {
            // The lock folder was removed under us (e.g. by hand); make it again.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).and_then(|()| open_lock_file(&path))
            }
            other => other,
        };
        let file = file.map_err(io_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(StoreError::SessionBusy(session.clone())),
            Err(TryLockError::Error(source)) => return Err(io_error(source)),
        }
        // `remove` unlinks the file while holding the lock; if that happened between our open and our lock,
        // we hold a lock on a file nobody else can find. Start again with the current file.
        if still_linked(&file, &path) {
            return Ok(SessionLock { session: session.clone(), path, _file: file });
        }
    }
    Err(StoreError::SessionBusy(session.clone()))
}

fn open_lock_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)
}

/// Removes the lock file of a deleted session, unless a run holds it (then it stays; it is empty).
pub(crate) fn remove(dir: &Path, session: &SessionId) {
    let Ok(lock) = acquire(dir, session) else { return };
    if let Err(error) = std::fs::remove_file(&lock.path)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::debug!(path = %lock.path.display(), %error, "could not remove a session lock file");
    }
}

#[cfg(unix)]
fn still_linked(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(held), Ok(current)) => held.dev() == current.dev() && held.ino() == current.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn still_linked(_file: &File, path: &Path) -> bool {
    // Windows refuses to delete a file that is open, so a held lock file cannot have been unlinked.
    path.exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_until_the_first_drops() {
        let dir = tempfile::tempdir().unwrap();
        let id = SessionId::new();
        let first = acquire(dir.path(), &id).unwrap();
        assert!(matches!(acquire(dir.path(), &id), Err(StoreError::SessionBusy(busy)) if busy == id));
        drop(first);
        acquire(dir.path(), &id).unwrap();
    }

    #[test]
    fn remove_leaves_a_held_lock_alone() {
        let dir = tempfile::tempdir().unwrap();
        let id = SessionId::new();
        let held = acquire(dir.path(), &id).unwrap();
        remove(dir.path(), &id);
        assert!(held.path().exists());
        drop(held);
        remove(dir.path(), &id);
        assert!(!lock_path(dir.path(), &id).unwrap().exists());
    }

    #[test]
    fn a_removed_lock_folder_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let locks = dir.path().join("locks");
        acquire(&locks, &SessionId::new()).unwrap();
        assert!(locks.is_dir());
    }

    #[test]
    fn path_traversal_ids_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["../x", "a/b", "", "ses_1.lock\0"] {
            assert!(
                matches!(acquire(dir.path(), &SessionId::from(bad)), Err(StoreError::Io { .. })),
                "{bad}"
            );
        }
    }
}
