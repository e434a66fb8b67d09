//! Term positions and what the protocol state machines need of a log.
//!
//! The log itself (three term partitions in the Aeron layout, the term appender, the reader, the
//! rebuilder and gap scanner) is `affinity_shm::shm::log_buffer::LogBuffer`, one implementation for
//! the media driver and the sans-IO tests (which run it in an anonymous mapping).

pub mod position;
pub mod traits;

pub use position::{StreamIdentity, PARTITION_COUNT};
pub use traits::{Offer, ReceiverLog, SenderLog};
