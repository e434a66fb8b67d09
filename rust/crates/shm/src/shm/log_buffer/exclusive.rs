//! The exclusive term appender (Aeron's `ExclusiveTermAppender` with the term state its
//! `ExclusivePublication` keeps): one writer owns the log, so the term id, term offset and
//! active partition live in the writer, the tail counter is advanced with a plain `Release`
//! store instead of an atomic add, and the log rotates with plain stores instead of
//! compare-and-sets. `&mut self` on every append makes the single writer a compile-time fact.
//!
//! The log looks exactly as the many-writer appender leaves it (`docs/driver-protocol.md`,
//! "Term appender"): the same frames, padding and rotation, the tail counters and the active
//! term count written with `Release` for the driver and for tools. Only the owner may append:
//! the driver gives an exclusive publication a log of its own, which no other publication joins.

use super::{
    lookahead, meta, pack_tail, prefetch_ahead, tail_term_id, tail_term_offset, LogBuffer, Offer, Region, ShmError,
    LOOKAHEAD_MIN,
};
use crate::logbuffer::position::{align_frame, compute_position, partition_index};
use crate::wire::{flags, DATA_HEADER_LENGTH};

/// Appends into a log with one writer: the term state is kept here, not read from the log.
#[derive(Debug)]
pub struct ExclusiveAppender {
    log: LogBuffer,
    /// Term count (since the initial term) of the active term.
    term_count: i32,
    /// Id of the active term.
    term_id: i32,
    /// Partition of the active term.
    partition: usize,
    /// Offset of the next append in the active term (at most the term length).
    term_offset: u32,
    /// Stream position of the active term's start.
    term_begin_position: i64,
    /// Longest payload appended as one frame by the fast path: `mtu - 32`, at most the largest
    /// message (one comparison per offer instead of two).
    max_frame_payload: usize,
}

impl ExclusiveAppender {
    /// The appender of `log` from its tail as it stands (a log no one else appends to). The
    /// active term count and its partition's tail must agree, as [`LogBuffer::open`] checks.
    pub fn new(log: LogBuffer) -> Result<Self, ShmError> {
        let term_count = log.active_term_count()?;
        let partition = partition_index(i64::from(term_count));
        let raw = log.raw_tail(partition)?;
        let term_id = tail_term_id(raw);
        if term_count < 0 || term_id.wrapping_sub(log.initial_term_id) != term_count {
            return Err(log.impossible(format!(
                "active term count {term_count} selects partition {partition}, whose tail counter holds term id \
                 {term_id}: not a log one writer can append to"
            )));
        }
        let term_offset = tail_term_offset(raw, log.term_length);
        let term_begin_position = compute_position(term_id, 0, log.position_bits, log.initial_term_id);
        let max_frame_payload = (log.mtu as usize - DATA_HEADER_LENGTH).min(log.max_message_length());
        Ok(Self { log, term_count, term_id, partition, term_offset, term_begin_position, max_frame_payload })
    }

    /// The log appended to.
    pub fn log(&self) -> &LogBuffer {
        &self.log
    }

    /// The position the next append starts at (the end of the last one).
    pub fn position(&self) -> i64 {
        self.term_begin_position + i64::from(self.term_offset)
    }

    /// Offers `payload` with `reserved_value` if the position is below `limit` (the publisher
    /// limit): [`LogBuffer::offer`]'s contract (fragments longer than `mtu - 32`, an error
    /// longer than [`LogBuffer::max_message_length`], [`Offer::AdminAction`] after a rotation at
    /// a term's end) for a log with one writer.
    #[inline]
    pub fn offer(&mut self, payload: &[u8], reserved_value: i64, limit: i64) -> Result<Offer, ShmError> {
        if payload.len() > self.max_frame_payload {
            self.log.check_message_length(payload.len())?;
            return Ok(self.append(std::slice::from_ref(&payload), reserved_value, limit)?.1);
        }
        let position = self.position();
        if position >= limit {
            return Ok(self.log.refusal_at(position));
        }
        let aligned = align_frame(payload.len() + DATA_HEADER_LENGTH);
        let term_offset = self.term_offset as usize;
        let end = term_offset + aligned;
        if end > self.log.term_length as usize {
            return self.end_of_term(end);
        }
        let term = self.log.partition(self.partition)?;
        self.store_tail(end)?;
        prefetch_after_frame(term, term_offset, aligned);
        let writer = term.writer(term_offset, aligned)?;
        self.log.write_frame(&writer, 0, term_offset, self.term_id, flags::UNFRAGMENTED, payload, reserved_value)?;
        self.term_offset = end as u32;
        Ok(Offer::Appended(self.term_begin_position + end as i64))
    }

    /// Offers a batch: [`LogBuffer::offer_batch`]'s contract (the longest prefix that fits below
    /// `limit`, at least the first message, and before the term's end; each message framed and
    /// committed as [`Self::offer`] does) for a log with one writer.
    pub fn offer_batch(
        &mut self,
        messages: &[&[u8]],
        reserved_value: i64,
        limit: i64,
    ) -> Result<(usize, Offer), ShmError> {
        if messages.is_empty() {
            return Ok((0, Offer::Appended(self.position())));
        }
        for message in messages {
            self.log.check_message_length(message.len())?;
        }
        self.append(messages, reserved_value, limit)
    }

    /// One claim for a prefix of `messages` (non-empty, lengths checked).
    fn append(&mut self, messages: &[&[u8]], reserved_value: i64, limit: i64) -> Result<(usize, Offer), ShmError> {
        let Some((first, rest)) = messages.split_first() else { return Ok((0, Offer::BackPressured)) };
        let position = self.position();
        if position >= limit {
            return Ok((0, self.log.refusal_at(position)));
        }
        let term_length = self.log.term_length;
        let budget = (limit.saturating_sub(position) as u64).min(u64::from(term_length - self.term_offset));
        let (claimed, count) = self.log.batch_claim_length(first, rest, budget);
        let term_offset = self.term_offset as usize;
        let end = term_offset + claimed;
        if end > term_length as usize {
            return Ok((0, self.end_of_term(end)?));
        }
        let term = self.log.partition(self.partition)?;
        self.store_tail(end)?;
        self.log.write_messages(term, term_offset, claimed, self.term_id, &messages[..count], reserved_value)?;
        self.term_offset = end as u32;
        Ok((count, Offer::Appended(self.term_begin_position + end as i64)))
    }

    /// The active partition's tail counter set to `term_offset` of the active term (`Release`:
    /// the driver reads it as the publisher's position).
    #[inline]
    fn store_tail(&self, term_offset: usize) -> Result<(), ShmError> {
        let tail = pack_tail(self.term_id, term_offset as u32);
        self.log.meta.put_i64_release(meta::TERM_TAIL_COUNTERS + 8 * self.partition, tail)
    }

    /// The next append, which would end at `end`, does not fit the active term: the tail is
    /// set to `end` (past the term, as the many-writer appender's claim leaves it), the rest of
    /// the term padded (when there is a rest), and the log rotated to the next term
    /// ([`Offer::AdminAction`]: retry now), or, in the last term a position can address, the
    /// stream ends there ([`Offer::MaxPositionExceeded`]).
    #[cold]
    fn end_of_term(&mut self, end: usize) -> Result<Offer, ShmError> {
        let term_length = self.log.term_length;
        self.store_tail(end)?;
        if self.term_offset < term_length {
            let term = self.log.partition(self.partition)?;
            self.log.write_padding(term, self.term_offset as usize, self.term_id)?;
            self.term_offset = term_length;
        }
        if self.log.is_last_term(self.term_id) {
            return Ok(Offer::MaxPositionExceeded);
        }
        // Aeron's `ExclusivePublication.rotateTerm`: the next partition's tail first, then the
        // active term count that selects it.
        let next_count = self.term_count.wrapping_add(1);
        let next_term_id = self.term_id.wrapping_add(1);
        let next_partition = partition_index(i64::from(next_count));
        self.log.meta.put_i64_release(meta::TERM_TAIL_COUNTERS + 8 * next_partition, pack_tail(next_term_id, 0))?;
        self.log.meta.put_i32_release(meta::ACTIVE_TERM_COUNT, next_count)?;
        self.term_count = next_count;
        self.term_id = next_term_id;
        self.partition = next_partition;
        self.term_offset = 0;
        self.term_begin_position += i64::from(term_length);
        Ok(Offer::AdminAction)
    }
}

/// Before one frame of `aligned` bytes is written at `term_offset` of `term`: the next frame's
/// first line (a reader that has caught up spins on it and takes it back), then, for frames
/// longer than the shortest look-ahead, the lines entering the look-ahead window. One line, not
/// the many-writer appender's four: without the atomic add to wait behind, fetching the lines
/// further ahead again on every offer costs more than it saves (`affinity-ipc offer-alone
/// --exclusive 1 --term-length 65536`, 32 B: 16.6 → 11.2 ns per offer, none at all 12.4 ns;
/// `docs/benchmarks.md`, "Exclusive publications").
#[inline]
fn prefetch_after_frame(term: &Region, term_offset: usize, aligned: usize) {
    term.prefetch_write(term_offset + aligned);
    if lookahead(aligned) > LOOKAHEAD_MIN {
        prefetch_ahead(term, term_offset, aligned);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{log_bytes, numbered, params, read_all};
    use super::super::{LogParams, LogStart};
    use super::*;

    /// Offers `payload` into both logs (the many-writer appender and the exclusive one) and
    /// checks both did the same.
    fn offer_both(shared: &LogBuffer, exclusive: &mut ExclusiveAppender, payload: &[u8], limit: i64) -> Offer {
        let a = shared.offer(payload, 5, limit).unwrap();
        let b = exclusive.offer(payload, 5, limit).unwrap();
        assert_eq!(a, b, "offer of {} bytes at limit {limit}", payload.len());
        assert_eq!(exclusive.position(), shared.tail_position().unwrap());
        a
    }

    #[test]
    fn writes_exactly_the_log_the_many_writer_appender_writes() {
        // Single offers (empty, one frame, the largest unfragmented payload, fragmented) and
        // batches, through back pressure, padding at every term's end and rotation through all
        // three partitions twice: the same outcomes and the same bytes, metadata included.
        let shared = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let mut exclusive = ExclusiveAppender::new(LogBuffer::anonymous(&params(64 * 1024)).unwrap()).unwrap();
        let max_unfragmented = shared.mtu() as usize - DATA_HEADER_LENGTH;
        let lengths = [0, 1, 32, 100, max_unfragmented, max_unfragmented + 1, 3 * max_unfragmented + 7];
        let (mut cleaned, mut limit) = ([0i64; 2], 0);
        let (mut rotations, mut back_pressured) = (0, 0);
        for round in 0..6_000usize {
            if round % 97 == 0 {
                let tail = shared.tail_position().unwrap();
                limit = tail + shared.publication_window();
                for (log, clean) in [&shared, exclusive.log()].into_iter().zip(&mut cleaned) {
                    let target = tail - log.term_length() as i64;
                    while *clean < target {
                        log.clean_to(clean, target).unwrap();
                    }
                }
            }
            let outcome = if round % 5 == 0 {
                let batch = numbered(1 + (round % 13) as u32, lengths[round % lengths.len()]);
                let slices: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                let a = shared.offer_batch(&slices, 5, limit).unwrap();
                let b = exclusive.offer_batch(&slices, 5, limit).unwrap();
                assert_eq!(a, b, "batch {round}");
                a.1
            } else {
                offer_both(&shared, &mut exclusive, &vec![round as u8; lengths[round % lengths.len()]], limit)
            };
            rotations += usize::from(outcome == Offer::AdminAction);
            back_pressured += usize::from(outcome == Offer::BackPressured);
        }
        assert!(rotations >= 6, "rotated {rotations} times");
        assert!(back_pressured > 0);
        assert!(log_bytes(&shared) == log_bytes(exclusive.log()), "the logs differ");
    }

    #[test]
    fn pads_the_rest_of_a_term_and_rotates_into_the_next() {
        let mut exclusive = ExclusiveAppender::new(LogBuffer::anonymous(&params(64 * 1024)).unwrap()).unwrap();
        let payload = [7u8; 1000]; // 1,056 bytes framed: 62 fit a term, 64 bytes are left
        for _ in 0..62 {
            assert!(matches!(exclusive.offer(&payload, 0, i64::MAX).unwrap(), Offer::Appended(_)));
        }
        assert_eq!(exclusive.position(), 62 * 1056);
        assert_eq!(exclusive.offer(&payload, 0, i64::MAX).unwrap(), Offer::AdminAction);
        let log = exclusive.log();
        assert_eq!(log.active_term_count().unwrap(), 1);
        assert_eq!(log.raw_tail(0).unwrap(), pack_tail(7, 63 * 1056), "past the term, as a claim leaves it");
        assert_eq!(log.raw_tail(1).unwrap(), pack_tail(8, 0), "the next term");
        assert_eq!(exclusive.position(), 64 * 1024);
        // The padding frame covers the rest of the term: a reader goes on to the next term.
        let (frames, end) = read_all(exclusive.log(), 0);
        assert_eq!((frames.len(), end), (62, 64 * 1024));
        let scanned = exclusive.log().scan(62 * 1056, usize::MAX).unwrap();
        assert_eq!(scanned, (DATA_HEADER_LENGTH, 64 - DATA_HEADER_LENGTH), "a padding frame to the term's end");
        assert_eq!(exclusive.offer(&payload, 0, i64::MAX).unwrap(), Offer::Appended(64 * 1024 + 1056));
        let (frames, _) = read_all(exclusive.log(), 64 * 1024);
        assert_eq!(frames, vec![(flags::UNFRAGMENTED, payload.to_vec())]);
    }

    #[test]
    fn refuses_at_the_limit_and_takes_one_message_past_it_as_a_single_offer_does() {
        let mut exclusive = ExclusiveAppender::new(LogBuffer::anonymous(&params(64 * 1024)).unwrap()).unwrap();
        assert_eq!(exclusive.offer(b"x", 0, 0).unwrap(), Offer::BackPressured);
        assert_eq!(exclusive.offer(&[1; 100], 0, 1).unwrap(), Offer::Appended(160));
        assert_eq!(exclusive.offer(b"x", 0, 160).unwrap(), Offer::BackPressured);
        let messages = numbered(10, 100);
        let slices: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        assert_eq!(exclusive.offer_batch(&slices, 0, 160).unwrap(), (0, Offer::BackPressured));
        assert_eq!(exclusive.offer_batch(&slices, 0, 160 + 3 * 160 - 1).unwrap(), (2, Offer::Appended(480)));
        assert_eq!(exclusive.offer_batch(&slices, 0, 480 + 1).unwrap(), (1, Offer::Appended(640)));
        assert_eq!(exclusive.offer_batch(&[], 0, 0).unwrap(), (0, Offer::Appended(640)));
        assert_eq!(exclusive.log().tail_position().unwrap(), 640, "the driver sees the same position");
    }

    #[test]
    fn refuses_a_message_too_long_and_appends_nothing_of_its_batch() {
        let mut exclusive = ExclusiveAppender::new(LogBuffer::anonymous(&params(64 * 1024)).unwrap()).unwrap();
        let max = exclusive.log().max_message_length();
        let longest = vec![3u8; max];
        assert!(matches!(exclusive.offer(&longest, 0, i64::MAX).unwrap(), Offer::Appended(_)));
        let position = exclusive.position();
        let too_long = vec![0u8; max + 1];
        let error = exclusive.offer(&too_long, 0, i64::MAX).unwrap_err().to_string();
        assert!(error.contains(&format!("exceeds the maximum of {max}")), "{error}");
        assert!(exclusive.offer_batch(&[b"short", &too_long], 0, i64::MAX).is_err());
        assert_eq!(exclusive.position(), position);
        assert_eq!(exclusive.log().tail_position().unwrap(), position);
        let (frames, _) = read_all(exclusive.log(), 0);
        assert_eq!(frames.iter().flat_map(|f| f.1.clone()).collect::<Vec<_>>(), longest);
    }

    #[test]
    fn starts_where_the_driver_started_the_log_and_ends_at_the_largest_position() {
        // A log started at a full term (`term-offset` = term length): the first offer rotates.
        let p = params(64 * 1024);
        let full = LogStart { term_id: p.initial_term_id + 2, term_offset: p.term_length };
        let mut exclusive = ExclusiveAppender::new(LogBuffer::anonymous_at(&p, full).unwrap()).unwrap();
        assert_eq!(exclusive.position(), 3 * 64 * 1024);
        assert_eq!(exclusive.offer(b"first", 0, i64::MAX).unwrap(), Offer::AdminAction);
        assert_eq!(exclusive.offer(b"first", 0, i64::MAX).unwrap(), Offer::Appended(3 * 64 * 1024 + 64));
        // The last term a position can address: its end is the end of the stream.
        let last = LogStart { term_id: p.initial_term_id.wrapping_add(i32::MAX), term_offset: p.term_length - 64 };
        let mut exclusive = ExclusiveAppender::new(LogBuffer::anonymous_at(&p, last).unwrap()).unwrap();
        let max = exclusive.log().max_position();
        assert_eq!(exclusive.offer(b"x", 0, i64::MAX).unwrap(), Offer::Appended(max));
        assert_eq!(exclusive.offer(b"y", 0, i64::MAX).unwrap(), Offer::MaxPositionExceeded);
        assert_eq!(exclusive.offer(b"y", 0, i64::MAX).unwrap(), Offer::MaxPositionExceeded);
        assert_eq!(exclusive.log().active_term_count().unwrap(), i32::MAX, "never rotated out of");
    }

    #[test]
    fn refuses_a_log_whose_term_count_and_tail_disagree() {
        let log = LogBuffer::anonymous(&LogParams { ..params(64 * 1024) }).unwrap();
        log.metadata().put_i32(meta::ACTIVE_TERM_COUNT, 4).unwrap();
        let error = ExclusiveAppender::new(log).unwrap_err().to_string();
        assert!(error.contains("active term count 4 selects partition 1") && error.contains("corrupt"), "{error}");
    }

    #[test]
    fn a_reader_in_another_thread_sees_every_message_once_in_order_across_rotations() {
        // The appender's stores against a concurrent reader (the subscriber's side): committed
        // frames only, through padding and rotation; the "driver" moves the limit and cleans.
        let log = LogBuffer::anonymous(&params(64 * 1024)).unwrap();
        let reader_log = log.clone();
        let read_position = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
        let total = 20_000u64;
        let reader = {
            let read_position = std::sync::Arc::clone(&read_position);
            std::thread::spawn(move || {
                let (mut position, mut next, mut scratch) = (0i64, 0u64, Vec::new());
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                while next < total && std::time::Instant::now() < deadline {
                    position = reader_log
                        .read(position, 64, &mut scratch, |_, payload| {
                            assert_eq!(payload[..8], next.to_le_bytes(), "message {next}");
                            next += 1;
                        })
                        .unwrap();
                    read_position.store(position, std::sync::atomic::Ordering::Release);
                }
                next
            })
        };
        let mut exclusive = ExclusiveAppender::new(log).unwrap();
        let (mut sent, mut clean) = (0u64, 0i64);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while sent < total && std::time::Instant::now() < deadline {
            let consumed = read_position.load(std::sync::atomic::Ordering::Acquire);
            let target = consumed - exclusive.log().term_length() as i64;
            if target > clean {
                exclusive.log().clean_to(&mut clean, target).unwrap();
            }
            let limit = consumed + exclusive.log().publication_window();
            let mut payload = [0u8; 200];
            payload[..8].copy_from_slice(&sent.to_le_bytes());
            match exclusive.offer(&payload, 0, limit).unwrap() {
                Offer::Appended(_) => sent += 1,
                Offer::AdminAction | Offer::BackPressured => std::thread::yield_now(),
                Offer::MaxPositionExceeded => panic!("max position"),
            }
        }
        assert_eq!(reader.join().unwrap(), total);
        assert!(exclusive.position() > 3 * 64 * 1024, "rotated through every partition");
    }
}
