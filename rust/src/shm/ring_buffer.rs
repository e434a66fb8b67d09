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
    pub fn read<F>(&self, limit: usize, scratch: &mut Vec<u8>, mut handler: F) -> Result<usize, ShmError>
    where
        F: FnMut(i32, &[u8]),
    {
        let head_at = self.capacity + trailer::HEAD_POSITION;
        let head = self.buffer.get_i64(head_at)?;
        let head_index = (head & (self.capacity as i64 - 1)) as usize;
        let contiguous = self.capacity - head_index;
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
            if length < HEADER_LENGTH || align_record(length) > contiguous - bytes_read {
                outcome = Err(ShmError::corrupt("ring buffer", index, format!("record length {length}")));
                break;
            }
            bytes_read += align_record(length);
            let msg_type_id = self.buffer.get_i32(index + 4)?;
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

    #[test]
    fn a_corrupt_record_length_is_an_error() {
        let ring = ring(1024);
        ring.write(1, &[1; 16]).unwrap();
        ring.buffer.put_i32(0, 5000).unwrap();
        let mut scratch = Vec::new();
        assert!(matches!(ring.read(10, &mut scratch, |_, _| {}), Err(ShmError::Corrupt { .. })));
    }

    #[test]
    fn a_region_of_the_wrong_size_is_refused() {
        assert!(ManyToOneRingBuffer::new(anonymous(1000 + TRAILER_LENGTH).unwrap()).is_err());
        assert!(ManyToOneRingBuffer::new(anonymous(100).unwrap()).is_err());
    }
}
