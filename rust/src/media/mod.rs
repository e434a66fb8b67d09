//! The OS edge: UDP sockets, multicast membership and a loss-injecting relay for tests.

pub mod relay;
pub mod udp;
