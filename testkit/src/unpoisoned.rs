//! Locking a mutex whatever became of its last holder: a panicking connection, watch or
//! simulator thread must not take the whole server down with it, and the data these mutexes
//! guard stays consistent between statements.

use std::sync::{Mutex, MutexGuard};

/// `mutex.lock()`, taking over the guard of a poisoned mutex.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}
