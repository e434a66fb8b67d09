//! Term buffers in the Aeron layout and position arithmetic.

pub mod log;
pub mod memory;
pub mod position;

pub use log::{AppendOutcome, LogBuffer, StreamIdentity};
