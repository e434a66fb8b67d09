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
use affinity::wire::{flags, DataHeader, FrameType, Setup, DATA_HEADER_LENGTH};
use proptest::prelude::*;

const STREAM: i32 = 10;
const SUBSCRIPTION: u64 = 1;
const FILTERED: u64 = 2;

#[derive(Clone, Debug)]
enum Op {
    Setup { session: i32, initial: i32, active_delta: i32, term_offset: i32, term_length: i32, mtu: i32, flags: u8 },
    Data { session: i32, term_delta: i32, term_offset: i32, payload: usize, frame_flags: u8, frames: usize },
    Pad { session: i32, term_delta: i32, term_offset: i32, length: i32 },
    Heartbeat { session: i32, term_delta: i32, term_offset: i32, eos: bool },
    Raw(Vec<u8>),
    Wait(u64),
}

fn any_or(small: std::ops::Range<i32>) -> impl Strategy<Value = i32> {
    prop_oneof![4 => small, 1 => any::<i32>()]
}

fn op() -> impl Strategy<Value = Op> {
    let session = 0i32..4;
    prop_oneof![
        2 => (
            session.clone(),
            prop_oneof![Just(0), Just(1000), Just(i32::MAX), Just(i32::MIN), any::<i32>()],
            any_or(-3..4),
            prop_oneof![(0i32..2048).prop_map(|o| o * 32), any::<i32>()],
            prop_oneof![Just(65536), Just(131072), Just(1 << 30), any::<i32>()],
            prop_oneof![Just(1408), Just(32), Just(65504), any::<i32>()],
            any::<u8>(),
        )
            .prop_map(|(session, initial, active_delta, term_offset, term_length, mtu, flags)| Op::Setup {
                session,
                initial,
                active_delta,
                term_offset,
                term_length,
                mtu,
                flags
            }),
        8 => (
            session.clone(),
            any_or(-2..4),
            prop_oneof![(0i32..4096).prop_map(|o| o * 32), any::<i32>()],
            0usize..1500,
            prop_oneof![Just(flags::UNFRAGMENTED), any::<u8>()],
            1usize..4,
        )
            .prop_map(|(session, term_delta, term_offset, payload, frame_flags, frames)| Op::Data {
                session,
                term_delta,
                term_offset,
                payload,
                frame_flags,
                frames
            }),
        1 => (session.clone(), any_or(-2..4), prop_oneof![(0i32..4096).prop_map(|o| o * 32), any::<i32>()], any::<i32>())
            .prop_map(|(session, term_delta, term_offset, length)| Op::Pad { session, term_delta, term_offset, length }),
        3 => (session, any_or(-2..200), prop_oneof![(0i32..4096).prop_map(|o| o * 32), any::<i32>()], any::<bool>())
            .prop_map(|(session, term_delta, term_offset, eos)| Op::Heartbeat { session, term_delta, term_offset, eos }),
        1 => prop::collection::vec(any::<u8>(), 0..200).prop_map(Op::Raw),
        2 => prop_oneof![1u64..50, Just(10_500u64)].prop_map(Op::Wait),
    ]
}

fn header(
    session: i32,
    term_id: i32,
    term_offset: i32,
    frame_length: i32,
    frame_flags: u8,
    kind: FrameType,
) -> Vec<u8> {
    let mut bytes = vec![0u8; DATA_HEADER_LENGTH];
    DataHeader {
        frame_length,
        flags: frame_flags,
        frame_type: kind,
        term_offset,
        session_id: session,
        stream_id: STREAM,
        term_id,
        reserved_value: 0,
    }
    .emit(&mut bytes);
    bytes
}

fn encode(op: &Op, initial_terms: &mut HashMap<i32, i32>) -> Option<Vec<u8>> {
    let term = |session: i32, delta: i32, initial_terms: &HashMap<i32, i32>| {
        initial_terms.get(&session).copied().unwrap_or(0).wrapping_add(delta)
    };
    Some(match *op {
        Op::Setup { session, initial, active_delta, term_offset, term_length, mtu, flags } => {
            initial_terms.insert(session, initial);
            let mut bytes = vec![0u8; Setup::LENGTH];
            Setup {
                flags,
                term_offset,
                session_id: session,
                stream_id: STREAM,
                initial_term_id: initial,
                active_term_id: initial.wrapping_add(active_delta),
                term_length,
                mtu,
                ttl: 0,
            }
            .emit(&mut bytes);
            bytes
        }
        Op::Data { session, term_delta, term_offset, payload, frame_flags, frames } => {
            let term_id = term(session, term_delta, initial_terms);
            let mut bytes = Vec::new();
            let aligned = (DATA_HEADER_LENGTH + payload).div_ceil(32) * 32;
            for index in 0..frames {
                let offset = term_offset.wrapping_add((index * aligned) as i32);
                bytes.extend(header(
                    session,
                    term_id,
                    offset,
                    (DATA_HEADER_LENGTH + payload) as i32,
                    frame_flags,
                    FrameType::Data,
                ));
                bytes.extend((0..aligned - DATA_HEADER_LENGTH).map(|i| (i as u8) ^ (index as u8)));
            }
            bytes
        }
        Op::Pad { session, term_delta, term_offset, length } => header(
            session,
            term(session, term_delta, initial_terms),
            term_offset,
            length,
            flags::UNFRAGMENTED,
            FrameType::Pad,
        ),
        Op::Heartbeat { session, term_delta, term_offset, eos } => {
            let frame_flags = if eos { flags::UNFRAGMENTED | flags::EOS } else { flags::UNFRAGMENTED };
            header(session, term(session, term_delta, initial_terms), term_offset, 0, frame_flags, FrameType::Data)
        }
        Op::Raw(ref bytes) => bytes.clone(),
        Op::Wait(_) => return None,
    })
}

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
