//! `affinity-media-driver`: the media driver ([`driver`]: the conductor, sender and receiver
//! agents, their threads, the driver event log) and the OS edge it sends and receives through
//! ([`media`]: UDP sockets, multicast membership, a loss-injecting relay). Built on
//! `affinity-core` and `affinity-shm`; it cannot name the client (`affinity-client`), which
//! reaches it only through shared memory.

// The layers below at the paths the code of this crate names them by (`crate::shm`, ...).
pub(crate) use affinity_core::{channel, error, flow_control, limits, logbuffer, protocol, time, units, wire};
pub(crate) use affinity_shm::shm;

pub mod driver;
pub mod media;
