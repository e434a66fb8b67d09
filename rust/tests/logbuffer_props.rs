//! Property tests of the log buffer (`shm::log_buffer::LogBuffer`, in anonymous memory):
//! whatever the term appender appends is read back exactly, whatever the sender's scanner
//! cuts into datagrams is rebuilt exactly whatever order they arrive in, and gaps are found
//! where data is missing.

use affinity::logbuffer::Offer;
use affinity::logbuffer::{ReceiverLog, SenderLog, StreamIdentity};
use affinity::shm::log_buffer::{LogBuffer, LogParams, LogStart};
use affinity::wire::{flags, FrameType};
use proptest::prelude::*;

const TERM: u32 = 64 * 1024;
const MTU: u32 = 1408;

fn identity(initial_term_id: i32) -> StreamIdentity {
    StreamIdentity { session_id: 1, stream_id: 2, initial_term_id, term_length: TERM }
}

/// A log of stream `identity` whose first append goes to `start`.
fn log_at(identity: StreamIdentity, start: i64) -> LogBuffer {
    LogBuffer::anonymous_at(&LogParams::for_stream(&identity, MTU), LogStart::at(&identity, start)).unwrap()
}

/// Appends `messages` with the term appender; returns the final tail.
fn append_all(log: &LogBuffer, start: i64, messages: &[Vec<u8>]) -> i64 {
    let mut tail = start;
    for message in messages {
        let mut attempts = 0;
        loop {
            attempts += 1;
            assert!(attempts <= 2, "a message must fit the term after one rotation");
            match log.offer(message, 0, i64::MAX).unwrap() {
                Offer::Appended(next) => {
                    tail = next;
                    break;
                }
                Offer::AdminAction => {}
                other => panic!("{other:?}"),
            }
        }
    }
    tail
}

/// Reads whole messages between `start` and `end` as a subscriber does, skipping padding.
fn read_all(log: &LogBuffer, start: i64, end: i64) -> Vec<Vec<u8>> {
    let mut messages = Vec::new();
    let mut partial = Vec::new();
    let mut scratch = Vec::new();
    let mut position = start;
    while position < end {
        let next = log
            .read(position, usize::MAX, &mut scratch, |header, payload| {
                partial.extend_from_slice(payload);
                if header.flags & flags::END != 0 {
                    messages.push(std::mem::take(&mut partial));
                }
            })
            .unwrap();
        assert!(next > position, "hole at {position}");
        position = next;
    }
    messages
}

/// Splits the log between `start` and `end` into the datagrams the sender sends (its scanner:
/// whole frames, at most one MTU, never across a term; a PAD travels as its 32-byte header).
fn datagrams(log: &LogBuffer, start: i64, end: i64) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buffer = vec![0u8; MTU as usize];
    let mut position = start;
    while position < end {
        let (length, covered) = log.scan_datagram(position, MTU as usize, &mut buffer);
        assert!(covered > 0, "nothing to send at {position}");
        out.push((position, buffer[..length].to_vec()));
        position += covered;
    }
    out
}

fn is_padding(datagram: &[u8]) -> bool {
    i16::from_le_bytes([datagram[6], datagram[7]]) == FrameType::Pad.code()
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
        let start = start_slot * 32;
        let log = log_at(identity(initial_term_id), start);
        let tail = append_all(&log, start, &messages);
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
        let start = start_slot * 32;
        let source = log_at(identity(7), start);
        let tail = append_all(&source, start, &messages);
        let mut packets = datagrams(&source, start, tail);
        // Shuffle deterministically, and duplicate some.
        let mut state = seed | 1;
        for i in (1..packets.len()).rev() {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17;
            packets.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let duplicates: Vec<_> = packets.iter().step_by(5).cloned().collect();
        packets.extend(duplicates);
        let mut sink = log_at(identity(7), 0);
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
        let source = log_at(identity(0), 0);
        let tail = append_all(&source, 0, &messages);
        let packets = datagrams(&source, 0, tail);
        let missing = pick.index(packets.len());
        prop_assume!(!is_padding(&packets[missing].1));
        let mut sink = log_at(identity(0), 0);
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
