//! `affinity-core`: the sans-IO layer of `affinity` (the bottom of the crate graph in
//! `ARCHITECTURE.md`). It depends on no other crate of the workspace, so nothing in it can reach
//! shared memory, the driver or the client.
//!
//! * [`wire`] — one codec per Aeron frame. Untrusted bytes in, typed values or a
//!   [`wire::WireError`] out.
//! * [`logbuffer`] — 64-bit position arithmetic and the ports ([`logbuffer::SenderLog`],
//!   [`logbuffer::ReceiverLog`]) through which [`protocol`] reaches a log (the shared-memory log
//!   of `affinity-shm` implements them).
//! * [`flow_control`] — one trait, one module per strategy.
//! * [`protocol`] — the state machines of a publication and an image, loss detection and
//!   retransmission. Bytes and time in, bytes and events out.
//! * [`routing`] — transport-agnostic affinity routing tables.
//! * [`channel`] — channel URI parsing (`aeron:udp?...`, `aeron:ipc`).
//! * [`units`], [`limits`], [`time`], [`error`] — sizes and durations, protocol limits, time as
//!   plain numbers, the crate-wide error type.
//!
//! Invariant: nothing here opens a socket or a file, starts a thread or reads the clock
//! ([`time::MonotonicClock`] is defined here for the layers above; nothing here calls it).

pub mod channel;
pub mod error;
pub mod flow_control;
pub mod limits;
pub mod logbuffer;
pub mod protocol;
pub mod routing;
pub mod time;
pub mod units;
pub mod wire;
