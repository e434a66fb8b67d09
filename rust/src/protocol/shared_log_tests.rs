//! The protocol state machines over shared-memory logs (`shm::log_buffer::LogBuffer`), as the
//! media driver runs them: a publisher appends with the shared term appender, the publication
//! sends what is committed, the image writes received frames into its shared log and a
//! subscriber reads that log and reports its position, as a separate process would.

use super::*;
use crate::flow_control::{build, FlowControlDefaults};
use crate::logbuffer::{LogBuffer as HeapLog, ReceiverLog, StreamIdentity};
use crate::shm::log_buffer::{LogBuffer as SharedLog, LogParams, Offer};
use crate::time::Instant;
use crate::wire::{parse_control, ControlFrame};

const TERM: u32 = 64 * 1024;

fn params(session_id: i32) -> LogParams {
    LogParams {
        term_length: TERM,
        mtu: 1408,
        page_size: 4096,
        initial_term_id: 5,
        session_id,
        stream_id: 10,
        correlation_id: 1,
    }
}

fn identity() -> StreamIdentity {
    StreamIdentity { session_id: 9, stream_id: 10, initial_term_id: 5, term_length: TERM }
}

fn ms(value: u64) -> Instant {
    Instant::from_nanos(value * 1_000_000)
}

/// Runs publisher → publication → (lossy link) → image → subscriber for `messages` messages;
/// `drop(n)` says whether the n-th data datagram is lost on its first transmission. Returns
/// the messages the subscriber read, in order, and the image's counters.
fn transfer(messages: usize, drop: impl Fn(usize) -> bool) -> (Vec<u32>, ImageCounters, u64) {
    let publication_log = SharedLog::anonymous(&params(9)).unwrap();
    let image_log = SharedLog::anonymous(&params(9)).unwrap();
    let config = PublicationConfig::new(identity(), 0);
    let flow = build(None, false, &FlowControlDefaults::default());
    let mut publication = NetworkPublication::with_log(config, publication_log.clone(), flow, ms(0));
    let mut image = Image::with_log(ImageConfig::new(identity(), 0, 77), image_log.clone(), ms(0));
    image.add_consumer(1);
    let mut next = 0usize;
    let mut datagrams = 0usize;
    let mut received = Vec::new();
    let mut subscriber_position = 0i64;
    let mut publication_clean = 0i64;
    let mut scratch = Vec::new();
    let mut out = vec![0u8; 2048];
    for step in 0..200_000u64 {
        let now = ms(step);
        while next < messages {
            let payload = (next as u32).to_le_bytes().repeat(25);
            match publication_log.offer(&payload, 0, publication.publisher_limit()).unwrap() {
                Offer::Appended(_) => next += 1,
                Offer::AdminAction => continue,
                Offer::BackPressured | Offer::MaxPositionExceeded => break,
            }
        }
        publication.on_tail(publication_log.tail_position().unwrap());
        for _ in 0..64 {
            let Some(length) = publication.poll_transmit(now, &mut out) else { break };
            let datagram = &out[..length];
            let is_data = datagram.len() > 32 && datagram[6] == 1;
            if is_data {
                datagrams += 1;
                if drop(datagrams) {
                    continue;
                }
            }
            if crate::wire::FrameHeader::parse(datagram).unwrap().frame_type == crate::wire::FrameType::Setup {
                continue;
            }
            let _ = image.on_data(datagram, now);
        }
        publication_clean = publication_clean.max(0);
        publication_log.clean_to(&mut publication_clean, publication.sender_position() - i64::from(TERM)).unwrap();
        subscriber_position = image_log
            .read(subscriber_position, 100, &mut scratch, |_, payload| {
                received.push(u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]))
            })
            .unwrap();
        image.set_consumer_position(1, subscriber_position);
        image.on_tick(now);
        while let Some(length) = image.poll_transmit(now, &mut out) {
            match parse_control(&out[..length]).unwrap() {
                Some(ControlFrame::StatusMessage(sm)) => publication.on_status_message(&sm, now),
                Some(ControlFrame::Nak(nak)) => publication.on_nak(&nak, now),
                other => panic!("unexpected {other:?}"),
            }
        }
        publication.on_idle(now);
        if received.len() == messages {
            break;
        }
    }
    let sent_again = publication.counters().retransmits_sent;
    (received, image.counters(), sent_again)
}

#[test]
fn messages_cross_shared_logs_in_order_over_several_terms() {
    let (received, counters, _) = transfer(3_000, |_| false);
    assert_eq!(received, (0..3_000).collect::<Vec<u32>>());
    assert_eq!(counters.loss_gaps, 0);
}

#[test]
fn lost_datagrams_are_repaired_into_the_shared_image_log() {
    let (received, counters, retransmits) = transfer(3_000, |n| n % 7 == 3);
    assert_eq!(received, (0..3_000).collect::<Vec<u32>>());
    assert!(counters.loss_gaps > 0, "{counters:?}");
    assert!(counters.naks_sent > 0 && retransmits > 0, "{counters:?}");
    assert_eq!(counters.unrecoverable_gaps, 0);
}

#[test]
fn a_subscriber_that_stops_reading_stops_the_window() {
    // The subscriber never reports progress: the image refuses data beyond half a term of its
    // position (an overrun), so the shared log is never overwritten under a reader.
    let image_log = SharedLog::anonymous(&params(9)).unwrap();
    let mut image = Image::with_log(ImageConfig::new(identity(), 0, 77), image_log, ms(0));
    image.add_consumer(1);
    let mut heap = HeapLog::new(identity());
    let payload = [7u8; 1000];
    let mut tail = 0;
    while tail < i64::from(TERM) {
        let crate::logbuffer::AppendOutcome::Appended(next) = heap.append(tail, &payload, 1408, 0) else { break };
        {
            let offset = identity().term_offset(tail) as usize;
            let length = (next - tail) as usize;
            let datagram = heap.term(tail)[offset..offset + length].to_vec();
            let result = image.on_data(&datagram, ms(1));
            if next > i64::from(TERM / 2) {
                assert_eq!(result, Err(DataRejection::Overrun));
            } else {
                assert_eq!(result, Ok(()));
            }
            tail = next;
        }
    }
    assert!(tail > i64::from(TERM / 2), "the test sent beyond the window");
    image.set_consumer_position(1, i64::from(TERM) * 5);
    assert!(image.min_consumer() <= image.rebuild_position(), "a position beyond the rebuild is clamped");
}

#[test]
fn heap_and_shared_image_logs_agree_on_gaps_and_completion() {
    let mut heap = HeapLog::new(identity());
    let mut shared = SharedLog::anonymous(&params(9)).unwrap();
    let mut source = HeapLog::new(identity());
    let mut tail = 0;
    let mut frames = Vec::new();
    for index in 0..40u8 {
        if let crate::logbuffer::AppendOutcome::Appended(next) = source.append(tail, &[index; 100], 1408, 0) {
            frames.push((tail, source.term(tail)[tail as usize..next as usize].to_vec()));
            tail = next;
        }
    }
    for (index, (position, frame)) in frames.iter().enumerate() {
        if index % 5 == 2 {
            continue;
        }
        ReceiverLog::insert(&mut heap, *position, frame);
        ReceiverLog::insert(&mut shared, *position, frame);
        assert_eq!(heap.scan_complete(0, tail), ReceiverLog::scan_complete(&shared, 0, tail));
        assert_eq!(heap.find_gap(0, tail), ReceiverLog::find_gap(&shared, 0, tail));
    }
    let (gap, length) = ReceiverLog::find_gap(&shared, 0, tail).unwrap();
    ReceiverLog::fill_gap(&mut shared, gap, length);
    heap.fill_gap(gap, length);
    assert_eq!(heap.scan_complete(0, tail), ReceiverLog::scan_complete(&shared, 0, tail));
    ReceiverLog::clean_term(&mut shared, 0);
    assert_eq!(ReceiverLog::scan_complete(&shared, 0, tail), 0);
}
