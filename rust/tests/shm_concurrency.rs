//! Stress tests of the shared-memory structures with several writer threads: many-writer claims
//! never overlap and a reader never sees a half-written record or frame.
//!
//! Every message carries its writer, its sequence number and a body derived from both, so a torn
//! or overlapping write shows up as a body that does not match its header, and a lost or
//! duplicated message as a gap in a writer's sequence. Every loop is bounded by count and time.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use affinity::logbuffer::Offer;
use affinity::shm::broadcast::{
    BroadcastReceiver, BroadcastTransmitter, Received, TRAILER_LENGTH as BROADCAST_TRAILER,
};
use affinity::shm::file::anonymous;
use affinity::shm::log_buffer::{LogBuffer, LogParams};
use affinity::shm::ring_buffer::{ManyToOneRingBuffer, Write, TRAILER_LENGTH as RING_TRAILER};
use affinity::wire::flags;

const WRITERS: u32 = 4;
const DEADLINE: Duration = Duration::from_secs(60);

/// `writer, sequence, body...` where the body length and bytes follow from writer and sequence.
fn message(writer: u32, sequence: u32, max_body: usize) -> Vec<u8> {
    let body_length = (sequence as usize * 7 + writer as usize * 13) % max_body;
    let mut out = Vec::with_capacity(8 + body_length);
    out.extend_from_slice(&writer.to_le_bytes());
    out.extend_from_slice(&sequence.to_le_bytes());
    out.extend((0..body_length).map(|i| (i as u32 ^ sequence ^ (writer << 5)) as u8));
    out
}

/// Checks a received message against what its header says it must be; returns (writer, sequence).
fn verify(bytes: &[u8], max_body: usize) -> (u32, u32) {
    assert!(bytes.len() >= 8, "message of {} bytes is shorter than its header", bytes.len());
    let writer = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let sequence = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    assert!(writer < WRITERS, "writer {writer} out of range: torn header");
    assert_eq!(bytes, message(writer, sequence, max_body).as_slice(), "torn body: writer {writer} sequence {sequence}");
    (writer, sequence)
}

#[test]
fn ring_buffer_many_writers_one_reader_no_loss_no_tearing() {
    const PER_WRITER: u32 = 50_000;
    let ring = ManyToOneRingBuffer::new(anonymous(64 * 1024 + RING_TRAILER).unwrap()).unwrap();
    let start = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let ring = ring.clone();
            thread::spawn(move || {
                let mut sequence = 0;
                while sequence < PER_WRITER && start.elapsed() < DEADLINE {
                    match ring.write(1 + writer as i32, &message(writer, sequence, 200)).unwrap() {
                        Write::Written => sequence += 1,
                        Write::Full => thread::yield_now(),
                    }
                }
                sequence
            })
        })
        .collect();
    let mut next = [0u32; WRITERS as usize];
    let mut scratch = Vec::new();
    while next.iter().any(|&n| n < PER_WRITER) && start.elapsed() < DEADLINE {
        let read = ring
            .read(100, &mut scratch, |msg_type_id, bytes| {
                let (writer, sequence) = verify(bytes, 200);
                assert_eq!(msg_type_id, 1 + writer as i32);
                assert_eq!(sequence, next[writer as usize], "writer {writer}: out of order or lost");
                next[writer as usize] += 1;
            })
            .unwrap();
        if read == 0 {
            thread::yield_now();
        }
    }
    for handle in writers {
        assert_eq!(handle.join().unwrap(), PER_WRITER);
    }
    assert_eq!(next, [PER_WRITER; WRITERS as usize]);
}

#[test]
fn broadcast_receivers_never_see_a_torn_record() {
    const RECORDS: u32 = 200_000;
    let region = anonymous(16 * 1024 + BROADCAST_TRAILER).unwrap();
    let mut transmitter = BroadcastTransmitter::new(region.clone()).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let receivers: Vec<_> = (0..3)
        .map(|_| {
            let mut receiver = BroadcastReceiver::new(region.clone()).unwrap();
            let done = Arc::clone(&done);
            thread::spawn(move || {
                let mut scratch = Vec::new();
                let (mut received, mut last) = (0u64, None::<u32>);
                while start.elapsed() < DEADLINE {
                    match receiver.receive(&mut scratch).unwrap() {
                        Received::Message(_) => {
                            let (_, sequence) = verify(&scratch, 300);
                            if let Some(previous) = last {
                                assert!(sequence > previous, "sequence went back: {previous} then {sequence}");
                            }
                            last = Some(sequence);
                            received += 1;
                        }
                        Received::Lapped => {}
                        Received::Empty if done.load(Ordering::Acquire) => break,
                        Received::Empty => thread::yield_now(),
                    }
                }
                (received, receiver.laps(), last)
            })
        })
        .collect();
    for sequence in 0..RECORDS {
        transmitter.transmit(5, &message(sequence % WRITERS, sequence, 300)).unwrap();
    }
    done.store(true, Ordering::Release);
    for handle in receivers {
        let (received, laps, last) = handle.join().unwrap();
        assert!(received > 0);
        assert_eq!(
            last,
            Some(RECORDS - 1),
            "every receiver ends on the last record ({received} received, {laps} laps)"
        );
    }
}

#[test]
fn term_appender_many_writers_claims_never_overlap_and_reader_sees_only_whole_frames() {
    const PER_WRITER: u32 = 40_000;
    let log = LogBuffer::anonymous(&LogParams {
        term_length: 64 * 1024,
        mtu: 1408,
        page_size: 4096,
        initial_term_id: -5,
        session_id: 1,
        stream_id: 2,
        correlation_id: 3,
    })
    .unwrap();
    // The reader's position bounds the writers (publisher limit), exactly as the driver would.
    let consumer = Arc::new(AtomicI64::new(0));
    let start = Instant::now();
    let max_body = 3000; // some messages exceed the MTU and are fragmented
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let log = log.clone();
            let consumer = Arc::clone(&consumer);
            thread::spawn(move || {
                let mut sequence = 0;
                let mut admin = 0u64;
                while sequence < PER_WRITER && start.elapsed() < DEADLINE {
                    let limit = consumer.load(Ordering::Acquire) + log.publication_window();
                    match log.offer(&message(writer, sequence, max_body), i64::from(writer), limit).unwrap() {
                        Offer::Appended(_) => sequence += 1,
                        Offer::AdminAction => admin += 1,
                        Offer::BackPressured => thread::yield_now(),
                        Offer::MaxPositionExceeded => panic!("max position"),
                    }
                }
                (sequence, admin)
            })
        })
        .collect();
    let mut next = [0u32; WRITERS as usize];
    let (mut position, mut clean) = (0i64, 0i64);
    let mut scratch = Vec::new();
    let mut assembling: Vec<u8> = Vec::new();
    while next.iter().any(|&n| n < PER_WRITER) && start.elapsed() < DEADLINE {
        let before = position;
        position = log
            .read(position, 64, &mut scratch, |header, fragment| {
                if header.flags & flags::BEGIN != 0 {
                    assert!(assembling.is_empty(), "BEGIN inside another message: overlapping claims");
                }
                assembling.extend_from_slice(fragment);
                if header.flags & flags::END != 0 {
                    let (writer, sequence) = verify(&assembling, max_body);
                    assert_eq!(header.reserved_value, i64::from(writer));
                    assert_eq!(sequence, next[writer as usize], "writer {writer}: out of order or lost");
                    next[writer as usize] += 1;
                    assembling.clear();
                }
            })
            .unwrap();
        consumer.store(position, Ordering::Release);
        log.clean_to(&mut clean, position - i64::from(log.term_length())).unwrap();
        if position == before {
            thread::yield_now();
        }
    }
    let mut rotations = 0;
    for handle in writers {
        let (sent, admin) = handle.join().unwrap();
        assert_eq!(sent, PER_WRITER);
        rotations += admin;
    }
    assert_eq!(next, [PER_WRITER; WRITERS as usize]);
    assert!(rotations > 0 && position > 10 * 64 * 1024, "the test must cross many terms (position {position})");
    assert_eq!(position, log.tail_position().unwrap());
}

#[test]
fn batch_claims_from_many_writers_never_overlap_and_commit_each_frame_whole() {
    const PER_WRITER: u32 = 40_000;
    let log = LogBuffer::anonymous(&LogParams {
        term_length: 64 * 1024,
        mtu: 1408,
        page_size: 4096,
        initial_term_id: 9,
        session_id: 1,
        stream_id: 2,
        correlation_id: 3,
    })
    .unwrap();
    let consumer = Arc::new(AtomicI64::new(0));
    let start = Instant::now();
    let max_body = 1600; // a few messages are fragmented inside a batch
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let log = log.clone();
            let consumer = Arc::clone(&consumer);
            thread::spawn(move || {
                let mut sequence = 0;
                let (mut batches, mut admin) = (0u64, 0u64);
                while sequence < PER_WRITER && start.elapsed() < DEADLINE {
                    // Batches of 1..=40 messages, each framed from its writer and sequence.
                    let size = 1 + (sequence as usize * 31 + writer as usize) % 40;
                    let messages: Vec<Vec<u8>> = (sequence..PER_WRITER.min(sequence + size as u32))
                        .map(|s| message(writer, s, if s % 97 == 0 { max_body } else { 200 }))
                        .collect();
                    let slices: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
                    let limit = consumer.load(Ordering::Acquire) + log.publication_window();
                    let (taken, outcome) = log.offer_batch(&slices, i64::from(writer), limit).unwrap();
                    sequence += taken as u32;
                    match outcome {
                        Offer::Appended(_) => batches += 1,
                        Offer::AdminAction => admin += 1,
                        Offer::BackPressured => thread::yield_now(),
                        Offer::MaxPositionExceeded => panic!("max position"),
                    }
                }
                (sequence, batches, admin)
            })
        })
        .collect();
    let mut next = [0u32; WRITERS as usize];
    let (mut position, mut clean) = (0i64, 0i64);
    let mut scratch = Vec::new();
    let mut assembling: Vec<u8> = Vec::new();
    while next.iter().any(|&n| n < PER_WRITER) && start.elapsed() < DEADLINE {
        let before = position;
        position = log
            .read(position, 100, &mut scratch, |header, fragment| {
                if header.flags & flags::BEGIN != 0 {
                    assert!(assembling.is_empty(), "BEGIN inside another message: overlapping claims");
                }
                assembling.extend_from_slice(fragment);
                if header.flags & flags::END != 0 {
                    let writer = u32::from_le_bytes(assembling[0..4].try_into().unwrap());
                    let sequence = u32::from_le_bytes(assembling[4..8].try_into().unwrap());
                    let body = if sequence % 97 == 0 { max_body } else { 200 };
                    assert_eq!(verify(&assembling, body), (writer, sequence));
                    assert_eq!(header.reserved_value, i64::from(writer));
                    assert_eq!(sequence, next[writer as usize], "writer {writer}: out of order or lost");
                    next[writer as usize] += 1;
                    assembling.clear();
                }
            })
            .unwrap();
        consumer.store(position, Ordering::Release);
        log.clean_to(&mut clean, position - i64::from(log.term_length())).unwrap();
        if position == before {
            thread::yield_now();
        }
    }
    let (mut multi, mut rotations) = (0, 0);
    for handle in writers {
        let (sent, batches, admin) = handle.join().unwrap();
        assert_eq!(sent, PER_WRITER);
        multi += batches;
        rotations += admin;
    }
    assert_eq!(next, [PER_WRITER; WRITERS as usize]);
    assert!(multi < u64::from(WRITERS * PER_WRITER) / 2, "most claims must carry several messages ({multi})");
    assert!(rotations > 0 && position > 10 * 64 * 1024, "the test must cross many terms (position {position})");
    assert_eq!(position, log.tail_position().unwrap());
}
