//! Sans-IO protocol state machines: bytes and time in, bytes and events out.
//!
//! Nothing here opens a socket, starts a thread or reads a clock.

pub mod defaults;
pub mod image;
pub mod loss;
pub mod publication;
pub mod retransmit;

pub use image::{DataRejection, Image, ImageConfig, ImageCounters, ImageState};
pub use publication::{
    LiveReceiver, NetworkPublication, OfferError, PublicationConfig, PublicationCounters, PublicationEvent,
    PublicationStatus, Transmit,
};
