//! Subjects on the wire: a router that routes live subscriptions to data-source peers by the
//! affinity routing tables (seed 000, Caplin DataSource) and assigns faucet topics to enlisted
//! publishers (seed 003, AMPS on manifold affinity).
//!
//! * [`backlog`] — sans-IO backlogs of records per destination under one memory budget.
//! * [`cluster`] — sans-IO: the cluster of routers (nodes, domains, masters and slaves, load
//!   balancer, connection states, forward queues, slave caches).
//! * [`codec`] — the subject record (subscribe, unsubscribe, request, discard, data with flags
//!   image / update / NODATA unavailable / NODATA notfound / status, enlist, delist).
//! * [`failover`] — sans-IO: a subscriber's or source's watch over its list of routers
//!   (liveness from the router's ALIVE records, moves, what is sent again).
//! * [`faucet`] — sans-IO faucet assignment and announcements.
//! * [`router`] — the sans-IO router: tables in the data path, moves on peer failure, relay.
//! * [`runtime`] — the router, subscriber and source over the client API, with the control
//!   plane's heartbeats (`crate::control`) for liveness.
//!
//! Layouts and behaviour: `docs/subjects.md`.

pub mod backlog;
pub mod cluster;
pub mod codec;
pub mod failover;
pub mod faucet;
pub mod router;
pub mod runtime;

pub use codec::{RecordKind, Records, SubjectError, SubjectRecord};
pub use faucet::{Announcements, Faucet, FaucetAction, FaucetConfig, FaucetEvent, Party};
pub use router::{LogEntry, RouterCore, RouterCounters};

/// The control-plane fingerprint (namespace) of routers and their peers: heartbeats carrying
/// another fingerprint (a consumer group's) are ignored and counted.
pub fn fingerprint() -> u64 {
    crate::routing::affinity_hash("affinity.subjects/1")
}
