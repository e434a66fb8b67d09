//! Locking policy for the client-side handles and the messaging runtimes, defined once.
//!
//! These mutexes guard plain data (queues, counters, handle tables, snapshots) that every
//! operation leaves consistent between statements, never a half-applied protocol state: the
//! protocol state machines live in the media driver, which shares no lock with an application
//! thread. A thread that panicked while holding one (a bug, reported by its own panic) therefore
//! leaves nothing that a later caller cannot use, and turning every later call into a second
//! panic would only take the surviving application down with it. The driver's own lock
//! (`embedded.rs`) does not use this: there a poisoned lock is surfaced as an error.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking the guard back from a poisoned lock (see the module documentation).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
