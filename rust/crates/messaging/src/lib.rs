//! `affinity-messaging`: what applications build on the client API, as an application would —
//! the control plane ([`control`]: heartbeat/ack/data codecs, the member view, the member
//! plumbing), hashed consumer groups ([`groups`]) and the subject router ([`subjects`]). Built on
//! `affinity-client` (and the core and `safe_fs` below it); it cannot name the media driver.
//!
//! Invariant: nothing under `control` (outside `control::member`) or `groups` (outside
//! `groups::runtime` and `groups::discovery`) opens a socket, starts a thread or reads the clock.

// The layers below at the paths the code of this crate names them by (`crate::client`, ...).
pub(crate) use affinity_client::{client, sync};
pub(crate) use affinity_core::{error, protocol, routing, time};
pub(crate) use affinity_shm::safe_fs;

pub mod control;
pub mod groups;
pub mod subjects;

// Test helpers shared with the integration tests: one file each under `rust/tests/support/`.
#[cfg(test)]
#[path = "../../../tests/support/temp_dir.rs"]
mod test_temp_dir;
