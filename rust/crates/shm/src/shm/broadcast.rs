//! One-to-many broadcast buffer: the driver transmits responses and notifications, every client
//! receives all of them (Aeron's `BroadcastTransmitter` / `BroadcastReceiver` layout).
//!
//! `capacity` bytes of records (a power of two) followed by a [`TRAILER_LENGTH`]-byte trailer:
//!
//! ```text
//! capacity + 0   tail intent counter  i64  where the tail is about to move (written first)
//! capacity + 8   tail counter         i64  end of the last complete record (Release)
//! capacity + 16  latest counter       i64  start of the last complete record
//! ```
//!
//! Records are `length: i32, type: i32, payload`, aligned to 8; a record that would wrap is
//! preceded by a padding record to the end of the buffer. The transmitter never waits: a receiver
//! that falls more than `capacity` behind is *lapped* and jumps to the latest record. A receiver
//! copies a record and then checks the tail intent has not moved past it; if it has, the copy may
//! be torn and is discarded (counted as a lap), so a receiver never returns a half-written record.

use super::buffer::Region;
use super::error::ShmError;
use super::ring_buffer::{check_capacity, HEADER_LENGTH, PADDING_MSG_TYPE_ID, RECORD_ALIGNMENT};

/// Bytes after the records.
pub const TRAILER_LENGTH: usize = 128;

mod trailer {
    pub const TAIL_INTENT_COUNTER: usize = 0;
    pub const TAIL_COUNTER: usize = 8;
    pub const LATEST_COUNTER: usize = 16;
}

fn align_record(length: usize) -> usize {
    (length + RECORD_ALIGNMENT - 1) & !(RECORD_ALIGNMENT - 1)
}

/// The driver's side: writes records, never blocks.
#[derive(Debug)]
pub struct BroadcastTransmitter {
    buffer: Region,
    capacity: usize,
}

impl BroadcastTransmitter {
    /// Wraps `region` (records plus trailer) after checking its length.
    pub fn new(region: Region) -> Result<Self, ShmError> {
        let capacity = check_capacity(&region, TRAILER_LENGTH, "broadcast buffer")?;
        Ok(Self { buffer: region, capacity })
    }

    /// Largest payload one record may carry (`capacity / 8`).
    pub fn max_message_length(&self) -> usize {
        self.capacity / 8
    }

    /// Broadcasts one record of `msg_type_id` (> 0).
    pub fn transmit(&mut self, msg_type_id: i32, payload: &[u8]) -> Result<(), ShmError> {
        if msg_type_id < 1 {
            return Err(ShmError::Parameter(format!("message type id {msg_type_id} must be positive")));
        }
        if payload.len() > self.max_message_length() {
            return Err(ShmError::Parameter(format!(
                "message of {} bytes exceeds the broadcast maximum of {}",
                payload.len(),
                self.max_message_length()
            )));
        }
        let capacity = self.capacity;
        let mut tail = self.buffer.get_i64(capacity + trailer::TAIL_COUNTER)?;
        let mut offset = (tail & (capacity as i64 - 1)) as usize;
        let record_length = payload.len() + HEADER_LENGTH;
        let aligned = align_record(record_length);
        let to_end = capacity - offset;
        if to_end < aligned {
            self.signal_intent(tail.saturating_add((to_end + aligned) as i64))?;
            self.buffer.put_i32(offset, to_end as i32)?;
            self.buffer.put_i32(offset + 4, PADDING_MSG_TYPE_ID)?;
            tail = tail.saturating_add(to_end as i64);
            offset = 0;
        } else {
            self.signal_intent(tail.saturating_add(aligned as i64))?;
        }
        self.buffer.put_i32(offset, record_length as i32)?;
        self.buffer.put_i32(offset + 4, msg_type_id)?;
        self.buffer.put_bytes(offset + HEADER_LENGTH, payload)?;
        self.buffer.put_i64(capacity + trailer::LATEST_COUNTER, tail)?;
        self.buffer.put_i64_release(capacity + trailer::TAIL_COUNTER, tail.saturating_add(aligned as i64))
    }

    fn signal_intent(&self, intent: i64) -> Result<(), ShmError> {
        self.buffer.put_i64_release(self.capacity + trailer::TAIL_INTENT_COUNTER, intent)?;
        // The intent must be visible before any byte of the record changes.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// What one call to [`BroadcastReceiver::receive`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A record (its type; payload in the scratch buffer).
    Message(i32),
    /// Nothing new.
    Empty,
    /// The transmitter overwrote records this receiver had not read; it skipped to the latest.
    Lapped,
}

/// A client's side: reads every record from where it joined, detects being lapped.
#[derive(Debug)]
pub struct BroadcastReceiver {
    buffer: Region,
    capacity: usize,
    cursor: i64,
    laps: u64,
}

impl BroadcastReceiver {
    /// Joins at the latest record's end (only what is transmitted from now on is received).
    pub fn new(region: Region) -> Result<Self, ShmError> {
        let capacity = check_capacity(&region, TRAILER_LENGTH, "broadcast buffer")?;
        let cursor = region.get_i64_acquire(capacity + trailer::TAIL_COUNTER)?;
        Ok(Self { buffer: region, capacity, cursor, laps: 0 })
    }

    /// How many times this receiver was lapped.
    pub fn laps(&self) -> u64 {
        self.laps
    }

    /// Copies the next record's payload into `scratch`.
    pub fn receive(&mut self, scratch: &mut Vec<u8>) -> Result<Received, ShmError> {
        let capacity = self.capacity;
        let mask = capacity as i64 - 1;
        let tail = self.buffer.get_i64_acquire(capacity + trailer::TAIL_COUNTER)?;
        if tail <= self.cursor {
            return Ok(Received::Empty);
        }
        if !self.valid(self.cursor)? {
            self.laps += 1;
            self.cursor = self.buffer.get_i64_acquire(capacity + trailer::LATEST_COUNTER)?;
            return Ok(Received::Lapped);
        }
        let mut cursor = self.cursor;
        let mut offset = (cursor & mask) as usize;
        let mut length = self.buffer.get_i32(offset)?;
        let mut msg_type_id = self.buffer.get_i32(offset + 4)?;
        if msg_type_id == PADDING_MSG_TYPE_ID {
            cursor = cursor.saturating_add(i64::from(length.max(0)));
            offset = 0;
            length = self.buffer.get_i32(0)?;
            msg_type_id = self.buffer.get_i32(4)?;
        }
        let length = usize::try_from(length).unwrap_or(0);
        if length < HEADER_LENGTH || align_record(length) > capacity - offset {
            // A torn read of a record being overwritten looks like this too: check for a lap.
            if !self.valid(self.cursor)? {
                self.laps += 1;
                self.cursor = self.buffer.get_i64_acquire(capacity + trailer::LATEST_COUNTER)?;
                return Ok(Received::Lapped);
            }
            return Err(ShmError::corrupt("broadcast buffer", offset, format!("record length {length}")));
        }
        scratch.clear();
        self.buffer.read_into(offset + HEADER_LENGTH, length - HEADER_LENGTH, scratch)?;
        if !self.valid(self.cursor)? {
            self.laps += 1;
            self.cursor = self.buffer.get_i64_acquire(capacity + trailer::LATEST_COUNTER)?;
            return Ok(Received::Lapped);
        }
        self.cursor = cursor.saturating_add(align_record(length) as i64);
        Ok(Received::Message(msg_type_id))
    }

    /// Whether the record at `cursor` cannot have been overwritten yet.
    fn valid(&self, cursor: i64) -> Result<bool, ShmError> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let intent = self.buffer.get_i64_acquire(self.capacity + trailer::TAIL_INTENT_COUNTER)?;
        Ok(cursor.saturating_add(self.capacity as i64) > intent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::file::anonymous;

    fn pair(capacity: usize) -> (BroadcastTransmitter, Region) {
        let region = anonymous(capacity + TRAILER_LENGTH).unwrap();
        (BroadcastTransmitter::new(region.clone()).unwrap(), region)
    }

    #[test]
    fn every_receiver_gets_every_record_in_order_across_wraps() {
        let (mut tx, region) = pair(1024);
        let mut a = BroadcastReceiver::new(region.clone()).unwrap();
        let mut b = BroadcastReceiver::new(region).unwrap();
        let mut scratch = Vec::new();
        for i in 0..300u32 {
            let payload = i.to_le_bytes().repeat(1 + i as usize % 9);
            tx.transmit(7, &payload).unwrap();
            for receiver in [&mut a, &mut b] {
                assert_eq!(receiver.receive(&mut scratch).unwrap(), Received::Message(7));
                assert_eq!(scratch, payload);
                assert_eq!(receiver.receive(&mut scratch).unwrap(), Received::Empty);
            }
        }
    }

    #[test]
    fn a_slow_receiver_is_lapped_and_resumes_at_the_latest_record() {
        let (mut tx, region) = pair(1024);
        let mut slow = BroadcastReceiver::new(region).unwrap();
        for i in 0..100u32 {
            tx.transmit(1, &i.to_le_bytes().repeat(8)).unwrap();
        }
        let mut scratch = Vec::new();
        assert_eq!(slow.receive(&mut scratch).unwrap(), Received::Lapped);
        assert_eq!(slow.laps(), 1);
        assert_eq!(slow.receive(&mut scratch).unwrap(), Received::Message(1));
        assert_eq!(scratch, 99u32.to_le_bytes().repeat(8));
        assert_eq!(slow.receive(&mut scratch).unwrap(), Received::Empty);
    }

    #[test]
    fn a_receiver_joins_at_the_current_tail() {
        let (mut tx, region) = pair(1024);
        tx.transmit(1, b"before").unwrap();
        let mut late = BroadcastReceiver::new(region).unwrap();
        let mut scratch = Vec::new();
        assert_eq!(late.receive(&mut scratch).unwrap(), Received::Empty);
        tx.transmit(2, b"after").unwrap();
        assert_eq!(late.receive(&mut scratch).unwrap(), Received::Message(2));
        assert_eq!(scratch, b"after");
    }

    #[test]
    fn corrupt_lengths_and_bad_parameters_are_errors() {
        let (mut tx, region) = pair(1024);
        let mut rx = BroadcastReceiver::new(region.clone()).unwrap();
        tx.transmit(1, b"x").unwrap();
        region.put_i32(0, 4000).unwrap();
        let mut scratch = Vec::new();
        assert!(matches!(rx.receive(&mut scratch), Err(ShmError::Corrupt { .. })));
        assert!(tx.transmit(0, b"").is_err());
        assert!(tx.transmit(1, &[0; 129]).is_err());
        assert!(BroadcastTransmitter::new(anonymous(1000).unwrap()).is_err());
    }
}
