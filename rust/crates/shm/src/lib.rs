//! `affinity-shm`: the client ↔ driver contract in shared memory (Aeron's layouts): mapped log
//! buffers, counters, command ring, broadcast buffer, error log and the `cnc` file ([`shm`]),
//! and the checked file-system operations they are made with ([`safe_fs`]). Built on
//! `affinity-core` only; the driver and the client both build on it.

// The core's modules at the paths the code of this layer names them by (`crate::wire`, ...).
pub(crate) use affinity_core::{error, limits, logbuffer, protocol, wire};

pub mod safe_fs;
pub mod shm;

// The unit tests of the protocol state machines run here, over this crate's log buffer (the
// media driver's log type), which the core crate below cannot name.
#[cfg(test)]
use affinity_core::{flow_control, time};
#[cfg(test)]
mod protocol_tests;

// Test helpers shared with the integration tests: one file each under `rust/tests/support/`.
#[cfg(any(test, feature = "test-support"))]
#[path = "../../../tests/support/temp_dir.rs"]
mod test_temp_dir;
