//! Term buffers in the Aeron layout and position arithmetic.

pub mod position;
