//! Property tests of the log buffer: whatever is appended is rebuilt exactly, whatever order
//! its datagrams arrive in, and gaps are found where data is missing.

use affinity::logbuffer::log::{read_frame_length, read_frame_type};
use affinity::logbuffer::position::align_frame;
use affinity::logbuffer::{AppendOutcome, LogBuffer, StreamIdentity};
use affinity::wire::{flags, DataHeader, FrameType};
use proptest::prelude::*;

const TERM: u32 = 64 * 1024;
const MTU: u32 = 1408;

fn identity(initial_term_id: i32) -> StreamIdentity {
    StreamIdentity { session_id: 1, stream_id: 2, initial_term_id, term_length: TERM }
}

/// Appends `messages` from `start`; returns the (position, length) of every frame run written
/// per term and the final tail.
fn append_all(log: &mut LogBuffer, start: i64, messages: &[Vec<u8>]) -> i64 {
    let mut tail = start;
    for message in messages {
        loop {
            match log.append(tail, message, MTU, 0) {
                AppendOutcome::Appended(next) => {
                    tail = next;
                    break;
                }
                AppendOutcome::Padded(next) => tail = next,
                AppendOutcome::MaxPositionExceeded => panic!("max position"),
            }
        }
    }
    tail
}

/// Reads whole messages between `start` and `end`, skipping padding.
fn read_all(log: &LogBuffer, start: i64, end: i64) -> Vec<Vec<u8>> {
    let mut messages = Vec::new();
    let mut partial = Vec::new();
    let mut position = start;
    while position < end {
        let term = log.term(position);
        let offset = log.identity().term_offset(position) as usize;
        let frame_length = read_frame_length(term, offset);
        assert!(frame_length > 0, "hole at {position}");
        if read_frame_type(term, offset) == FrameType::Pad.code() {
            position += frame_length as i64;
            continue;
        }
        let header = DataHeader::parse(&term[offset..offset + 32]).unwrap();
        partial.extend_from_slice(&term[offset + 32..offset + frame_length as usize]);
        if header.flags & flags::END != 0 {
            messages.push(std::mem::take(&mut partial));
        }
        position += align_frame(frame_length as usize) as i64;
    }
    messages
}

/// Splits the log between `start` and `end` into the datagrams a sender would send: whole
/// frames, at most one MTU, never across a term; a PAD travels as its 32-byte header.
fn datagrams(log: &LogBuffer, start: i64, end: i64) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut position = start;
    while position < end {
        let term = log.term(position);
        let offset = log.identity().term_offset(position) as usize;
        let frame_length = read_frame_length(term, offset) as usize;
        if read_frame_type(term, offset) == FrameType::Pad.code() {
            out.push((position, term[offset..offset + 32].to_vec()));
            position += frame_length as i64;
            continue;
        }
        let mut length = align_frame(frame_length);
        while offset + length < TERM as usize && (position + length as i64) < end {
            let next = read_frame_length(term, offset + length) as usize;
            if read_frame_type(term, offset + length) == FrameType::Pad.code()
                || length + align_frame(next) > MTU as usize
            {
                break;
            }
            length += align_frame(next);
        }
        out.push((position, term[offset..offset + length].to_vec()));
        position += length as i64;
    }
    out
}

fn messages() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(
        prop_oneof![
            8 => prop::collection::vec(any::<u8>(), 0..200),
            1 => prop::collection::vec(any::<u8>(), 1300..4000),
        ],
        1..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    #[test]
    fn appended_messages_are_read_back_exactly(
        messages in messages(),
        start_slot in 0i64..2000,
        initial_term_id in any::<i32>(),
    ) {
        let mut log = LogBuffer::new(identity(initial_term_id));
        let start = start_slot * 32;
        let tail = append_all(&mut log, start, &messages);
        // Scanning (one term at a time) reaches exactly the tail.
        let mut scanned = start;
        while scanned < tail {
            let next = log.scan_complete(scanned, tail);
            prop_assert!(next > scanned, "stuck at {}", scanned);
            scanned = next;
        }
        prop_assert_eq!(scanned, tail);
        prop_assert_eq!(read_all(&log, start, tail), messages);
    }

    #[test]
    fn datagrams_in_any_order_rebuild_the_same_log(
        messages in messages(),
        start_slot in 0i64..2000,
        seed in any::<u64>(),
    ) {
        let mut source = LogBuffer::new(identity(7));
        let start = start_slot * 32;
        let tail = append_all(&mut source, start, &messages);
        let mut packets = datagrams(&source, start, tail);
        // Shuffle deterministically, and duplicate some.
        let mut state = seed | 1;
        for i in (1..packets.len()).rev() {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17;
            packets.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let duplicates: Vec<_> = packets.iter().step_by(5).cloned().collect();
        packets.extend(duplicates);
        let mut sink = LogBuffer::new(identity(7));
        for (position, datagram) in &packets {
            sink.insert(*position, datagram);
        }
        let mut rebuilt = start;
        while rebuilt < tail {
            let next = sink.scan_complete(rebuilt, tail);
            prop_assert!(next > rebuilt, "stuck at {}", rebuilt);
            rebuilt = next;
        }
        prop_assert_eq!(read_all(&sink, start, tail), messages);
    }

    #[test]
    fn a_missing_datagram_is_reported_as_the_first_gap(
        messages in messages(),
        pick in any::<prop::sample::Index>(),
    ) {
        let mut source = LogBuffer::new(identity(0));
        let tail = append_all(&mut source, 0, &messages);
        let packets = datagrams(&source, 0, tail);
        let missing = pick.index(packets.len());
        prop_assume!(read_frame_type(&packets[missing].1, 0) != FrameType::Pad.code());
        let mut sink = LogBuffer::new(identity(0));
        for (index, (position, datagram)) in packets.iter().enumerate() {
            if index != missing {
                sink.insert(*position, datagram);
            }
        }
        let (gap_position, _) = packets[missing].clone();
        let term_end = (gap_position / TERM as i64 + 1) * TERM as i64;
        let rebuilt = sink.scan_complete(gap_position - gap_position % TERM as i64, tail.min(term_end));
        prop_assert!(rebuilt <= gap_position);
        let gap = sink.find_gap(gap_position, tail.min(term_end));
        prop_assert_eq!(gap.map(|(position, _)| position), Some(gap_position));
        prop_assert!(gap.unwrap().1 >= packets[missing].1.len().min(32));
    }
}
