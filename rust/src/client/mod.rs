//! Application-facing handles: [`Client`], [`Publication`], [`Subscription`].
//!
//! The client talks to the driver through [`crate::driver::DriverCommand`]s; the log buffers
//! (publication state, images) are shared with the driver. Today they are shared in-process;
//! the standalone driver will map the same buffers from a shared-memory directory.

mod assembler;
pub mod attached;
mod handle;
mod handles;

pub use assembler::{MessageBatch, MessageHeader};
pub use handle::{
    embedded_only, ClientApi, ClientHandle, PublicationHandle, SubscriptionHandle, ATTACHED_CHANNEL_PREFIX,
};
pub use handles::{Client, ImageHandle, ImageStatus, Publication, PublicationShared, Subscription, SubscriptionShared};
