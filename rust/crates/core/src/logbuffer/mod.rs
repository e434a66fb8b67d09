//! Term positions and what the protocol state machines need of a log.
//!
//! The log itself (three term partitions in the Aeron layout, the term appender, the reader, the
//! rebuilder and gap scanner) is `affinity_shm::shm::log_buffer::LogBuffer`, one implementation for
//! the media driver and the sans-IO tests (which run it in an anonymous mapping).

pub mod position;
pub mod traits;

pub use position::{StreamIdentity, PARTITION_COUNT};

/// The step in which an image zeroes its log behind its consumers (a term length is a multiple
/// of it): small enough that a step is a few microseconds of the receiver's time, and above the
/// 16 KiB from which the shared log zeroes with non-temporal stores (no read of each line first).
pub const CLEAN_STEP: i64 = 32 * 1024;
pub use traits::{Offer, ReceiverLog, SenderLog};
