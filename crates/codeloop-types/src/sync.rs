//! One way to lock a mutex across the workspace.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks a mutex whose previous holder may have panicked. Every mutex in codeloop guards data that is
/// consistent between statements (maps, lists, counters), so a poisoned lock still holds usable data, and
/// one panicking task must not take every other session down with it.
pub trait LockExt<T> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
