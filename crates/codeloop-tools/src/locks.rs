//! Per-file async locks so two calls never read-modify-write the same file at once (edit, write,
//! apply_patch share one set).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use codeloop_types::LockExt;
use tokio::sync::OwnedMutexGuard;

/// A set of per-path locks. Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct FileLocks {
    inner: Arc<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>>,
}

impl FileLocks {
    /// Waits for exclusive use of `path`. The std lock is held only to look up the entry, never across
    /// the await.
    pub(crate) async fn lock(&self, path: &Path) -> OwnedMutexGuard<()> {
        let entry = {
            let mut map = self.inner.locked();
            // Drop entries nobody holds so the map stays as small as the set of files in use.
            map.retain(|_, lock| Arc::strong_count(lock) > 1);
            map.entry(path.to_path_buf()).or_default().clone()
        };
        entry.lock_owned().await
    }
}
