//! Term positions and what the protocol state machines need of a log.
//!
//! The log itself (three term partitions in the Aeron layout, the term appender, the reader, the
//! rebuilder and gap scanner) is `affinity_shm::shm::log_buffer::LogBuffer`, one implementation for
//! the media driver and the sans-IO tests (which run it in an anonymous mapping).

pub mod position;
pub mod traits;

pub use position::{StreamIdentity, PARTITION_COUNT};

/// The most an image zeroes of its log in one step behind its consumers (a term length is a
/// multiple of it): small enough that a step is a few microseconds of the receiver's time, and
/// large enough that the log's streaming stores do it.
pub const CLEAN_STEP: i64 = 16 * 1024;
pub use traits::{Offer, ReceiverLog, SenderLog};
