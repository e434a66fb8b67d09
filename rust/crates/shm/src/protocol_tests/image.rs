//! The unit tests of `affinity_core::protocol::image`, over the shared-memory log.

use crate::logbuffer::Offer;
use crate::logbuffer::StreamIdentity;
use crate::protocol::defaults;
use crate::protocol::image::*;
use crate::shm::log_buffer::{LogBuffer, LogParams};
use crate::time::Instant;
use crate::wire::{flags, DataHeader, FrameType, WireError};
use crate::wire::{parse_control, ControlFrame};

const TERM: u32 = 64 * 1024;

fn ms(value: u64) -> Instant {
    Instant::from_nanos(value * 1_000_000)
}

fn identity() -> StreamIdentity {
    StreamIdentity { session_id: 5, stream_id: 6, initial_term_id: 100, term_length: TERM }
}

/// An image over a log in an anonymous mapping (the media driver's log type).
fn new_image(config: ImageConfig) -> Image<LogBuffer> {
    let log = LogBuffer::anonymous(&LogParams::for_stream(&config.identity, defaults::MTU)).unwrap();
    Image::with_log(config, log, Instant::ZERO)
}

fn image() -> Image<LogBuffer> {
    let config =
        ImageConfig { receiver_window: 32 * 1024, group_tag: Some(1001), ..ImageConfig::new(identity(), 0, 1) };
    let mut image = new_image(config);
    image.add_consumer(1);
    image
}

/// Four 64-byte frames written by the term appender, as datagrams.
fn frames() -> Vec<Vec<u8>> {
    let log = LogBuffer::anonymous(&LogParams::for_stream(&identity(), defaults::MTU)).unwrap();
    for index in 0..4u8 {
        assert!(matches!(log.offer(&[index; 20], 0, i64::MAX).unwrap(), Offer::Appended(_)));
    }
    let mut term = Vec::new();
    log.term(0).unwrap().read_into(0, 4 * 64, &mut term).unwrap();
    term.chunks(64).map(<[u8]>::to_vec).collect()
}

fn drain(image: &mut Image<LogBuffer>) -> Vec<u8> {
    let mut firsts = Vec::new();
    image.poll_fragments(1, 100, |fragment| firsts.push(fragment.payload[0]));
    firsts
}

fn transmit(image: &mut Image<LogBuffer>, now: Instant) -> Vec<ControlFrame> {
    let mut out = [0u8; 128];
    std::iter::from_fn(|| image.poll_transmit(now, &mut out).map(|n| parse_control(&out[..n]).unwrap().unwrap()))
        .collect()
}

#[test]
fn sends_a_tagged_status_message_at_once_then_every_interval() {
    let mut image = image();
    let sent = transmit(&mut image, ms(0));
    let [ControlFrame::StatusMessage(message)] = &sent[..] else { panic!("{sent:?}") };
    assert_eq!((message.receiver_window, message.group_tag), (32 * 1024, Some(1001)));
    assert!(transmit(&mut image, ms(50)).is_empty());
    assert_eq!(transmit(&mut image, ms(100)).len(), 1);
}

/// A 32-byte PAD at `term_offset` of the first term claiming `frame_length` bytes.
fn pad(term_offset: i32, frame_length: i32) -> Vec<u8> {
    let mut pad = frames()[0][..32].to_vec();
    pad[0..4].copy_from_slice(&frame_length.to_le_bytes());
    pad[6..8].copy_from_slice(&0u16.to_le_bytes());
    pad[8..12].copy_from_slice(&term_offset.to_le_bytes());
    pad
}

#[test]
fn a_pad_reaching_past_the_term_end_is_malformed_and_moves_nothing() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    let forged = pad(64, TERM as i32);
    assert!(matches!(
        image.on_data(&forged, ms(2)),
        Err(DataRejection::Malformed(WireError::BadFrameLength { frame: "PAD", .. }))
    ));
    assert_eq!(image.counters().malformed, 1);
    // The stream goes on where it was: the next real frame is delivered.
    image.on_data(&frames[1], ms(3)).unwrap();
    assert_eq!(drain(&mut image), vec![0, 1]);
    // A PAD that ends exactly at the term end is the publication's own padding.
    assert!(image.on_data(&pad(128, TERM as i32 - 128), ms(4)).is_ok());
}

#[test]
fn naks_a_gap_after_the_delay_and_delivers_once_filled() {
    let mut image = image();
    let frames = frames();
    transmit(&mut image, ms(0));
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[2], ms(1)).unwrap();
    assert_eq!(drain(&mut image), vec![0]);
    assert!(transmit(&mut image, ms(1)).is_empty(), "NAK before the delay");
    let sent = transmit(&mut image, ms(2));
    let [ControlFrame::Nak(nak)] = &sent[..] else { panic!("{sent:?}") };
    assert_eq!((nak.term_id, nak.term_offset, nak.length), (100, 64, 64));
    image.on_data(&frames[1], ms(3)).unwrap();
    image.on_data(&frames[3], ms(3)).unwrap();
    assert_eq!(drain(&mut image), vec![1, 2, 3]);
    assert_eq!(image.counters().loss_gaps, 1);
}

#[test]
fn drops_duplicates_and_data_beyond_the_window() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    assert_eq!(image.on_data(&frames[0], ms(1)), Err(DataRejection::Duplicate));
    let mut far = frames[1].clone();
    far[8..12].copy_from_slice(&(TERM as i32 / 2 + 64).to_le_bytes());
    assert_eq!(image.on_data(&far, ms(1)), Err(DataRejection::Overrun));
    assert!(matches!(image.on_data(&far[..20], ms(1)), Err(DataRejection::Malformed(_))));
    assert_eq!(image.counters().duplicates, 1);
    assert_eq!(image.counters().overruns, 1);
}

#[test]
fn a_heartbeat_exposes_tail_loss() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    let mut heartbeat = frames[0][..32].to_vec();
    heartbeat[0..4].copy_from_slice(&0i32.to_le_bytes());
    heartbeat[8..12].copy_from_slice(&256i32.to_le_bytes());
    image.on_data(&heartbeat, ms(2)).unwrap();
    assert_eq!(image.hwm_position(), 256);
    transmit(&mut image, ms(2));
    let sent = transmit(&mut image, ms(3));
    assert!(sent.iter().any(|f| matches!(f, ControlFrame::Nak(n) if n.term_offset == 64 && n.length == 192)));
}

#[test]
fn end_of_stream_drains_with_eos_status_messages_then_closes() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    let mut heartbeat = frames[0][..32].to_vec();
    heartbeat[0..4].copy_from_slice(&0i32.to_le_bytes());
    heartbeat[5] = flags::UNFRAGMENTED | flags::EOS;
    heartbeat[8..12].copy_from_slice(&64i32.to_le_bytes());
    image.on_data(&heartbeat, ms(2)).unwrap();
    assert!(!image.is_end_of_stream(), "consumer has not read yet");
    drain(&mut image);
    image.on_tick(ms(3));
    assert!(matches!(image.state(), ImageState::Draining { .. }));
    let sent = transmit(&mut image, ms(3));
    assert!(matches!(&sent[..], [ControlFrame::StatusMessage(m)] if m.is_end_of_stream()));
    image.on_tick(ms(600));
    assert_eq!(image.state(), ImageState::Closed);
}

fn heartbeat_at(term_id: i32, term_offset: i32, eos: bool) -> Vec<u8> {
    let mut bytes = vec![0u8; 32];
    DataHeader {
        frame_length: 0,
        flags: if eos { flags::UNFRAGMENTED | flags::EOS } else { flags::UNFRAGMENTED },
        frame_type: FrameType::Data,
        term_offset,
        session_id: 5,
        stream_id: 6,
        term_id,
        reserved_value: 0,
    }
    .emit(&mut bytes);
    bytes
}

#[test]
fn a_heartbeat_beyond_the_window_is_an_overrun_and_moves_nothing() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[2], ms(1)).unwrap();
    // Forged: term id = current + 100.
    assert_eq!(image.on_data(&heartbeat_at(200, 0, false), ms(2)), Err(DataRejection::Overrun));
    assert_eq!(image.hwm_position(), 192);
    assert_eq!(image.counters().overruns, 1);
    assert_eq!(image.counters().heartbeats_received, 0);
    transmit(&mut image, ms(2));
    let sent = transmit(&mut image, ms(3));
    assert!(sent.iter().any(|f| matches!(f, ControlFrame::Nak(n) if n.term_offset == 64)), "{sent:?}");
    assert_eq!(image.counters().unrecoverable_gaps, 0);
    image.on_data(&frames[1], ms(4)).unwrap();
    assert_eq!(drain(&mut image), vec![0, 1, 2]);
}

#[test]
fn data_beyond_the_window_does_not_make_gaps_unrecoverable() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[2], ms(1)).unwrap();
    let mut far = frames[3].clone();
    far[8..12].copy_from_slice(&(TERM as i32 - 64).to_le_bytes());
    assert_eq!(image.on_data(&far, ms(2)), Err(DataRejection::Overrun));
    transmit(&mut image, ms(2));
    let sent = transmit(&mut image, ms(3));
    assert!(sent.iter().any(|f| matches!(f, ControlFrame::Nak(_))), "{sent:?}");
    assert_eq!(image.counters().unrecoverable_gaps, 0);
}

#[test]
fn end_of_stream_ahead_of_what_was_received_is_ignored() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    // EOS 32,000 bytes ahead and EOS ahead of a gap: neither ends the image.
    let _ = image.on_data(&heartbeat_at(100, 32_000 & !31, true), ms(2));
    image.on_data(&frames[2], ms(2)).unwrap();
    image.on_data(&heartbeat_at(100, 192, true), ms(2)).unwrap();
    drain(&mut image);
    image.on_tick(ms(3));
    assert_eq!(image.state(), ImageState::Active);
    assert_eq!(image.counters().eos_rejected, 2);
    // Once everything up to the EOS position arrived, the (repeated) EOS is accepted.
    image.on_data(&frames[1], ms(4)).unwrap();
    image.on_data(&heartbeat_at(100, 192, true), ms(4)).unwrap();
    drain(&mut image);
    image.on_tick(ms(5));
    assert!(matches!(image.state(), ImageState::Draining { .. }));
    assert!(!image.ended_with_data_missing());
}

#[test]
fn end_of_stream_behind_what_was_received_is_ignored() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[1], ms(1)).unwrap();
    image.on_data(&heartbeat_at(100, 64, true), ms(2)).unwrap();
    drain(&mut image);
    image.on_tick(ms(3));
    assert_eq!(image.state(), ImageState::Active);
    assert_eq!(image.counters().eos_rejected, 1);
}

#[test]
fn data_past_an_accepted_end_of_stream_revives_a_draining_image() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    // Forged EOS exactly at the live position: indistinguishable from a real one, accepted.
    image.on_data(&heartbeat_at(100, 64, true), ms(2)).unwrap();
    drain(&mut image);
    image.on_tick(ms(3));
    assert!(matches!(image.state(), ImageState::Draining { .. }));
    // The publication goes on sending: that end of stream was not its own.
    image.on_data(&frames[1], ms(4)).unwrap();
    assert_eq!(image.state(), ImageState::Active);
    assert_eq!(image.counters().eos_rejected, 1);
    image.on_data(&frames[2], ms(4)).unwrap();
    assert_eq!(drain(&mut image), vec![1, 2]);
    let sent = transmit(&mut image, ms(4));
    assert!(matches!(&sent[..], [ControlFrame::StatusMessage(m)] if !m.is_end_of_stream()), "{sent:?}");
}

#[test]
fn a_plain_heartbeat_at_the_end_position_revives_a_draining_image() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&heartbeat_at(100, 64, true), ms(2)).unwrap();
    drain(&mut image);
    image.on_tick(ms(3));
    assert!(matches!(image.state(), ImageState::Draining { .. }));
    // A publication that ended only sends EOS heartbeats; this one has not ended.
    image.on_data(&heartbeat_at(100, 64, false), ms(4)).unwrap();
    assert_eq!(image.state(), ImageState::Active);
}

#[test]
fn an_image_drains_on_end_of_stream_only_with_nothing_seen_beyond_it() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&heartbeat_at(100, 64, true), ms(2)).unwrap();
    // A second (forged) EOS further ahead: rejected, but it shows a position past the end.
    image.on_data(&heartbeat_at(100, 1024, true), ms(2)).unwrap();
    drain(&mut image);
    image.on_tick(ms(3));
    assert_eq!(image.state(), ImageState::Active);
}

#[test]
fn a_closed_consumer_does_not_revive_its_image() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.close(ms(2));
    assert_eq!(image.on_data(&frames[1], ms(3)), Err(DataRejection::Inactive));
    assert_eq!(image.counters().inactive, 1);
    assert!(matches!(image.state(), ImageState::Draining { .. }));
}

#[test]
fn an_image_timing_out_with_a_gap_ended_with_data_missing() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[2], ms(1)).unwrap();
    image.on_tick(ms(20_000));
    assert!(matches!(image.state(), ImageState::Draining { .. }));
    assert!(image.ended_with_data_missing());
}

#[test]
fn skips_a_gap_the_publication_can_no_longer_resend() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[2], ms(1)).unwrap();
    drain(&mut image);
    transmit(&mut image, ms(1));
    // The publication has moved on (its frames arrive beyond the window) and never answers
    // the NAKs: once the gap has stood for the give-up time, it is skipped.
    let mut far = frames[3].clone();
    far[8..12].copy_from_slice(&(TERM as i32 - 64).to_le_bytes());
    // The gap was first seen (and NAK-tracked) at 1 ms.
    for step in 2..(1 + defaults::UNRECOVERABLE_GAP_TIMEOUT.as_millis() as u64) {
        let _ = image.on_data(&far, ms(step));
        let sent = transmit(&mut image, ms(step));
        assert_eq!(image.counters().unrecoverable_gaps, 0, "{sent:?}");
    }
    let end = 1 + defaults::UNRECOVERABLE_GAP_TIMEOUT.as_millis() as u64;
    let _ = image.on_data(&far, ms(end));
    let sent = transmit(&mut image, ms(end));
    assert!(!sent.iter().any(|f| matches!(f, ControlFrame::Nak(_))), "{sent:?}");
    assert_eq!(image.counters().unrecoverable_gaps, 1);
    assert_eq!(image.counters().unrecoverable_bytes, 64);
    assert_eq!(drain(&mut image), vec![2], "the frame after the gap is still delivered");
    assert!(image.ended_with_data_missing() || image.state() == ImageState::Active);
}

#[test]
fn a_gap_without_evidence_that_the_publication_moved_on_is_naked_for_ever() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[2], ms(1)).unwrap();
    transmit(&mut image, ms(1));
    let sent = transmit(&mut image, ms(5_000));
    assert!(sent.iter().any(|f| matches!(f, ControlFrame::Nak(_))), "{sent:?}");
    assert_eq!(image.counters().unrecoverable_gaps, 0);
}

#[test]
fn keeps_naking_a_gap_the_publication_can_still_resend() {
    let mut image = image();
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[2], ms(1)).unwrap();
    transmit(&mut image, ms(1));
    let sent = transmit(&mut image, ms(500));
    assert!(sent.iter().any(|f| matches!(f, ControlFrame::Nak(_))));
    assert_eq!(image.counters().unrecoverable_gaps, 0);
}

#[test]
fn an_unreliable_image_skips_gaps_instead_of_naking() {
    let config = ImageConfig { reliable: false, ..ImageConfig::new(identity(), 0, 1) };
    let mut image = new_image(config);
    image.add_consumer(1);
    let frames = frames();
    image.on_data(&frames[0], ms(1)).unwrap();
    image.on_data(&frames[2], ms(1)).unwrap();
    transmit(&mut image, ms(1));
    let sent = transmit(&mut image, ms(2));
    assert!(!sent.iter().any(|f| matches!(f, ControlFrame::Nak(_))), "{sent:?}");
    assert_eq!(drain(&mut image), vec![0, 2]);
    assert_eq!(image.counters().unrecoverable_gaps, 1);
}

#[test]
fn an_image_without_traffic_times_out() {
    let mut image = image();
    image.on_tick(ms(9_999));
    assert_eq!(image.state(), ImageState::Active);
    image.on_tick(ms(10_000));
    assert!(matches!(image.state(), ImageState::Draining { .. }));
}
