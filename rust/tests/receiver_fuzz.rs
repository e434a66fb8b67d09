//! The whole receiving side under hostile input: SETUPs, DATA, PAD, heartbeats and EOS with
//! arbitrary fields, in arbitrary order and timing, go through a real `ReceiveEndpoint` (image
//! creation and refusal, the images, liveness, status messages and NAKs, image removal) and
//! every image is drained by its subscription. Runs in the debug profile, so any arithmetic
//! overflow panics like an index out of range would.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use affinity::client::SubscriptionShared;
use affinity::driver::receiver::{DatagramOutcome, ImageDefaults, ReceiveEndpoint};
use affinity::driver::ReceiverCounters;
use affinity::protocol::ImageState;
use affinity::time::Instant;
use affinity::wire::DATA_HEADER_LENGTH;
use proptest::prelude::*;

use fuzz_ops::STREAM;
const SUBSCRIPTION: u64 = 1;
const FILTERED: u64 = 2;

#[path = "support/fuzz_ops.rs"]
mod fuzz_ops;
use fuzz_ops::{encode, op, Op};

fn endpoint() -> ReceiveEndpoint {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_nonblocking(true).expect("nonblocking");
    let address = socket.local_addr().expect("address");
    let defaults = ImageDefaults {
        receiver_window: 128 * 1024,
        status_interval: Duration::from_millis(100),
        nak_delay: Duration::from_micros(100),
        multicast_nak_backoff: Duration::from_millis(10),
        liveness_timeout: Duration::from_secs(10),
        group_tag: None,
        is_group: false,
        socket_receive_buffer: 2 << 20,
        reliable: true,
        max_images_per_subscription: 3,
    };
    let mut endpoint = ReceiveEndpoint::new(socket, address, None, 99, defaults);
    endpoint.add_subscription(STREAM, None, Arc::new(SubscriptionShared::new(SUBSCRIPTION, "fuzz".into(), STREAM)));
    endpoint.add_subscription(STREAM, Some(2), Arc::new(SubscriptionShared::new(FILTERED, "fuzz".into(), STREAM)));
    endpoint
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn hostile_traffic_never_panics_the_receiver_and_delivers_only_whole_frames(ops in prop::collection::vec(op(), 1..80)) {
        let mut endpoint = endpoint();
        let counters = ReceiverCounters::default();
        let mut scratch = vec![0u8; 65536];
        let mut initial_terms = HashMap::new();
        let mut now = Instant::ZERO;
        // Nobody listens there: status messages and NAKs are sent and lost.
        let source: SocketAddr = "127.0.0.1:9".parse().unwrap();
        for op in &ops {
            if let Op::Wait(ms) = op {
                now = now + Duration::from_millis(*ms);
            } else if let Some(datagram) = encode(op, &mut initial_terms) {
                let outcome = endpoint.on_datagram(&datagram, source, now, &mut scratch);
                if matches!(op, Op::Raw(_)) && datagram.len() < 8 {
                    prop_assert_eq!(outcome, DatagramOutcome::Malformed);
                }
                counters.count(outcome);
            }
            endpoint.service_images(now, &mut scratch, &counters);
            let images = endpoint.images();
            prop_assert!(images.len() <= 3 + 1, "image limit: {} images", images.len());
            for image in images {
                let mut image = image.lock().unwrap();
                let identity = *image.identity();
                prop_assert!(image.rebuild_position() <= image.hwm_position());
                for consumer in [SUBSCRIPTION, FILTERED] {
                    let mut last = image.consumer_position(consumer);
                    let mut problems = Vec::new();
                    image.poll_fragments(consumer, 1000, |fragment| {
                        let length = fragment.header.frame_length as usize;
                        let aligned = length.div_ceil(32) * 32;
                        let start = identity.position(fragment.header.term_id, fragment.header.term_offset);
                        if fragment.payload.len() + DATA_HEADER_LENGTH != length {
                            problems.push(format!("payload {} for frame length {length}", fragment.payload.len()));
                        }
                        if start + aligned as i64 != fragment.position {
                            problems.push(format!("frame at {start} (+{aligned}) delivered as ending at {}", fragment.position));
                        }
                        if last.is_some_and(|previous| fragment.position <= previous) {
                            problems.push(format!("position went from {last:?} to {}", fragment.position));
                        }
                        last = Some(fragment.position);
                    });
                    prop_assert!(problems.is_empty(), "{:?}", problems);
                }
                if image.state() == ImageState::Closed {
                    prop_assert!(image.poll_transmit(now, &mut scratch).is_none());
                }
            }
        }
    }
}
