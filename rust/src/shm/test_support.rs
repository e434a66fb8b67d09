//! Helpers for the unit tests of this layer.

use crate::test_temp_dir::TempDir;

/// A fresh, empty directory under the system temp dir (`affinity-shm-test-<pid>-<n>`),
/// removed when the returned guard is dropped.
pub fn tempdir() -> TempDir {
    TempDir::new("shm-test")
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
