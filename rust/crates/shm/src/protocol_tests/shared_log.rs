//! The protocol state machines over shared-memory logs (`shm::log_buffer::LogBuffer`), as the
//! media driver runs them: a publisher appends with the shared term appender, the publication
//! sends what is committed, the image writes received frames into its shared log and a
//! subscriber reads that log and reports its position, as a separate process would. And the
//! log's rebuilder and gap scanner (the one implementation, reached through `ReceiverLog`).

use crate::flow_control::{build, FlowControlDefaults};
use crate::logbuffer::Offer;
use crate::logbuffer::{ReceiverLog, StreamIdentity, CLEAN_STEP};
use crate::protocol::*;
use crate::shm::log_buffer::{LogBuffer as SharedLog, LogParams};
use crate::time::Instant;
use crate::wire::{parse_control, ControlFrame, DataHeader};

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

/// Every datagram `publication` has due, into `image` (SETUPs skipped: the image exists).
fn carry_data(
    publication: &mut NetworkPublication<SharedLog>,
    image: &mut Image<SharedLog>,
    now: Instant,
    out: &mut [u8],
) {
    while let Some(length) = publication.poll_transmit(now, out) {
        let datagram = &out[..length];
        if crate::wire::FrameHeader::parse(datagram).unwrap().frame_type != crate::wire::FrameType::Setup {
            let _ = image.on_data(datagram, now);
        }
    }
}

/// The image's periodic work and its status messages, back to `publication`; then the
/// publication's own periodic work.
fn carry_status(
    publication: &mut NetworkPublication<SharedLog>,
    image: &mut Image<SharedLog>,
    now: Instant,
    out: &mut [u8],
) {
    image.on_tick(now);
    while let Some(length) = image.poll_transmit(now, out) {
        if let Some(ControlFrame::StatusMessage(sm)) = parse_control(&out[..length]).unwrap() {
            publication.on_status_message(&sm, now);
        }
    }
    publication.on_idle(now);
}

#[test]
fn a_publication_closed_right_after_an_offer_past_its_limit_sends_every_message() {
    // An offer that starts below the publisher limit may end past it (Aeron's rule). The
    // publisher fills the window, its last message crossing the limit (half a term is not a whole
    // number of 1,056-byte frames), and closes at once, as a process that exits does: the
    // publication sends every message it accepted, then ends the stream.
    let publication_log = SharedLog::anonymous(&params(9)).unwrap();
    let image_log = SharedLog::anonymous(&params(9)).unwrap();
    let flow = build(None, false, &FlowControlDefaults::default());
    let mut publication =
        NetworkPublication::with_log(PublicationConfig::new(identity(), 0), publication_log.clone(), flow, ms(0));
    let mut image = Image::with_log(ImageConfig::new(identity(), 0, 77), image_log.clone(), ms(0));
    image.add_consumer(1);
    let payload = [7u8; 1000];
    let (mut offered, mut received, mut subscriber_position) = (0usize, 0usize, 0i64);
    let mut limit_at_close = None;
    let (mut scratch, mut out) = (Vec::new(), vec![0u8; 2048]);
    for step in 0..20_000u64 {
        let now = ms(step);
        if limit_at_close.is_none() && publication.is_connected() {
            let limit = publication.publisher_limit();
            while let Offer::Appended(_) = publication_log.offer(&payload, 0, limit).unwrap() {
                offered += 1;
            }
            publication.on_tail(publication_log.tail_position().unwrap());
            publication.close();
            limit_at_close = Some(limit);
        }
        carry_data(&mut publication, &mut image, now, &mut out);
        subscriber_position = image_log.read(subscriber_position, 100, &mut scratch, |_, _| received += 1).unwrap();
        image.set_consumer_position(1, subscriber_position);
        carry_status(&mut publication, &mut image, now, &mut out);
        if publication.is_done() {
            break;
        }
    }
    let limit = limit_at_close.expect("the publication connected");
    let tail = publication_log.tail_position().unwrap();
    assert!(tail > limit && tail % 1056 != limit % 1056, "the last offer crossed the limit mid-frame");
    assert_eq!(received, offered, "every accepted message was received");
    assert_eq!(publication.sender_position(), tail);
    assert!(publication.is_done(), "the publication drained, lingered and ended");
}

#[test]
fn a_forged_tail_moves_the_publication_no_further_than_one_message_past_its_window() {
    // The tail is written by clients: one far ahead is taken only up to the publisher limit
    // (sender position + half a term) plus the longest message (a term / 8 of 1,376-byte
    // payloads in 1,408-byte frames), and a tail that moves back is ignored.
    let log = SharedLog::anonymous(&params(9)).unwrap();
    let flow = build(None, false, &FlowControlDefaults::default());
    let mut publication = NetworkPublication::with_log(PublicationConfig::new(identity(), 0), log, flow, ms(0));
    publication.on_tail(i64::MAX / 4);
    let longest = crate::logbuffer::position::fragmented_length(TERM as usize / 8, 1408 - 32) as i64;
    assert_eq!(longest, 8192 + 6 * 32);
    assert_eq!(publication.tail_position(), i64::from(TERM / 2) + longest);
    publication.on_tail(64);
    assert_eq!(publication.tail_position(), i64::from(TERM / 2) + longest);
}

#[test]
fn the_sender_pads_over_a_claim_no_writer_commits_but_never_frames_flow_control_holds_back() {
    // 10 ms unblock timeout. First the subscriber reads nothing for 2 s: the sender stands at
    // the receiver's window with committed frames beyond, and pads nothing. Then it reads
    // everything; then a writer claims 1,056 bytes and never commits, and one message follows:
    // after the timeout the claim is padded over, counted, and the message arrives.
    let publication_log = SharedLog::anonymous(&params(9)).unwrap();
    let image_log = SharedLog::anonymous(&params(9)).unwrap();
    let flow = build(None, false, &FlowControlDefaults::default());
    let config = PublicationConfig {
        unblock_timeout: Some(std::time::Duration::from_millis(10)),
        ..PublicationConfig::new(identity(), 0)
    };
    let mut publication = NetworkPublication::with_log(config, publication_log.clone(), flow, ms(0));
    let mut image = Image::with_log(ImageConfig::new(identity(), 0, 77), image_log.clone(), ms(0));
    image.add_consumer(1);
    let received = std::cell::RefCell::new(Vec::new());
    let (mut subscriber_position, mut offered) = (0i64, 0usize);
    let (mut scratch, mut out) = (Vec::new(), vec![0u8; 2048]);
    let mut step = 0u64;
    let mut run = |steps: u64, reading: bool, offer: &mut dyn FnMut(i64) -> usize| {
        for _ in 0..steps {
            step += 1;
            let now = ms(step);
            if publication.is_connected() {
                offered += offer(publication.publisher_limit());
            }
            publication.on_tail(publication_log.tail_position().unwrap());
            carry_data(&mut publication, &mut image, now, &mut out);
            if reading {
                subscriber_position = image_log
                    .read(subscriber_position, 100, &mut scratch, |_, payload| received.borrow_mut().push(payload[0]))
                    .unwrap();
            }
            image.set_consumer_position(1, subscriber_position);
            carry_status(&mut publication, &mut image, now, &mut out);
        }
        (offered, publication.counters().unblocked_claims, publication.sender_position())
    };
    let mut fill = |limit: i64| {
        let mut taken = 0;
        while let Offer::Appended(_) = publication_log.offer(&[1u8; 1000], 0, limit).unwrap() {
            taken += 1;
        }
        taken
    };
    let (held, unblocked, sender_position) = run(2_000, false, &mut fill);
    assert!(sender_position < publication_log.tail_position().unwrap(), "flow control held the sender");
    assert_eq!(unblocked, 0, "committed frames are never padded over");
    let (_, unblocked, _) = run(200, true, &mut |_| 0);
    assert_eq!((received.borrow().len(), unblocked), (held, 0));
    let dead = publication_log.tail_position().unwrap();
    let partition =
        crate::logbuffer::position::partition_index(i64::from(publication_log.active_term_count().unwrap()));
    let tail_counter = crate::shm::log_buffer::meta::TERM_TAIL_COUNTERS + 8 * partition;
    publication_log.metadata().get_and_add_i64(tail_counter, 1056).unwrap();
    let mut once = Some(());
    let (_, unblocked, sender_position) = run(200, true, &mut |limit| {
        once.take().map_or(0, |()| match publication_log.offer(&[2u8; 100], 0, limit).unwrap() {
            Offer::Appended(_) => 1,
            other => panic!("{other:?}"),
        })
    });
    assert_eq!(unblocked, 1);
    assert_eq!(publication.counters().unblocked_bytes, 1056);
    assert_eq!(sender_position, dead + 1056 + 160);
    assert_eq!(received.borrow().len(), held + 1);
    assert_eq!(received.borrow().last(), Some(&2));
}

#[test]
fn a_subscriber_that_stops_reading_stops_the_window() {
    // The subscriber never reports progress: the image refuses data beyond half a term of its
    // position (an overrun), so the shared log is never overwritten under a reader.
    let image_log = SharedLog::anonymous(&params(9)).unwrap();
    let mut image = Image::with_log(ImageConfig::new(identity(), 0, 77), image_log, ms(0));
    image.add_consumer(1);
    let source = SharedLog::anonymous(&params(9)).unwrap();
    let payload = [7u8; 1000];
    let mut tail = 0;
    while tail < i64::from(TERM) {
        let Offer::Appended(next) = source.offer(&payload, 0, i64::MAX).unwrap() else { break };
        {
            let offset = identity().term_offset(tail) as usize;
            let length = (next - tail) as usize;
            let mut datagram = Vec::new();
            source.term(0).unwrap().read_into(offset, length, &mut datagram).unwrap();
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

/// The image's log, recording every range the image asks to be zeroed.
struct CleanRecordingLog {
    log: SharedLog,
    cleaned: std::rc::Rc<std::cell::RefCell<Vec<(i64, i64)>>>,
}

impl ReceiverLog for CleanRecordingLog {
    fn insert(&mut self, position: i64, datagram: &[u8]) {
        ReceiverLog::insert(&mut self.log, position, datagram)
    }
    fn scan_complete(&self, position: i64, limit: i64) -> i64 {
        ReceiverLog::scan_complete(&self.log, position, limit)
    }
    fn find_gap(&self, position: i64, limit: i64) -> Option<(i64, usize)> {
        ReceiverLog::find_gap(&self.log, position, limit)
    }
    fn fill_gap(&mut self, position: i64, length: usize) {
        ReceiverLog::fill_gap(&mut self.log, position, length)
    }
    fn clean_to(&mut self, clean_position: &mut i64, target: i64) {
        let start = *clean_position;
        ReceiverLog::clean_to(&mut self.log, clean_position, target);
        self.cleaned.borrow_mut().push((start, *clean_position));
    }
    fn read_frames(
        &self,
        position: i64,
        fragment_limit: usize,
        handler: &mut dyn FnMut(&DataHeader, &[u8], i64),
    ) -> i64 {
        ReceiverLog::read_frames(&self.log, position, fragment_limit, handler)
    }
}

#[test]
fn the_image_zeroes_its_log_a_term_behind_the_consumer_a_little_at_a_time() {
    // Three terms of 1,000-byte messages, the consumer reading each as it arrives: the log is
    // zeroed up to a term behind the consumer (Aeron's `cleanBufferTo`), a step at a time, never
    // a whole term in one call (milliseconds for a 16 MiB term).
    let image_log = SharedLog::anonymous(&params(9)).unwrap();
    let cleaned = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let recording = CleanRecordingLog { log: image_log.clone(), cleaned: cleaned.clone() };
    let mut image = Image::with_log(ImageConfig::new(identity(), 0, 77), recording, ms(0));
    image.add_consumer(1);
    let source = SharedLog::anonymous(&params(9)).unwrap();
    let payload = [7u8; 1000];
    let (mut tail, mut consumer, mut scratch) = (0i64, 0i64, Vec::new());
    while tail < 3 * i64::from(TERM) {
        let next = match source.offer(&payload, 0, i64::MAX).unwrap() {
            Offer::Appended(next) => next,
            // The rest of the term was padded: that padding frame goes out alone.
            Offer::AdminAction => (tail / i64::from(TERM) + 1) * i64::from(TERM),
            other => panic!("{other:?}"),
        };
        // The frames just appended as one datagram; the padding that ended a term is sent as its
        // header alone, as the sender does.
        let (partition, offset) = ((tail / i64::from(TERM)) % 3, tail % i64::from(TERM));
        let length = if next % i64::from(TERM) == 0 { 32 } else { (next - tail) as usize };
        let mut datagram = Vec::new();
        source.term(partition as usize).unwrap().read_into(offset as usize, length, &mut datagram).unwrap();
        assert_eq!(image.on_data(&datagram, ms(1)), Ok(()));
        tail = next;
        consumer = image_log.read(consumer, 100, &mut scratch, |_, _| {}).unwrap();
        image.set_consumer_position(1, consumer);
    }
    assert_eq!(consumer, tail, "the consumer read everything");
    let ranges = cleaned.borrow();
    // Step by step from the join position, contiguous, up to the last step a term behind.
    assert!(ranges.iter().all(|(start, end)| end - start == CLEAN_STEP), "{ranges:?}");
    assert_eq!(ranges.first().unwrap().0, 0);
    assert!(ranges.windows(2).all(|pair| pair[0].1 == pair[1].0), "ranges follow one another");
    let behind = consumer - i64::from(TERM);
    assert_eq!(ranges.last().unwrap().1, behind - behind % CLEAN_STEP);
    // The second term (partition 1) lies wholly behind: zero, ready for the fifth.
    assert!(consumer - i64::from(TERM) >= 2 * i64::from(TERM), "the consumer is three terms in");
    let mut behind = Vec::new();
    image_log.term(1).unwrap().read_into(0, TERM as usize, &mut behind).unwrap();
    assert!(behind.iter().all(|&byte| byte == 0), "the term behind is zero");
}

#[test]
fn the_image_log_finds_gaps_and_completion_where_frames_are_missing() {
    // 40 frames of 160 bytes (100-byte payloads); every fifth from the third never arrives.
    const FRAME: i64 = 160;
    let source = SharedLog::anonymous(&params(9)).unwrap();
    let mut frames = Vec::new();
    for index in 0..40u8 {
        let Offer::Appended(next) = source.offer(&[index; 100], 0, i64::MAX).unwrap() else { panic!() };
        let mut frame = Vec::new();
        source.term(0).unwrap().read_into((next - FRAME) as usize, FRAME as usize, &mut frame).unwrap();
        frames.push((next - FRAME, frame));
    }
    let tail = 40 * FRAME;
    let mut shared = SharedLog::anonymous(&params(9)).unwrap();
    let mut arrived = [false; 40];
    // What the log must report given which frames arrived: complete up to the first missing
    // frame, the gap the run of missing frames from there.
    let expected = |arrived: &[bool; 40]| {
        let first = arrived.iter().position(|a| !a).unwrap_or(40);
        let run = arrived[first..].iter().take_while(|a| !**a).count();
        let complete = first as i64 * FRAME;
        (complete, (run > 0).then_some((complete, run * FRAME as usize)))
    };
    for (index, (position, frame)) in frames.iter().enumerate() {
        if index % 5 == 2 {
            continue;
        }
        ReceiverLog::insert(&mut shared, *position, frame);
        arrived[index] = true;
        let (complete, gap) = expected(&arrived);
        assert_eq!(ReceiverLog::scan_complete(&shared, 0, tail), complete, "after frame {index}");
        assert_eq!(ReceiverLog::find_gap(&shared, 0, tail), gap, "after frame {index}");
    }
    let (gap, length) = ReceiverLog::find_gap(&shared, 0, tail).unwrap();
    assert_eq!((gap, length), (2 * FRAME, FRAME as usize));
    ReceiverLog::fill_gap(&mut shared, gap, length);
    assert_eq!(ReceiverLog::scan_complete(&shared, 0, tail), 7 * FRAME, "the padded gap is passed over");
    // A reader in this process gets the frames before the gap, passes the padding and stops at
    // the next gap.
    let mut payloads = Vec::new();
    let end = ReceiverLog::read_frames(&shared, 0, usize::MAX, &mut |header, payload, end| {
        assert_eq!(identity().position(header.term_id, header.term_offset) + FRAME, end);
        assert_eq!((header.session_id, header.stream_id, header.frame_length), (9, 10, 132));
        payloads.push(payload[0]);
    });
    assert_eq!((payloads, end), (vec![0, 1, 3, 4, 5, 6], 7 * FRAME));
    let mut cleaned = 0;
    ReceiverLog::clean_to(&mut shared, &mut cleaned, tail);
    assert_eq!(cleaned, tail);
    assert_eq!(ReceiverLog::scan_complete(&shared, 0, tail), 0);
}
