//! The unit tests of `affinity_core::protocol::publication`, over the shared-memory log.

use std::time::Duration;

use crate::flow_control::FlowControl;
use crate::flow_control::{build, FlowControlDefaults};
use crate::logbuffer::StreamIdentity;
use crate::protocol::defaults;
use crate::protocol::publication::*;
use crate::shm::log_buffer::{LogBuffer, LogParams, LogStart};
use crate::time::Instant;
use crate::wire::*;
use crate::wire::{parse_control, ControlFrame};

const TERM: u32 = 64 * 1024;

/// A publication over a log in an anonymous mapping (the media driver's log type).
fn with_flow_control(config: PublicationConfig, flow_control: Box<dyn FlowControl>) -> NetworkPublication<LogBuffer> {
    let params = LogParams::for_stream(&config.identity, config.mtu);
    let log = LogBuffer::anonymous_at(&params, LogStart::at(&config.identity, config.initial_position)).unwrap();
    NetworkPublication::with_log(config, log, flow_control, Instant::ZERO)
}

fn ms(value: u64) -> Instant {
    Instant::from_nanos(value * 1_000_000)
}

fn publication() -> NetworkPublication<LogBuffer> {
    let identity = StreamIdentity { session_id: 9, stream_id: 10, initial_term_id: 3, term_length: TERM };
    let config = PublicationConfig { linger: Duration::from_millis(500), ..PublicationConfig::new(identity, 0) };
    with_flow_control(config, build(None, false, &FlowControlDefaults::default()))
}

fn status(position: i32, window: i32, flags: u8) -> StatusMessage {
    StatusMessage {
        flags,
        session_id: 9,
        stream_id: 10,
        consumption_term_id: 3,
        consumption_term_offset: position,
        receiver_window: window,
        receiver_id: 77,
        group_tag: None,
    }
}

fn frame_type(datagram: &[u8]) -> FrameType {
    crate::wire::FrameHeader::parse(datagram).unwrap().frame_type
}

#[test]
fn sends_setup_every_100ms_until_the_first_status_message() {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    let length = publication.poll_transmit(ms(0), &mut out).unwrap();
    assert_eq!(frame_type(&out[..length]), FrameType::Setup);
    assert!(publication.poll_transmit(ms(50), &mut out).is_none());
    assert!(publication.poll_transmit(ms(100), &mut out).is_some());
    publication.on_status_message(&status(0, 65536, 0), ms(120));
    publication.on_idle(ms(120));
    assert!(publication.is_connected());
    // After the first SM: no more SETUPs, a heartbeat once idle for 100 ms.
    let length = publication.poll_transmit(ms(230), &mut out).unwrap();
    assert!(DataHeader::is_heartbeat_datagram(&out[..length]));
}

#[test]
fn never_sends_beyond_the_receiver_window() {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, 4096, 0), ms(1));
    publication.on_idle(ms(1));
    for _ in 0..200 {
        publication.offer(&[7u8; 100], 0).unwrap();
    }
    let mut sent = 0;
    while let Some(length) = publication.poll_transmit(ms(2), &mut out) {
        sent += length;
    }
    assert!(sent <= 4096, "sent {sent}");
    // Whole 160-byte frames only: 25 of them fit under the 4096-byte limit.
    assert_eq!(publication.sender_position(), 25 * 160);
    publication.on_status_message(&status(4096, 4096, 0), ms(3));
    assert!(publication.poll_transmit(ms(3), &mut out).is_some());
}

#[test]
fn back_pressures_when_the_publication_window_is_full() {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, 4096, 0), ms(1));
    publication.on_idle(ms(1));
    let mut accepted = 0;
    let outcome = loop {
        match publication.offer(&[1u8; 1000], 0) {
            Ok(_) => accepted += 1,
            Err(error) => break error,
        }
    };
    assert_eq!(outcome, OfferError::BackPressured);
    // 1000-byte messages take 1056 bytes of log; the window is half a term.
    assert_eq!(accepted, (TERM as usize / 2) / 1056);
}

#[test]
fn a_message_moved_to_the_next_term_must_still_fit_the_window() {
    // 1000-byte messages take 1056 bytes: 62 of them end 64 bytes before the end of the
    // term, the 63rd would end at 66528 and fits the window (66550) but not the term. The
    // rest of the term is padded and, moved to the next term, the message would end at
    // 66592, past the window: back-pressured, as the log's own check (which lets a message
    // start below the limit end past it) would not say.
    let identity = StreamIdentity { session_id: 9, stream_id: 10, initial_term_id: 3, term_length: TERM };
    let config = PublicationConfig { publication_window: 63 * 1056 + 22, ..PublicationConfig::new(identity, 0) };
    let mut publication = with_flow_control(config, build(None, false, &FlowControlDefaults::default()));
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, 4096, 0), ms(1));
    publication.on_idle(ms(1));
    assert_eq!(publication.publisher_limit(), 66550);
    for _ in 0..62 {
        publication.offer(&[1u8; 1000], 0).unwrap();
    }
    assert_eq!(publication.tail_position(), 62 * 1056);
    assert_eq!(publication.offer(&[1u8; 1000], 0), Err(OfferError::BackPressured));
    assert_eq!(publication.tail_position(), i64::from(TERM), "the padding is part of the stream");
    assert_eq!(publication.log().tail_position().unwrap(), i64::from(TERM), "nothing appended past the window");
}

#[test]
fn resends_a_naked_range_once_within_the_linger() {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, 65536, 0), ms(1));
    publication.on_idle(ms(1));
    publication.offer(&[5u8; 200], 0).unwrap();
    publication.offer(&[6u8; 200], 0).unwrap();
    while publication.poll_transmit(ms(2), &mut out).is_some() {}
    let nak = Nak { session_id: 9, stream_id: 10, term_id: 3, term_offset: 0, length: 256 };
    publication.on_nak(&nak, ms(3));
    let length = publication.poll_transmit(ms(3), &mut out).unwrap();
    assert_eq!(length, 256);
    assert_eq!(&out[32..232], &[5u8; 200][..]);
    publication.on_nak(&nak, ms(5));
    assert!(publication.poll_transmit(ms(5), &mut out).is_none(), "a duplicate NAK within the linger resent");
    assert_eq!(publication.counters().retransmits_sent, 1);
}

/// A connected publication that has sent `messages` 200-byte messages (256 bytes of log each).
fn sent(messages: usize) -> NetworkPublication<LogBuffer> {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, 65536, 0), ms(1));
    publication.on_idle(ms(1));
    for _ in 0..messages {
        publication.offer(&[5u8; 200], 0).unwrap();
    }
    while publication.poll_transmit(ms(2), &mut out).is_some() {}
    publication
}

fn resent_bytes(publication: &mut NetworkPublication<LogBuffer>, now: Instant) -> usize {
    let mut out = [0u8; 2048];
    let mut total = 0;
    for _ in 0..10_000 {
        match publication.poll_transmit(now, &mut out) {
            Some(length) if !DataHeader::is_heartbeat_datagram(&out[..length]) => total += length,
            Some(_) => {}
            None => break,
        }
    }
    total
}

#[test]
fn alternating_naks_for_two_ranges_resend_each_once_within_the_linger() {
    let mut publication = sent(60);
    let first = Nak { session_id: 9, stream_id: 10, term_id: 3, term_offset: 0, length: 256 };
    let second = Nak { term_offset: 4096, ..first };
    let mut resent = 0;
    for index in 0..160 {
        publication.on_nak(if index % 2 == 0 { &first } else { &second }, ms(3));
        resent += resent_bytes(&mut publication, ms(3));
    }
    assert_eq!(resent, 512, "one resend per range per linger");
    // After the linger, the same NAK is served again.
    publication.on_idle(ms(20));
    publication.on_nak(&first, ms(20));
    assert_eq!(resent_bytes(&mut publication, ms(20)), 256);
    // The same with NAKs of the largest length: each covers the rest of what was sent.
    publication.on_idle(ms(50));
    let (whole, tail) = (Nak { length: i32::MAX, ..first }, Nak { length: i32::MAX, ..second });
    let mut resent = 0;
    for index in 0..160 {
        publication.on_nak(if index % 2 == 0 { &whole } else { &tail }, ms(50));
        resent += resent_bytes(&mut publication, ms(50));
    }
    assert_eq!(resent as i64, publication.sender_position(), "one pass over [0, 4096), one over [4096, end)");
}

#[test]
fn a_nak_overlapping_a_lingering_range_resends_nothing_more() {
    let mut publication = sent(60);
    let nak = Nak { session_id: 9, stream_id: 10, term_id: 3, term_offset: 256, length: 1024 };
    publication.on_nak(&nak, ms(3));
    assert_eq!(resent_bytes(&mut publication, ms(3)), 1024);
    publication.on_nak(&Nak { term_offset: 0, length: 512, ..nak }, ms(4));
    assert_eq!(resent_bytes(&mut publication, ms(4)), 0);
}

#[test]
fn a_huge_nak_resends_at_most_what_was_sent_up_to_the_end_of_the_term() {
    let mut publication = sent(60);
    assert_eq!(publication.sender_position(), 60 * 256);
    let nak = Nak { session_id: 9, stream_id: 10, term_id: 3, term_offset: 58 * 256, length: i32::MAX };
    publication.on_nak(&nak, ms(3));
    assert_eq!(resent_bytes(&mut publication, ms(3)), 512);
}

#[test]
fn a_status_message_window_is_clamped_to_a_quarter_term() {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, i32::MAX, 0), ms(1));
    assert_eq!(publication.sender_limit(), i64::from(TERM / 4));
    assert_eq!(publication.status().live_receivers[0].window, (TERM / 4) as i32);
}

#[test]
fn a_unicast_publication_keeps_one_receiver() {
    let mut publication = publication();
    for id in 0..20_000 {
        publication.on_status_message(&StatusMessage { receiver_id: id, ..status(0, 4096, 0) }, ms(1));
    }
    assert_eq!(publication.status().live_receivers.len(), 1);
}

#[test]
fn a_group_publication_bounds_its_receivers_and_counts_refusals() {
    let identity = StreamIdentity { session_id: 9, stream_id: 10, initial_term_id: 3, term_length: TERM };
    let config = PublicationConfig { is_group: true, ..PublicationConfig::new(identity, 0) };
    let spec = crate::flow_control::FlowControlSpec::parse("min").unwrap();
    let mut publication = with_flow_control(config, build(Some(&spec), true, &FlowControlDefaults::default()));
    for id in 0..20_000 {
        publication.on_status_message(&StatusMessage { receiver_id: id, ..status(0, 4096, 0) }, ms(1));
    }
    let status = publication.status();
    let max = defaults::MAX_RECEIVERS_PER_PUBLICATION;
    assert_eq!(status.live_receivers.len(), max);
    assert!(status.group_receivers.len() <= max);
    assert_eq!(status.counters.receivers_refused, (20_000 - max) as u64);
}

#[test]
fn ignores_naks_outside_the_sent_range() {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, 65536, 0), ms(1));
    publication.on_nak(&Nak { session_id: 9, stream_id: 10, term_id: 3, term_offset: 4096, length: 64 }, ms(2));
    publication.on_nak(&Nak { session_id: 9, stream_id: 10, term_id: 3, term_offset: -32, length: 64 }, ms(2));
    assert_eq!(publication.counters().naks_ignored, 2);
    assert!(publication.poll_transmit(ms(2), &mut out).is_none());
}

#[test]
fn closing_drains_then_signals_end_of_stream_then_lingers() {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, 65536, 0), ms(1));
    publication.on_idle(ms(1));
    publication.offer(b"bye", 0).unwrap();
    publication.close();
    assert_eq!(publication.offer(b"more", 0), Err(OfferError::Closed));
    let length = publication.poll_transmit(ms(2), &mut out).unwrap();
    assert_eq!(frame_type(&out[..length]), FrameType::Data);
    publication.on_idle(ms(2));
    let length = publication.poll_transmit(ms(200), &mut out).unwrap();
    let header = DataHeader::parse(&out[..length]).unwrap();
    assert!(DataHeader::is_heartbeat_datagram(&out[..length]) && header.is_end_of_stream());
    publication.on_idle(ms(701));
    publication.on_idle(ms(702));
    assert!(publication.is_done());
}

#[test]
fn answers_rtt_requests_and_send_setup_status_messages() {
    let mut publication = publication();
    let mut out = [0u8; 2048];
    publication.poll_transmit(ms(0), &mut out);
    publication.on_status_message(&status(0, 65536, 0), ms(1));
    let request = RttMeasurement {
        flags: flags::RTTM_REPLY,
        session_id: 9,
        stream_id: 10,
        echo_timestamp_ns: 123,
        reception_delta_ns: 0,
        receiver_id: 77,
    };
    let reply = publication.on_rtt_measurement(&request).unwrap();
    assert_eq!((reply.flags, reply.echo_timestamp_ns, reply.receiver_id), (0, 123, 77));
    publication.on_status_message(&status(0, 0, flags::SM_SEND_SETUP), ms(300));
    let length = publication.poll_transmit(ms(300), &mut out).unwrap();
    assert_eq!(frame_type(&out[..length]), FrameType::Setup);
    assert!(matches!(parse_control(&out[..length]), Ok(Some(ControlFrame::Setup(_)))));
}

/// The datagram a transmit named: written bytes, or the log's bytes where it named them.
fn transmitted(publication: &NetworkPublication<LogBuffer>, transmit: Transmit, out: &[u8]) -> Vec<u8> {
    match transmit {
        Transmit::Written(length) => out[..length].to_vec(),
        Transmit::Log { position, length } => {
            let address = publication.log().address_of(position, length).unwrap();
            // SAFETY: the range lies in the log (checked), which nothing writes meanwhile.
            unsafe { std::slice::from_raw_parts(address, length) }.to_vec()
        }
    }
}

#[test]
fn datagrams_named_in_the_log_are_the_datagrams_copied_out_of_it() {
    // Two publications fed the same messages (through term ends, padding and NAKs): what one
    // copies out with `poll_transmit` is what the other names in its log, byte for byte.
    let (mut copying, mut naming) = (publication(), publication());
    let mut out = [0u8; 2048];
    let (mut copied, mut named) = (Vec::new(), Vec::new());
    let sizes = [0usize, 1, 100, 1000, 1376, 3000];
    let mut logged = 0;
    for round in 0..400u64 {
        let now = ms(1 + round);
        let position = copying.sender_position();
        assert_eq!(position, naming.sender_position());
        let (term, offset) = ((position / i64::from(TERM)) as i32, (position % i64::from(TERM)) as i32);
        let message = StatusMessage { consumption_term_id: 3 + term, ..status(offset, 32 * 1024, 0) };
        for publication in [&mut copying, &mut naming] {
            publication.on_status_message(&message, now);
            publication.on_idle(now);
        }
        let payload = vec![round as u8; sizes[round as usize % sizes.len()]];
        assert_eq!(format!("{:?}", copying.offer(&payload, 0)), format!("{:?}", naming.offer(&payload, 0)));
        for resend in [false, true] {
            if resend {
                if round % 50 != 49 || naming.sender_position() == position {
                    break;
                }
                // Resend the frames this round sent.
                let nak = Nak { session_id: 9, stream_id: 10, term_id: 3 + term, term_offset: offset, length: 256 };
                copying.on_nak(&nak, now);
                naming.on_nak(&nak, now);
            }
            while let Some(length) = copying.poll_transmit(now, &mut out) {
                copied.push(out[..length].to_vec());
            }
            while let Some(transmit) = naming.poll_transmit_in_place(now, &mut out) {
                logged += usize::from(matches!(transmit, Transmit::Log { .. }));
                named.push(transmitted(&naming, transmit, &out));
            }
        }
    }
    assert_eq!(copied, named);
    assert!(logged > 300, "{logged} datagrams named in the log");
    assert!(naming.sender_position() > 3 * i64::from(TERM), "the stream crossed terms");
    assert!(named.iter().any(|datagram| frame_type(datagram) == FrameType::Pad), "a term end was padded");
    assert!(naming.counters().retransmits_sent > 0);
    assert_eq!(naming.counters(), copying.counters());
}
