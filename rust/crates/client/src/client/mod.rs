//! The client side of the shared-memory contract: [`attached::AttachedClient`] (commands to the
//! driver, mapped publication logs and images) and the handles the bindings and the messaging
//! runtimes hold ([`ClientHandle`], [`PublicationHandle`], [`SubscriptionHandle`]). Nothing
//! here uses `driver`.

mod assembler;
pub mod attached;
mod handle;

pub use assembler::{MessageBatch, MessageHeader};
pub use attached::ClientCounters;
pub use handle::{check_channel, ClientApi, ClientHandle, PublicationHandle, SubscriptionHandle};
