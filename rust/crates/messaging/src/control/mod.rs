//! The control plane shared by consumer groups and subject routing: typed, versioned message
//! codecs, the member view (liveness from heartbeats) and authentication, sans-IO (nothing
//! there opens a socket, starts a thread or reads the clock); and [`member`], the plumbing every
//! member runs over the client API (ids, timing, inbox, heartbeats to peers, the peer table).
//!
//! Layouts are in [`codec`] and `docs/control-plane.md`; every limit is in [`limits`].

pub mod auth;
pub mod bootstrap;
pub mod codec;
pub mod epoch;
mod error;
pub mod limits;
pub mod member;
pub mod view;

pub use auth::{AuthCounters, AuthError, GroupSecret, StreamAuth};
pub use codec::{
    parse_control, Ack, AckEntry, Claim, ClaimState, ControlMessage, DataHeader, DataMessage, Header, Heartbeat, Kind,
    ProducerAck, QueueFigures, RecordView, Role,
};
pub use epoch::EpochGuard;
pub use error::ControlError;
pub use member::{MemberError, Timing};
pub use view::{HeartbeatOutcome, MemberEntry, MemberView, ViewCounters};

/// Stream id of the CONTROL stream of a member's inbox (heartbeats, acks).
pub const CONTROL_STREAM_ID: i32 = 0x4146_4301;
/// Stream id of the DATA stream of a member's inbox (records for owned queues).
pub const DATA_STREAM_ID: i32 = 0x4146_4402;
