//! `affinity`: an Aeron-wire-compatible reliable UDP transport with affinity routing.
//!
//! The top crate of the workspace: it re-exports each layer crate's modules (`affinity-core`,
//! `affinity-shm`, `affinity-media-driver`, `affinity-client`, `affinity-messaging`; the crate
//! graph is in `ARCHITECTURE.md`) and adds what joins them: [`embedded`], the bindings and the
//! binaries. A tour of the layers, from the bytes up:
//!
//! * [`wire`] — one codec per Aeron frame (data, setup, status message, NAK, RTT measurement,
//!   error, response setup). Untrusted bytes in, typed values or a [`wire::WireError`] out.
//! * [`logbuffer`] — 64-bit position arithmetic and the ports ([`logbuffer::SenderLog`],
//!   [`logbuffer::ReceiverLog`]) through which [`protocol`] reaches the log ([`shm::log_buffer`]).
//! * [`flow_control`] — one trait, one module per strategy (`unicast`, `max`, `min`, `tagged`).
//! * [`protocol`] — sans-IO state machines: the sending side of a publication and the
//!   receiving side (an image), loss detection and retransmission. Bytes and time in, bytes and
//!   events out; no sockets, threads or clocks.
//! * [`routing`] — transport-agnostic affinity routing tables (members, priority groups,
//!   stickiness, hashing, policies).
//! * [`channel`] — channel URI parsing (`aeron:udp?...`, `aeron:ipc`).
//! * [`units`] — the one grammar of sizes (`64k`) and durations (`500ms`), no I/O.
//! * [`media`] — the OS edge: UDP sockets, multicast membership, a loss-injecting relay.
//! * [`driver`] — the media driver agents (conductor, sender, receiver, in-memory IPC), their
//!   threads, and the driver event log.
//! * [`client`] — publication and subscription handles used by applications.
//! * [`embedded`] — the driver run in this process over `shm/`, composed with a client (the
//!   composition point of `driver` and `client`; of the bindings, `py/transport.rs` and
//!   `py/records.rs` name both too).
//! * [`shm`] — the client ↔ driver contract in shared memory: mapped log buffers, counters,
//!   command ring, broadcast buffer, error log and the `cnc` file (Aeron's layouts).
//! * [`control`] — the control plane: heartbeat/ack/data codecs and the member view (sans-IO),
//!   and `control::member`, the member plumbing (inbox, heartbeats, peers) over [`client`].
//! * [`groups`] — hashed consumer groups: sans-IO publisher and consumer state, and the
//!   runtime that runs them over [`client`].
//! * [`subjects`] — the subject router (routing tables in the data path, faucet), its codec
//!   and its runtime over [`client`] and [`control`].
//! * `py` — the PyO3 bindings (feature `python`), the only module that touches Python.
//!
//! Architecture invariant: nothing under `wire`, `logbuffer`, `protocol`, `flow_control`,
//! `routing` (the crate `affinity-core`, which depends on no other crate here), `control` (outside `control::member`) or `groups` (outside `groups::runtime` and
//! `groups::discovery`) opens a socket, starts a thread or reads the clock.

// The layers below, at the paths this crate's modules, the bindings, the binaries, the
// integration tests and the JNI crate name them by (`affinity::wire`, `crate::shm`, ...).
pub use affinity_client::client;
pub use affinity_core::{channel, error, flow_control, limits, logbuffer, protocol, routing, time, units, wire};
pub use affinity_media_driver::{driver, media};
pub use affinity_messaging::{control, groups, subjects};
pub use affinity_shm::{safe_fs, shm};

pub mod embedded;

#[cfg(feature = "python")]
mod py;
