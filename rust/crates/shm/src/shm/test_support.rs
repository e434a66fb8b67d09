//! Helpers for the unit tests of this layer.

use std::time::Duration;

use crate::test_temp_dir::TempDir;

/// The client timeout of drivers whose clients are commands written by hand, which send no
/// keepalives: longer than any test. (Under load a test can outlast the default 5 s; its
/// clients then time out and their publications and subscriptions go with them.)
pub const SILENT_CLIENT_TIMEOUT: Duration = Duration::from_secs(3600);

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
