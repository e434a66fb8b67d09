//! Hostile datagrams never panic the receiving side: arbitrary bytes and well-formed headers
//! with arbitrary fields go through `Image::on_data`, then the image is polled and ticked; what
//! it delivers is only whole frames, at the position their headers name, in order. (The whole
//! receiver, SETUP included, is fuzzed in `receiver_fuzz.rs`.)

use std::time::Duration;

use affinity::flow_control::{build, FlowControlDefaults};
use affinity::logbuffer::StreamIdentity;
use affinity::protocol::{ImageConfig, PublicationConfig};
use affinity::time::Instant;
use affinity::wire::{DataHeader, FrameType, Nak, StatusMessage};
use proptest::prelude::*;

#[path = "support/anonymous_logs.rs"]
mod anonymous_logs;
use anonymous_logs::{new_image, new_publication};

const TERM: u32 = 64 * 1024;

fn identity() -> StreamIdentity {
    StreamIdentity { session_id: 5, stream_id: 6, initial_term_id: 1000, term_length: TERM }
}

/// A well-formed single-frame DATA datagram near the start of the stream (so some are taken
/// and delivered, out of order, duplicated or overlapping).
fn well_formed() -> impl Strategy<Value = Vec<u8>> {
    (0i32..8, -1i32..2, prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(slot, term_delta, body)| {
        let mut bytes = vec![0u8; 32];
        DataHeader {
            frame_length: 32 + body.len() as i32,
            flags: 0xc0,
            frame_type: FrameType::Data,
            term_offset: slot * 32,
            session_id: 5,
            stream_id: 6,
            term_id: 1000 + term_delta,
            reserved_value: 0,
        }
        .emit(&mut bytes);
        bytes.extend_from_slice(&body);
        bytes.resize(bytes.len().div_ceil(32) * 32, 0);
        bytes
    })
}

fn datagram() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        well_formed(),
        well_formed(),
        prop::collection::vec(any::<u8>(), 0..2000),
        (
            any::<i32>(),
            any::<u8>(),
            prop_oneof![Just(0i16), Just(1i16), any::<i16>()],
            0i32..(TERM as i32 * 2),
            -2i32..3,
            prop::collection::vec(any::<u8>(), 0..1500)
        )
            .prop_map(|(frame_length, flags, frame_type, term_offset, term_delta, body)| {
                let mut bytes = vec![0u8; 32];
                DataHeader {
                    frame_length,
                    flags,
                    frame_type: FrameType::from_code(frame_type),
                    term_offset: term_offset & !31,
                    session_id: 5,
                    stream_id: 6,
                    term_id: 1000 + term_delta,
                    reserved_value: 0,
                }
                .emit(&mut bytes);
                bytes.extend_from_slice(&body);
                bytes
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn hostile_datagrams_never_panic_an_image(datagrams in prop::collection::vec(datagram(), 1..40)) {
        let mut image = new_image(ImageConfig::new(identity(), 0, 1), Instant::ZERO);
        image.add_consumer(1);
        let mut out = vec![0u8; 128];
        let mut last = None;
        for (step, datagram) in datagrams.iter().enumerate() {
            let now = Instant::ZERO + Duration::from_millis(step as u64);
            let _ = image.on_data(datagram, now);
            // Every delivered fragment is a whole frame where its header says it is, in order.
            let mut problems = Vec::new();
            image.poll_fragments(1, 100, |fragment| {
                let length = fragment.header.frame_length as usize;
                let start = identity().position(fragment.header.term_id, fragment.header.term_offset);
                if fragment.payload.len() + 32 != length {
                    problems.push(format!("payload of {} bytes for frame length {length}", fragment.payload.len()));
                }
                if start + length.div_ceil(32) as i64 * 32 != fragment.position {
                    problems.push(format!("frame at {start} delivered as ending at {}", fragment.position));
                }
                if last.is_some_and(|previous| fragment.position <= previous) {
                    problems.push(format!("position went back from {last:?} to {}", fragment.position));
                }
                last = Some(fragment.position);
            });
            prop_assert!(problems.is_empty(), "{:?}", problems);
            image.on_tick(now);
            while image.poll_transmit(now, &mut out).is_some() {}
        }
        prop_assert!(image.rebuild_position() <= image.hwm_position(), "rebuilt past the high-water mark");
    }

    #[test]
    fn hostile_control_frames_never_panic_a_publication(
        naks in prop::collection::vec((any::<i32>(), any::<i32>(), any::<i32>()), 0..20),
        statuses in prop::collection::vec((any::<i32>(), any::<i32>(), any::<i32>(), any::<u8>()), 0..20),
    ) {
        let config = PublicationConfig::new(identity(), 0);
        let mut publication = new_publication(config, build(None, false, &FlowControlDefaults::default()), Instant::ZERO);
        let mut out = vec![0u8; 2048];
        publication.poll_transmit(Instant::ZERO, &mut out);
        for (index, (term_id, term_offset, window, flags)) in statuses.iter().enumerate() {
            let now = Instant::ZERO + Duration::from_millis(index as u64);
            let message = StatusMessage {
                flags: *flags,
                session_id: 5,
                stream_id: 6,
                consumption_term_id: *term_id,
                consumption_term_offset: *term_offset,
                receiver_window: *window,
                receiver_id: index as i64 % 3,
                group_tag: None,
            };
            publication.on_status_message(&message, now);
            let _ = publication.offer(&[1u8; 100], 0);
            while publication.poll_transmit(now, &mut out).is_some() {}
            publication.on_idle(now);
        }
        for (term_id, term_offset, length) in naks {
            publication.on_nak(&Nak { session_id: 5, stream_id: 6, term_id, term_offset, length }, Instant::ZERO);
            while publication.poll_transmit(Instant::ZERO, &mut out).is_some() {}
        }
    }
}
