//! Helpers for the unit tests of this layer.

use std::path::PathBuf;

/// A fresh, empty directory under the system temp dir (removed by the test that made it).
pub fn tempdir() -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "affinity-shm-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// cnc sections small enough for unit tests: 4 KiB rings and error log, 16 counters.
pub fn small_cnc() -> crate::shm::cnc::CncParams {
    crate::shm::cnc::CncParams {
        to_driver_capacity: 4096,
        to_clients_capacity: 4096,
        counters: 16,
        error_log_length: 4096,
        ..crate::shm::cnc::CncParams::default()
    }
}
