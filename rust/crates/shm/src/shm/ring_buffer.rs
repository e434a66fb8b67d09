//! Many-to-one ring buffer: clients (any number of threads and processes) write commands, the
//! driver's conductor reads them (Aeron's `ManyToOneRingBuffer` layout and algorithm).
//!
//! The buffer is `capacity` bytes of records (a power of two) followed by a trailer of
//! [`TRAILER_LENGTH`] bytes:
//!
//! ```text
//! capacity + 128  tail position        i64  claimed by producers with compare-and-set
//! capacity + 256  head cache position  i64  producers' cached copy of the head
//! capacity + 384  head position        i64  advanced by the consumer (Release)
//! capacity + 512  correlation counter  i64  the last correlation id handed out (atomic add; ids start at 1)
//! capacity + 640  consumer heartbeat   i64  epoch ms, written by the consumer (driver liveness)
//! ```
//!
//! A record is `length: i32, type: i32, payload`, aligned to [`RECORD_ALIGNMENT`]. A producer
//! claims space by moving the tail, writes the header with a negative length, copies the payload
//! and stores the positive length last (`Release`). The consumer reads lengths with `Acquire`,
//! stops at a length `<= 0`, zeroes what it consumed and then moves the head. A claim that would
//! wrap writes a padding record (type [`PADDING_MSG_TYPE_ID`]) to the end of the buffer.
//!
//! Producers are other processes: the consumer recovers, once each and never by spinning, from
//! a claim never committed ([`ManyToOneRingBuffer::unblock`], called by the driver after a
//! timeout), a record of impossible length and impossible head / tail positions
//! ([`ManyToOneRingBuffer::read`]).

use super::buffer::Region;
use super::error::ShmError;

/// Bytes after the records: the counters above, each on its own pair of cache lines.
pub const TRAILER_LENGTH: usize = 768;
/// Record header: length and type.
pub const HEADER_LENGTH: usize = 8;
/// Records start on multiples of this.
pub const RECORD_ALIGNMENT: usize = 8;
/// Type of a padding record.
pub const PADDING_MSG_TYPE_ID: i32 = -1;

mod trailer {
    pub const TAIL_POSITION: usize = 128;
    pub const HEAD_CACHE_POSITION: usize = 256;
    pub const HEAD_POSITION: usize = 384;
    pub const CORRELATION_COUNTER: usize = 512;
    pub const CONSUMER_HEARTBEAT: usize = 640;
}

fn align_record(length: usize) -> usize {
    (length + RECORD_ALIGNMENT - 1) & !(RECORD_ALIGNMENT - 1)
}

/// Checks that a region is a power-of-two record area plus the trailer; returns the capacity.
pub(crate) fn check_capacity(region: &Region, trailer: usize, structure: &'static str) -> Result<usize, ShmError> {
    let total = region.capacity();
    let capacity = total.saturating_sub(trailer);
    if capacity < 2 * RECORD_ALIGNMENT || !capacity.is_power_of_two() {
        return Err(ShmError::invalid(
            structure,
            None,
            format!("{total} bytes is not a power-of-two record area plus a {trailer}-byte trailer"),
        ));
    }
    Ok(capacity)
}

/// Records (and offsets) a resynchronisation after a malformed record may examine at most
/// ([`ManyToOneRingBuffer::read`]): bounds the consumer's work on a crafted buffer; past it
/// every claimed byte is skipped.
const RESYNC_STEPS_MAX: usize = 16 * 1024;

/// The 8 bytes at an offset, read as a record header while resynchronising.
enum Header {
    /// A committed record of a possible length (that length).
    Committed(usize),
    /// Claimed and not committed yet: zero, or a negative length of a possible record.
    Pending,
    /// Not a header.
    Invalid,
}

/// Outcome of a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// The record is in the buffer.
    Written,
    /// Not enough free space: the consumer is behind.
    Full,
}

/// A many-to-one ring buffer over a mapped region.
#[derive(Clone, Debug)]
pub struct ManyToOneRingBuffer {
    buffer: Region,
    capacity: usize,
}

impl ManyToOneRingBuffer {
    /// Wraps `region` (records plus trailer) after checking its length.
    pub fn new(region: Region) -> Result<Self, ShmError> {
        let capacity = check_capacity(&region, TRAILER_LENGTH, "ring buffer")?;
        Ok(Self { buffer: region, capacity })
    }

    /// Bytes of record space.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Largest payload one record may carry (`capacity / 8`).
    pub fn max_message_length(&self) -> usize {
        self.capacity / 8
    }

    /// A fresh correlation id, unique among all producers. Ids start at 1: a client id doubles
    /// as the owner id of the client's counters, where 0 means the driver.
    pub fn next_correlation_id(&self) -> Result<i64, ShmError> {
        Ok(self.buffer.get_and_add_i64(self.capacity + trailer::CORRELATION_COUNTER, 1)?.saturating_add(1))
    }

    /// The last correlation id handed out (client ids are among them), without taking one.
    pub fn last_correlation_id(&self) -> Result<i64, ShmError> {
        self.buffer.get_i64_acquire(self.capacity + trailer::CORRELATION_COUNTER)
    }

    /// The consumer's last heartbeat (epoch ms).
    pub fn consumer_heartbeat(&self) -> Result<i64, ShmError> {
        self.buffer.get_i64_acquire(self.capacity + trailer::CONSUMER_HEARTBEAT)
    }

    /// Records the consumer's heartbeat (driver side).
    pub fn set_consumer_heartbeat(&self, epoch_ms: i64) -> Result<(), ShmError> {
        self.buffer.put_i64_release(self.capacity + trailer::CONSUMER_HEARTBEAT, epoch_ms)
    }

    /// Writes one record of `msg_type_id` (> 0) carrying `payload`.
    pub fn write(&self, msg_type_id: i32, payload: &[u8]) -> Result<Write, ShmError> {
        if msg_type_id < 1 {
            return Err(ShmError::Parameter(format!("message type id {msg_type_id} must be positive")));
        }
        if payload.len() > self.max_message_length() {
            return Err(ShmError::Parameter(format!(
                "message of {} bytes exceeds the ring buffer maximum of {}",
                payload.len(),
                self.max_message_length()
            )));
        }
        let record_length = payload.len() + HEADER_LENGTH;
        let Some(index) = self.claim(align_record(record_length))? else { return Ok(Write::Full) };
        self.buffer.put_i64_release(index, make_header(-(record_length as i32), msg_type_id))?;
        self.buffer.put_bytes(index + HEADER_LENGTH, payload)?;
        self.buffer.put_i32_release(index, record_length as i32)?;
        Ok(Write::Written)
    }

    fn claim(&self, required: usize) -> Result<Option<usize>, ShmError> {
        let capacity = self.capacity as i64;
        let mask = capacity - 1;
        let required_i = required as i64;
        let tail_at = self.capacity + trailer::TAIL_POSITION;
        let head_cache_at = self.capacity + trailer::HEAD_CACHE_POSITION;
        let head_at = self.capacity + trailer::HEAD_POSITION;
        let mut head = self.buffer.get_i64_acquire(head_cache_at)?;
        let (tail, padding) = loop {
            let tail = self.buffer.get_i64_acquire(tail_at)?;
            if required_i > capacity.saturating_sub(tail.saturating_sub(head)) {
                head = self.buffer.get_i64_acquire(head_at)?;
                if required_i > capacity.saturating_sub(tail.saturating_sub(head)) {
                    return Ok(None);
                }
                self.buffer.put_i64_release(head_cache_at, head)?;
            }
            let tail_index = tail & mask;
            let to_end = capacity - tail_index;
            let mut padding = 0;
            if required_i > to_end {
                let mut head_index = head & mask;
                if required_i > head_index {
                    head = self.buffer.get_i64_acquire(head_at)?;
                    head_index = head & mask;
                    if required_i > head_index {
                        return Ok(None);
                    }
                    self.buffer.put_i64_release(head_cache_at, head)?;
                }
                padding = to_end;
            }
            if self.buffer.compare_and_set_i64(tail_at, tail, tail.saturating_add(required_i + padding))? {
                break (tail, padding);
            }
        };
        let tail_index = (tail & mask) as usize;
        if padding != 0 {
            self.buffer.put_i64_release(tail_index, make_header(padding as i32, PADDING_MSG_TYPE_ID))?;
            return Ok(Some(0));
        }
        Ok(Some(tail_index))
    }

    /// Reads up to `limit` records into `handler(type, payload)`, frees their space, and returns
    /// how many it read. Only one thread may read.
    ///
    /// Nothing another process wrote can make it spin or read out of bounds. Impossible head /
    /// tail positions (negative, misaligned, head past the tail, more than a buffer apart) are
    /// reset ([`ManyToOneRingBuffer::reset_positions`]); a record whose length is impossible
    /// (shorter than its header, longer than the largest record unless padding, or reaching past the claimed
    /// bytes or the end of the buffer) is skipped up to the first offset after it from which
    /// possible records chain to the end of the claimed bytes (else with every claimed byte up
    /// to the end of the buffer: where its successor starts is unknown). Either way the
    /// recovery is done once and reported as `Err(ShmError::Corrupt)` naming the offset and the
    /// value; records handed to `handler` before it stay handled.
    pub fn read<F>(&self, limit: usize, scratch: &mut Vec<u8>, mut handler: F) -> Result<usize, ShmError>
    where
        F: FnMut(i32, &[u8]),
    {
        let head_at = self.capacity + trailer::HEAD_POSITION;
        let head = self.buffer.get_i64(head_at)?;
        let tail = self.buffer.get_i64_acquire(self.capacity + trailer::TAIL_POSITION)?;
        if let Err(detail) = self.check_positions(head, tail) {
            let dropped = self.reset_positions(head, tail)?;
            return Err(ShmError::corrupt(
                "ring buffer",
                self.capacity + trailer::HEAD_POSITION,
                format!("{detail}: positions reset to 0, {dropped} bytes of records dropped"),
            ));
        }
        let head_index = (head & (self.capacity as i64 - 1)) as usize;
        let contiguous = self.capacity - head_index;
        // Bytes producers have claimed from the head up to the end of the buffer.
        let claimed_from = |tail: i64| usize::try_from(tail.saturating_sub(head)).unwrap_or(0).min(contiguous);
        let mut claimed = claimed_from(tail);
        let mut bytes_read = 0;
        let mut messages = 0;
        let mut outcome = Ok(());
        while bytes_read < contiguous && messages < limit {
            let index = head_index + bytes_read;
            let length = self.buffer.get_i32_acquire(index)?;
            if length <= 0 {
                break;
            }
            let length = length as usize;
            if bytes_read + align_record(length) > claimed {
                // Committed after the tail was read: read it again.
                claimed = claimed_from(self.producer_position()?);
            }
            // Padding (at the end of the buffer, or over a stalled claim: `unblock`) may be
            // longer than a record.
            let msg_type_id = self.buffer.get_i32(index + 4)?;
            let too_long = msg_type_id != PADDING_MSG_TYPE_ID && length > self.max_message_length() + HEADER_LENGTH;
            if length < HEADER_LENGTH || too_long || bytes_read + align_record(length) > claimed {
                let skipped = self.skip_malformed(index, claimed.saturating_sub(bytes_read))?;
                bytes_read += skipped;
                outcome = Err(ShmError::corrupt(
                    "ring buffer",
                    index,
                    format!(
                        "record length {length} (must be {HEADER_LENGTH} to {} and within the {} claimed bytes \
                         from there): skipped {skipped} bytes",
                        self.max_message_length() + HEADER_LENGTH,
                        claimed.saturating_sub(bytes_read - skipped),
                    ),
                ));
                break;
            }
            bytes_read += align_record(length);
            if msg_type_id == PADDING_MSG_TYPE_ID {
                continue;
            }
            scratch.clear();
            self.buffer.read_into(index + HEADER_LENGTH, length - HEADER_LENGTH, scratch)?;
            messages += 1;
            handler(msg_type_id, scratch);
        }
        if bytes_read > 0 {
            self.buffer.set_memory(head_index, bytes_read, 0)?;
            self.buffer.put_i64_release(head_at, head.saturating_add(bytes_read as i64))?;
        }
        outcome.map(|()| messages)
    }

    /// Skips a record of impossible length at `index` within the `claimed` bytes from it (what
    /// producers claimed up to the end of the buffer); returns how many bytes the head moves:
    /// to the first 8-aligned offset after it where committed records of possible lengths
    /// chain exactly to the end of the claimed bytes or to a record still being written (so
    /// the commands other clients wrote behind it survive), else (nothing chains, or the
    /// search passed [`RESYNC_STEPS_MAX`]) all the claimed bytes. With nothing claimed there
    /// (bytes written past the tail), the stray header is cleared instead, unless a producer
    /// has claimed and written it meanwhile.
    fn skip_malformed(&self, index: usize, claimed: usize) -> Result<usize, ShmError> {
        if claimed == 0 {
            let header = self.buffer.get_i64_acquire(index)?;
            self.buffer.compare_and_set_i64(index, header, 0)?;
            return Ok(0);
        }
        let end = index + claimed;
        let mut steps = 0;
        let mut start = index + RECORD_ALIGNMENT;
        while start < end && steps < RESYNC_STEPS_MAX {
            if let Header::Committed(_) = self.header_at(start)? {
                let mut at = start;
                let chains = loop {
                    steps += 1;
                    if at == end {
                        break true;
                    }
                    match self.header_at(at)? {
                        Header::Committed(length) => at += align_record(length),
                        Header::Pending => break true,
                        Header::Invalid => break false,
                    }
                    if at > end || steps >= RESYNC_STEPS_MAX {
                        break false;
                    }
                };
                if chains {
                    return Ok(start - index);
                }
            }
            steps += 1;
            start += RECORD_ALIGNMENT;
        }
        Ok(claimed)
    }

    /// What the 8 bytes at `index` would be as a record header.
    fn header_at(&self, index: usize) -> Result<Header, ShmError> {
        let length = self.buffer.get_i32_acquire(index)?;
        let msg_type_id = self.buffer.get_i32(index + 4)?;
        let max = self.max_message_length() + HEADER_LENGTH;
        let possible = |length: usize| {
            length >= HEADER_LENGTH && (msg_type_id == PADDING_MSG_TYPE_ID || (msg_type_id > 0 && length <= max))
        };
        Ok(match length {
            0 if msg_type_id == 0 => Header::Pending,
            length if length < 0 && msg_type_id > 0 && possible(length.unsigned_abs() as usize) => Header::Pending,
            length if length > 0 && possible(length as usize) => Header::Committed(length as usize),
            _ => Header::Invalid,
        })
    }

    /// `Err(why)` when `head` / `tail` cannot be positions of this buffer.
    fn check_positions(&self, head: i64, tail: i64) -> Result<(), String> {
        let aligned = |position: i64| position % RECORD_ALIGNMENT as i64 == 0;
        if head < 0 || tail < 0 || !aligned(head) || !aligned(tail) {
            return Err(format!(
                "head {head} / tail {tail}: positions are non-negative multiples of {RECORD_ALIGNMENT}"
            ));
        }
        if tail < head {
            return Err(format!("head {head} is past tail {tail}"));
        }
        if tail - head > self.capacity as i64 {
            return Err(format!("tail {tail} is more than the capacity {} past head {head}", self.capacity));
        }
        Ok(())
    }

    /// Recovery from impossible positions: every record byte is zeroed and head, head cache and
    /// tail restart at 0 (positions only matter modulo the capacity and as differences). The
    /// tail moves by compare-and-set from the value seen, so a concurrent claim makes this a
    /// no-op until the next read. Returns the bytes dropped (the claimed ones, if they were
    /// knowable, else the whole buffer).
    pub fn reset_positions(&self, head: i64, tail: i64) -> Result<usize, ShmError> {
        if !self.buffer.compare_and_set_i64(self.capacity + trailer::TAIL_POSITION, tail, 0)? {
            return Ok(0);
        }
        self.buffer.set_memory(0, self.capacity, 0)?;
        self.buffer.put_i64_release(self.capacity + trailer::HEAD_CACHE_POSITION, 0)?;
        self.buffer.put_i64_release(self.capacity + trailer::HEAD_POSITION, 0)?;
        let pending = tail.checked_sub(head).and_then(|d| usize::try_from(d).ok());
        Ok(pending.map_or(self.capacity, |d| d.min(self.capacity)))
    }

    /// The consumer's position (head): how far records have been read.
    pub fn consumer_position(&self) -> Result<i64, ShmError> {
        self.buffer.get_i64_acquire(self.capacity + trailer::HEAD_POSITION)
    }

    /// The producers' position (tail): how far space has been claimed.
    pub fn producer_position(&self) -> Result<i64, ShmError> {
        self.buffer.get_i64_acquire(self.capacity + trailer::TAIL_POSITION)
    }

    /// Aeron's `ManyToOneRingBuffer.unblock`: the consumer calls it when the head has not moved
    /// for a timeout while producers claimed past it, that is when a producer claimed a record
    /// and never committed it (killed between claim and commit). The stalled claim becomes a
    /// padding record: a claim with its header written (negative length) keeps its length;
    /// a claim with nothing written yet extends to the next header found (checked again to be
    /// still zero in between), else to the tail or the end of the buffer. Returns the bytes
    /// padded over, `None` when nothing was blocked.
    ///
    /// A producer that was only slow (stalled longer than the timeout between claim and
    /// commit) then writes into space the consumer has passed: its record is lost, as in Aeron.
    pub fn unblock(&self) -> Result<Option<usize>, ShmError> {
        let head = self.consumer_position()?;
        let tail = self.producer_position()?;
        if head == tail || self.check_positions(head, tail).is_err() {
            return Ok(None);
        }
        let mask = self.capacity as i64 - 1;
        let consumer_index = (head & mask) as usize;
        let producer_index = (tail & mask) as usize;
        let limit = if producer_index > consumer_index { producer_index } else { self.capacity };
        let length = self.buffer.get_i32_acquire(consumer_index)?;
        if length > 0 {
            return Ok(None);
        }
        let header_length = length.unsigned_abs() as usize;
        let padding =
            if length < 0 && header_length >= HEADER_LENGTH && consumer_index + align_record(header_length) <= limit {
                align_record(header_length)
            } else {
                // Nothing (or an impossible length) written: pad to the next header still behind
                // zeroes, else to the limit.
                let mut end = consumer_index + RECORD_ALIGNMENT;
                while end < limit && self.buffer.get_i32_acquire(end)? == 0 {
                    end += RECORD_ALIGNMENT;
                }
                let mut still_zero = true;
                let mut i = consumer_index + RECORD_ALIGNMENT;
                while i < end {
                    if self.buffer.get_i64_acquire(i)? != 0 {
                        still_zero = false;
                        break;
                    }
                    i += RECORD_ALIGNMENT;
                }
                if !still_zero {
                    return Ok(None);
                }
                end - consumer_index
            };
        let header = self.buffer.get_i64_acquire(consumer_index)?;
        if !self.buffer.compare_and_set_i64(consumer_index, header, make_header(padding as i32, PADDING_MSG_TYPE_ID))? {
            return Ok(None);
        }
        Ok(Some(padding))
    }

    /// The mapped buffer (records and trailer), for tests that corrupt it.
    #[cfg(feature = "test-support")]
    pub fn region(&self) -> &Region {
        &self.buffer
    }

    /// A producer that dies half-way: claims room for a record of `payload` bytes and writes
    /// its header (negative length), never the payload nor the commit; returns the position.
    #[cfg(feature = "test-support")]
    pub fn claim_and_die(&self, msg_type_id: i32, payload: usize) -> Result<i64, ShmError> {
        let position = self.producer_position()?;
        let record_length = payload + HEADER_LENGTH;
        let index = self.claim(align_record(record_length))?.expect("room to claim");
        self.buffer.put_i64_release(index, make_header(-(record_length as i32), msg_type_id))?;
        Ok(position)
    }

    /// Bytes written and not yet consumed.
    pub fn size(&self) -> Result<usize, ShmError> {
        let head = self.buffer.get_i64_acquire(self.capacity + trailer::HEAD_POSITION)?;
        let tail = self.buffer.get_i64_acquire(self.capacity + trailer::TAIL_POSITION)?;
        Ok(usize::try_from(tail.saturating_sub(head)).unwrap_or(0).min(self.capacity))
    }
}

/// Length in the low 32 bits, type in the high 32 bits: one 64-bit store writes both.
fn make_header(length: i32, msg_type_id: i32) -> i64 {
    ((msg_type_id as i64) << 32) | (length as u32 as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::file::anonymous;

    fn ring(capacity: usize) -> ManyToOneRingBuffer {
        ManyToOneRingBuffer::new(anonymous(capacity + TRAILER_LENGTH).unwrap()).unwrap()
    }

    #[test]
    fn records_come_out_in_order_and_wrap_with_padding() {
        let ring = ring(1024);
        let mut scratch = Vec::new();
        let mut expected = 0u32;
        for round in 0..500u32 {
            let payload = round.to_le_bytes().repeat(1 + round as usize % 7);
            assert_eq!(ring.write(1 + (round % 3) as i32, &payload).unwrap(), Write::Written);
            ring.read(10, &mut scratch, |ty, p| {
                assert_eq!(ty, 1 + (expected % 3) as i32);
                assert_eq!(p, expected.to_le_bytes().repeat(1 + expected as usize % 7));
                expected += 1;
            })
            .unwrap();
        }
        assert_eq!(expected, 500);
        assert_eq!(ring.size().unwrap(), 0);
    }

    #[test]
    fn a_full_buffer_refuses_until_the_consumer_catches_up() {
        let ring = ring(1024);
        let mut written = 0;
        while ring.write(1, &[0; 100]).unwrap() == Write::Written {
            written += 1;
            assert!(written < 100);
        }
        assert_eq!(written, 9); // 9 * 112 = 1008 <= 1024
        let mut scratch = Vec::new();
        assert_eq!(ring.read(usize::MAX, &mut scratch, |_, _| {}).unwrap(), 9);
        assert_eq!(ring.write(1, &[0; 100]).unwrap(), Write::Written);
        assert!(ring.write(1, &[0; 129]).is_err(), "longer than capacity / 8");
        assert!(ring.write(0, &[]).is_err(), "type ids are positive");
    }

    #[test]
    fn correlation_ids_are_unique_and_heartbeat_reads_back() {
        let ring = ring(1024);
        assert_eq!(ring.next_correlation_id().unwrap(), 1, "0 is the driver's owner id");
        assert_eq!(ring.next_correlation_id().unwrap(), 2);
        ring.set_consumer_heartbeat(1234).unwrap();
        assert_eq!(ring.consumer_heartbeat().unwrap(), 1234);
    }

    /// Every record the ring hands out, as (type, first payload byte).
    /// (and the outcome, an error as its text).
    fn drain(ring: &ManyToOneRingBuffer) -> (Vec<(i32, u8)>, Result<usize, String>) {
        let mut scratch = Vec::new();
        let mut seen = Vec::new();
        let outcome = ring.read(usize::MAX, &mut scratch, |ty, p| seen.push((ty, p[0])));
        (seen, outcome.map_err(|e| e.to_string()))
    }

    #[test]
    fn a_malformed_record_length_is_skipped_once_and_reported_once() {
        for bad_length in [5000, 3, 1024 / 8 + HEADER_LENGTH as i32 + 1] {
            let ring = ring(1024);
            ring.write(1, &[1; 16]).unwrap();
            ring.write(2, &[2; 16]).unwrap();
            ring.buffer.put_i32(24, bad_length).unwrap();
            let (seen, outcome) = drain(&ring);
            assert_eq!(seen, [(1, 1)], "the record before it is handled");
            let Err(detail) = outcome else { panic!("{outcome:?}") };
            assert!(detail.starts_with("corrupt ring buffer at offset 24: "), "{detail}");
            assert!(detail.contains(&format!("record length {bad_length}")), "{detail}");
            assert!(detail.contains("skipped 24 bytes"), "{detail}");
            // Once: the next read finds nothing wrong, and the ring carries records again.
            assert_eq!(drain(&ring), (vec![], Ok(0)));
            ring.write(3, &[3; 16]).unwrap();
            assert_eq!(drain(&ring), (vec![(3, 3)], Ok(1)));
            assert_eq!(ring.size().unwrap(), 0);
        }
    }

    #[test]
    fn the_records_behind_a_malformed_one_survive() {
        let ring = ring(1024);
        ring.write(1, &[1; 16]).unwrap();
        ring.write(2, &[2; 16]).unwrap();
        ring.write(3, &[3; 16]).unwrap();
        ring.write(4, &[4; 40]).unwrap();
        // The claim behind them is not written yet: the chain may end there.
        ring.claim(16).unwrap().unwrap();
        ring.buffer.put_i32(24, 3).unwrap();
        let (seen, outcome) = drain(&ring);
        assert_eq!(seen, [(1, 1)]);
        assert!(outcome.as_ref().is_err_and(|e| e.contains("skipped 24 bytes")), "{outcome:?}");
        assert_eq!(drain(&ring), (vec![(3, 3), (4, 4)], Ok(2)));
        // A header inside the malformed record's payload that does not chain to the end is
        // passed over.
        let ring = self::ring(1024);
        let mut payload = make_header(16, 9).to_le_bytes().to_vec();
        payload.extend([7; 24]);
        ring.write(1, &payload).unwrap();
        ring.write(5, &[5; 8]).unwrap();
        ring.buffer.put_i32(0, 5000).unwrap();
        let (seen, outcome) = drain(&ring);
        assert!(seen.is_empty());
        assert!(outcome.as_ref().is_err_and(|e| e.contains("skipped 40 bytes")), "{outcome:?}");
        assert_eq!(drain(&ring), (vec![(5, 5)], Ok(1)));
    }

    #[test]
    fn a_stray_header_past_the_tail_is_cleared_once() {
        let ring = ring(1024);
        ring.write(1, &[1; 8]).unwrap();
        ring.buffer.put_i64(16, make_header(16, 1)).unwrap();
        let (seen, outcome) = drain(&ring);
        assert_eq!(seen, [(1, 1)]);
        assert!(outcome.as_ref().is_err_and(|e| e.starts_with("corrupt ring buffer at offset 16: ")), "{outcome:?}");
        assert_eq!(drain(&ring), (vec![], Ok(0)));
        ring.write(2, &[2; 8]).unwrap();
        assert_eq!(drain(&ring), (vec![(2, 2)], Ok(1)));
    }

    #[test]
    fn a_claim_never_committed_is_padded_over_by_unblock() {
        let ring = ring(1024);
        assert_eq!(ring.unblock().unwrap(), None, "nothing claimed");
        ring.write(1, &[1; 8]).unwrap();
        // A producer claims 24 bytes, writes its header and dies before the commit.
        let stalled = ring.claim(24).unwrap().unwrap();
        ring.buffer.put_i64_release(stalled, make_header(-20, 5)).unwrap();
        ring.write(2, &[2; 8]).unwrap();
        assert_eq!(drain(&ring), (vec![(1, 1)], Ok(1)), "blocked behind the claim");
        assert_eq!(drain(&ring), (vec![], Ok(0)), "still blocked");
        assert_eq!(ring.unblock().unwrap(), Some(24));
        assert_eq!(drain(&ring), (vec![(2, 2)], Ok(1)));
        // A producer claims and dies before writing anything: padded up to the next header.
        ring.claim(40).unwrap().unwrap();
        ring.write(3, &[3; 8]).unwrap();
        assert_eq!(drain(&ring), (vec![], Ok(0)));
        assert_eq!(ring.unblock().unwrap(), Some(40));
        assert_eq!(drain(&ring), (vec![(3, 3)], Ok(1)));
        // A long claim (longer than a record may be) with nothing written: one padding record.
        ring.claim(400).unwrap().unwrap();
        ring.write(5, &[5; 8]).unwrap();
        assert_eq!(ring.unblock().unwrap(), Some(400));
        assert_eq!(drain(&ring), (vec![(5, 5)], Ok(1)));
        // Nothing after the claim: padded up to the tail.
        ring.claim(16).unwrap().unwrap();
        assert_eq!(ring.unblock().unwrap(), Some(16));
        assert_eq!(drain(&ring), (vec![], Ok(0)));
        assert_eq!(ring.size().unwrap(), 0);
        assert_eq!(ring.unblock().unwrap(), None, "a ring that moves is not blocked");
        // The ring keeps working through wraps afterwards.
        for round in 0..100u8 {
            ring.write(4, &[round; 40]).unwrap();
            // A read stops at the end of the buffer: a record that wrapped comes on the next.
            let (mut seen, outcome) = drain(&ring);
            assert!(outcome.is_ok());
            seen.extend(drain(&ring).0);
            assert_eq!(seen, [(4, round)]);
        }
    }

    #[test]
    fn a_claim_that_wrapped_and_died_is_unblocked() {
        let ring = ring(1024);
        // Move the head and tail to 1000: the next claim of 48 bytes wraps.
        for _ in 0..7 {
            ring.write(1, &[1; 120]).unwrap();
        }
        ring.write(1, &[1; 96]).unwrap();
        assert_eq!(drain(&ring).0.len(), 8);
        assert_eq!(ring.producer_position().unwrap(), 1000);
        // Claim by hand without writing the padding header (killed right after the CAS).
        let tail_at = ring.capacity + trailer::TAIL_POSITION;
        assert!(ring.buffer.compare_and_set_i64(tail_at, 1000, 1000 + 24 + 48).unwrap());
        ring.write(2, &[2; 8]).unwrap();
        assert_eq!(drain(&ring), (vec![], Ok(0)));
        assert_eq!(ring.unblock().unwrap(), Some(24), "the padding to the end of the buffer");
        assert_eq!(drain(&ring), (vec![], Ok(0)), "then the record claimed at 0");
        assert_eq!(ring.unblock().unwrap(), Some(48));
        assert_eq!(drain(&ring), (vec![(2, 2)], Ok(1)));
    }

    #[test]
    fn impossible_head_and_tail_are_reset_once() {
        let ring = ring(1024);
        let (head_at, tail_at) = (ring.capacity + trailer::HEAD_POSITION, ring.capacity + trailer::TAIL_POSITION);
        for (head, tail, why) in [
            (64, 16, "is past tail"),
            (0, 1 << 40, "more than the capacity"),
            (-8, 8, "non-negative multiples"),
            (3, 16, "non-negative multiples"),
        ] {
            ring.buffer.put_i64(head_at, head).unwrap();
            ring.buffer.put_i64(tail_at, tail).unwrap();
            let (seen, outcome) = drain(&ring);
            assert!(seen.is_empty());
            let Err(detail) = outcome else { panic!("{outcome:?}") };
            assert!(detail.contains(why) && detail.contains("positions reset to 0"), "{detail}");
            assert_eq!(drain(&ring), (vec![], Ok(0)), "reported once");
            assert_eq!(ring.write(7, &[7; 8]).unwrap(), Write::Written);
            assert_eq!(drain(&ring), (vec![(7, 7)], Ok(1)));
        }
    }

    #[test]
    fn a_region_of_the_wrong_size_is_refused() {
        assert!(ManyToOneRingBuffer::new(anonymous(1000 + TRAILER_LENGTH).unwrap()).is_err());
        assert!(ManyToOneRingBuffer::new(anonymous(100).unwrap()).is_err());
    }
}
