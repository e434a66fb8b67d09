//! The OS edge: UDP sockets, multicast membership, and for tests a loss-injecting relay and free
//! UDP ports.

pub mod ports;
pub mod relay;
pub mod udp;
