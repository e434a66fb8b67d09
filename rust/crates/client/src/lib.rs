//! `affinity-client`: the publication and subscription handles applications use ([`client`]),
//! talking to a media driver through shared memory only, and the locking policy of the
//! client-side handles and the messaging runtimes ([`sync`]). Built on `affinity-core` and
//! `affinity-shm`; it cannot name the media driver (`affinity-media-driver`).

// The layers below at the paths the code of this crate names them by (`crate::shm`, ...).
pub(crate) use affinity_core::{channel, error, logbuffer, protocol, wire};
pub(crate) use affinity_shm::shm;

pub mod client;
pub mod sync;
