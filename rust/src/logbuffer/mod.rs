//! Term buffers in the Aeron layout and position arithmetic.

pub mod log;
pub mod memory;
pub mod position;
pub mod traits;

pub use log::{AppendOutcome, LogBuffer, StreamIdentity};
pub use traits::{ReceiverLog, SenderLog};
