//! The unit tests of `affinity_core::protocol`, over the shared-memory log buffer.

mod image;
mod publication;
mod shared_log;
