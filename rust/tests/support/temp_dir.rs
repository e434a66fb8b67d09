//! Temporary directories for tests, removed when dropped: at the end of the test that made
//! them, and also when it fails (the guard is dropped while the panic unwinds).
//!
//! One definition for the unit tests of the crates that need it (the `lib.rs` of
//! `rust/crates/shm` and `rust/crates/messaging` include this file as `test_temp_dir`) and the
//! integration tests (`#[path]`, through `support/processes.rs`).
#![allow(dead_code)]

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh, empty directory `<temp dir>/affinity-<name>-<pid>-<n>`, removed with everything in
/// it when dropped. Derefs to its path.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Makes the directory (replacing one an earlier process with this pid left behind).
    pub fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "affinity-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
