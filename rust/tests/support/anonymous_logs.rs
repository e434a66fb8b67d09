//! The protocol state machines over the media driver's log type in an anonymous mapping: what
//! the sans-IO integration tests (simulated network, vector replay, image fuzz) run.
#![allow(dead_code)]

use affinity::flow_control::FlowControl;
use affinity::protocol::{ImageConfig, PublicationConfig};
use affinity::shm::log_buffer::{LogBuffer, LogParams, LogStart};
use affinity::time::Instant;

/// An image over an anonymous log.
pub type Image = affinity::protocol::Image<LogBuffer>;
/// A network publication over an anonymous log.
pub type NetworkPublication = affinity::protocol::NetworkPublication<LogBuffer>;

/// A publication over an anonymous log that starts where `config` says.
pub fn new_publication(
    config: PublicationConfig,
    flow_control: Box<dyn FlowControl>,
    now: Instant,
) -> NetworkPublication {
    let params = LogParams::for_stream(&config.identity, config.mtu);
    let log = LogBuffer::anonymous_at(&params, LogStart::at(&config.identity, config.initial_position)).unwrap();
    NetworkPublication::with_log(config, log, flow_control, now)
}

/// An image over an anonymous log.
pub fn new_image(config: ImageConfig, now: Instant) -> Image {
    let log =
        LogBuffer::anonymous(&LogParams::for_stream(&config.identity, affinity::protocol::defaults::MTU)).unwrap();
    Image::with_log(config, log, now)
}
