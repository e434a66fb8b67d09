//! Three term partitions in the Aeron layout, with the appender (publication side) and the
//! rebuilder (image side) that write frames into them.
//!
//! A stream position maps to `(term_id, term_offset)`; the term lives in partition
//! `(term_id - initial_term_id) % 3`. Frames are 32-byte aligned and start with the 32-byte
//! data header (see [`crate::wire::DataHeader`]); a frame whose `frame_length` is zero has not
//! been written yet, which is how receivers find gaps.

use super::memory::TermMemory;
use super::position::{
    align_frame, compute_position, max_message_length, partition_index, position_bits, term_id_of, term_offset_of,
    FRAME_ALIGNMENT,
};
use crate::wire::{flags, DataHeader, FrameType, DATA_HEADER_LENGTH};

/// Number of term partitions in a log.
pub const PARTITION_COUNT: usize = 3;

/// The identity of one stream instance: what every data header of the log carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamIdentity {
    /// Publication session.
    pub session_id: i32,
    /// Application-chosen stream.
    pub stream_id: i32,
    /// Term id of position 0.
    pub initial_term_id: i32,
    /// Bytes per term, a power of two.
    pub term_length: u32,
}

impl StreamIdentity {
    /// `log2(term_length)`.
    pub fn position_bits(&self) -> u32 {
        position_bits(self.term_length)
    }

    /// The stream position of `(term_id, term_offset)`.
    pub fn position(&self, term_id: i32, term_offset: i32) -> i64 {
        compute_position(term_id, term_offset, self.position_bits(), self.initial_term_id)
    }

    /// The term id holding `position`.
    pub fn term_id(&self, position: i64) -> i32 {
        term_id_of(position, self.position_bits(), self.initial_term_id)
    }

    /// The offset of `position` within its term.
    pub fn term_offset(&self, position: i64) -> i32 {
        term_offset_of(position, self.term_length)
    }

    /// The largest position this stream can reach (`term_length * 2^31`).
    pub fn max_position(&self) -> i64 {
        super::position::max_position(self.term_length)
    }
}

/// What happened to an append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The message was written; the value is the new tail position (end of the message).
    Appended(i64),
    /// The message did not fit in the rest of the term: the term was padded and the tail moved
    /// to the start of the next term; the caller appends again.
    Padded(i64),
    /// The stream would pass its maximum position.
    MaxPositionExceeded,
}

/// The three term partitions of one stream.
pub struct LogBuffer {
    identity: StreamIdentity,
    partitions: [TermMemory; PARTITION_COUNT],
}

impl std::fmt::Debug for LogBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogBuffer").field("identity", &self.identity).finish_non_exhaustive()
    }
}

impl LogBuffer {
    /// Zeroed partitions for `identity`, each its own lazily committed mapping
    /// ([`TermMemory`]): untouched pages cost nothing, and dropping the log returns the memory.
    pub fn new(identity: StreamIdentity) -> Self {
        let length = identity.term_length as usize;
        LogBuffer {
            identity,
            partitions: [TermMemory::zeroed(length), TermMemory::zeroed(length), TermMemory::zeroed(length)],
        }
    }

    /// The stream this log belongs to.
    pub fn identity(&self) -> &StreamIdentity {
        &self.identity
    }

    /// The partition holding the term of `position`.
    fn partition_of(&self, position: i64) -> usize {
        partition_index(position >> self.identity.position_bits())
    }

    /// The whole term buffer holding `position`.
    pub fn term(&self, position: i64) -> &[u8] {
        &self.partitions[self.partition_of(position)]
    }

    /// The whole term buffer holding `position`, writable.
    pub fn term_mut(&mut self, position: i64) -> &mut [u8] {
        let index = self.partition_of(position);
        &mut self.partitions[index]
    }

    /// Zeroes the term that held `position` so it can be reused for a later term.
    pub fn clean_term(&mut self, position: i64) {
        self.term_mut(position).fill(0);
    }

    /// The largest message a publication on this log may offer.
    pub fn max_message_length(&self) -> usize {
        max_message_length(self.identity.term_length)
    }

    /// Bytes `length` bytes of payload take in the log when fragmented for `mtu`.
    pub fn framed_length(length: usize, mtu: u32) -> usize {
        super::position::fragmented_length(length, mtu as usize - DATA_HEADER_LENGTH)
    }

    /// Appends one message at `tail`, fragmenting it into frames of at most `mtu` bytes.
    ///
    /// The caller has checked the publication window and `payload.len() <= max_message_length()`.
    pub fn append(&mut self, tail: i64, payload: &[u8], mtu: u32, reserved_value: i64) -> AppendOutcome {
        let identity = self.identity;
        let term_length = identity.term_length as usize;
        let needed = Self::framed_length(payload.len(), mtu).max(align_frame(DATA_HEADER_LENGTH));
        if tail + needed as i64 > identity.max_position() {
            return AppendOutcome::MaxPositionExceeded;
        }
        let term_offset = identity.term_offset(tail) as usize;
        let term_id = identity.term_id(tail);
        if term_offset + needed > term_length {
            let pad = DataHeader {
                frame_length: (term_length - term_offset) as i32,
                flags: flags::UNFRAGMENTED,
                frame_type: FrameType::Pad,
                term_offset: term_offset as i32,
                session_id: identity.session_id,
                stream_id: identity.stream_id,
                term_id,
                reserved_value: 0,
            };
            let term = self.term_mut(tail);
            pad.emit(&mut term[term_offset..term_offset + DATA_HEADER_LENGTH]);
            return AppendOutcome::Padded(tail + (term_length - term_offset) as i64);
        }
        let max_payload = mtu as usize - DATA_HEADER_LENGTH;
        let term = self.term_mut(tail);
        let mut offset = term_offset;
        let mut remaining = payload;
        let mut first = true;
        loop {
            let chunk = remaining.len().min(max_payload);
            let last = chunk == remaining.len();
            let mut frame_flags = 0;
            if first {
                frame_flags |= flags::BEGIN;
            }
            if last {
                frame_flags |= flags::END;
            }
            let header = DataHeader {
                frame_length: (DATA_HEADER_LENGTH + chunk) as i32,
                flags: frame_flags,
                frame_type: FrameType::Data,
                term_offset: offset as i32,
                session_id: identity.session_id,
                stream_id: identity.stream_id,
                term_id,
                reserved_value,
            };
            header.emit(&mut term[offset..offset + DATA_HEADER_LENGTH]);
            let body = offset + DATA_HEADER_LENGTH;
            term[body..body + chunk].copy_from_slice(&remaining[..chunk]);
            let aligned = align_frame(DATA_HEADER_LENGTH + chunk);
            // Zero the alignment padding: the term may be reused from an earlier term.
            term[body + chunk..offset + aligned].fill(0);
            offset += aligned;
            remaining = &remaining[chunk..];
            first = false;
            if last {
                break;
            }
        }
        AppendOutcome::Appended(tail + (offset - term_offset) as i64)
    }

    /// Copies a received DATA datagram into the log at `position` (its first frame's position).
    ///
    /// The caller has checked that the datagram lies within one term.
    pub fn insert(&mut self, position: i64, datagram: &[u8]) {
        let offset = self.identity.term_offset(position) as usize;
        let term = self.term_mut(position);
        let end = (offset + datagram.len()).min(term.len());
        let length = end - offset;
        // Copy the body first and the first frame's length word last, as Aeron's rebuilder does,
        // so a concurrent scanner never sees a frame before its body.
        term[offset + 4..end].copy_from_slice(&datagram[4..length]);
        term[offset..offset + 4].copy_from_slice(&datagram[..4]);
    }

    /// Scans frames forward from `position` while they are complete (non-zero frame length),
    /// returning the position after the last complete frame, bounded by `limit` and the term end.
    pub fn scan_complete(&self, position: i64, limit: i64) -> i64 {
        let term_length = self.identity.term_length as i64;
        let term = self.term(position);
        let start = self.identity.term_offset(position) as i64;
        let end = (start + (limit - position)).min(term_length);
        let mut offset = start;
        while offset < end {
            let frame_length = read_frame_length(term, offset as usize);
            if frame_length <= 0 {
                break;
            }
            let frame_type = read_frame_type(term, offset as usize);
            // A PAD covers `frame_length` bytes (to the end of the term when the publisher
            // pads, a gap when a receiver gives up on it); never past the term.
            let advance = if frame_type == FrameType::Pad.code() {
                (align_frame(frame_length as usize) as i64).min(term_length - offset)
            } else {
                align_frame(frame_length as usize) as i64
            };
            offset += advance;
        }
        position + (offset.min(term_length) - start)
    }

    /// Covers `length` bytes at `position` (a gap that will never be repaired) with a PAD frame
    /// so readers skip it.
    pub fn fill_gap(&mut self, position: i64, length: usize) {
        let identity = self.identity;
        let offset = identity.term_offset(position) as usize;
        let pad = DataHeader {
            frame_length: length as i32,
            flags: flags::UNFRAGMENTED,
            frame_type: FrameType::Pad,
            term_offset: offset as i32,
            session_id: identity.session_id,
            stream_id: identity.stream_id,
            term_id: identity.term_id(position),
            reserved_value: 0,
        };
        let term = self.term_mut(position);
        if offset + DATA_HEADER_LENGTH <= term.len() {
            pad.emit(&mut term[offset..offset + DATA_HEADER_LENGTH]);
        }
    }

    /// The first gap (run of unwritten 32-byte slots) between `position` and `limit` within the
    /// term of `position`: `(gap position, gap length)`.
    pub fn find_gap(&self, position: i64, limit: i64) -> Option<(i64, usize)> {
        let complete = self.scan_complete(position, limit);
        if complete >= limit {
            return None;
        }
        let term = self.term(complete);
        let term_length = self.identity.term_length as i64;
        let start = self.identity.term_offset(complete) as i64;
        let end = (start + (limit - complete)).min(term_length);
        let mut offset = start;
        while offset < end && read_frame_length(term, offset as usize) == 0 {
            offset += FRAME_ALIGNMENT as i64;
        }
        let length = (offset.min(end) - start) as usize;
        (length > 0).then_some((complete, length))
    }
}

impl super::traits::SenderLog for LogBuffer {
    fn max_message_length(&self) -> usize {
        LogBuffer::max_message_length(self)
    }

    fn scan_datagram(&self, position: i64, max: usize, out: &mut [u8]) -> (usize, i64) {
        let term = self.term(position);
        let term_length = self.identity.term_length as usize;
        let start = self.identity.term_offset(position) as usize;
        let limit = max.min(term_length - start);
        let mut offset = start;
        while offset - start < limit {
            let frame_length = read_frame_length(term, offset);
            if frame_length <= 0 {
                break;
            }
            if read_frame_type(term, offset) == FrameType::Pad.code() {
                if offset == start {
                    out[..DATA_HEADER_LENGTH].copy_from_slice(&term[offset..offset + DATA_HEADER_LENGTH]);
                    return (DATA_HEADER_LENGTH, (term_length - start) as i64);
                }
                break;
            }
            let aligned = align_frame(frame_length as usize);
            if offset - start + aligned > limit {
                break;
            }
            offset += aligned;
        }
        let length = offset - start;
        out[..length].copy_from_slice(&term[start..offset]);
        (length, length as i64)
    }
}

impl super::traits::ReceiverLog for LogBuffer {
    fn insert(&mut self, position: i64, datagram: &[u8]) {
        LogBuffer::insert(self, position, datagram)
    }

    fn scan_complete(&self, position: i64, limit: i64) -> i64 {
        LogBuffer::scan_complete(self, position, limit)
    }

    fn find_gap(&self, position: i64, limit: i64) -> Option<(i64, usize)> {
        LogBuffer::find_gap(self, position, limit)
    }

    fn fill_gap(&mut self, position: i64, length: usize) {
        LogBuffer::fill_gap(self, position, length)
    }

    fn clean_term(&mut self, position: i64) {
        LogBuffer::clean_term(self, position)
    }
}

/// The frame length stored at `offset` of a term (0 when nothing was written there).
pub fn read_frame_length(term: &[u8], offset: usize) -> i32 {
    i32::from_le_bytes([term[offset], term[offset + 1], term[offset + 2], term[offset + 3]])
}

/// The frame type code stored at `offset` of a term.
pub fn read_frame_type(term: &[u8], offset: usize) -> i16 {
    i16::from_le_bytes([term[offset + 6], term[offset + 7]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> StreamIdentity {
        StreamIdentity { session_id: 7, stream_id: 10, initial_term_id: 100, term_length: 64 * 1024 }
    }

    #[test]
    fn appends_and_scans_unfragmented_messages() {
        let mut log = LogBuffer::new(identity());
        let AppendOutcome::Appended(tail) = log.append(0, b"hello", 1408, 0) else { panic!() };
        assert_eq!(tail, 64);
        let AppendOutcome::Appended(tail) = log.append(tail, &[], 1408, 0) else { panic!() };
        assert_eq!(tail, 96);
        assert_eq!(log.scan_complete(0, 1 << 20), 96);
        let header = DataHeader::parse(&log.term(0)[..32]).unwrap();
        assert_eq!(header.frame_length, 37);
        assert_eq!(header.flags, flags::UNFRAGMENTED);
        assert_eq!(header.term_id, 100);
    }

    #[test]
    fn fragments_large_messages() {
        let mut log = LogBuffer::new(identity());
        let payload: Vec<u8> = (0..3000).map(|i| i as u8).collect();
        let AppendOutcome::Appended(tail) = log.append(0, &payload, 1408, 0) else { panic!() };
        assert_eq!(tail, 1408 + 1408 + 288);
        let flags_seen: Vec<u8> =
            [0usize, 1408, 2816].iter().map(|&o| DataHeader::parse(&log.term(0)[o..o + 32]).unwrap().flags).collect();
        assert_eq!(flags_seen, vec![0x80, 0x00, 0x40]);
    }

    #[test]
    fn pads_the_end_of_a_term() {
        let mut log = LogBuffer::new(identity());
        let tail = 65536 - 64;
        assert_eq!(log.append(tail, &[0u8; 100], 1408, 0), AppendOutcome::Padded(65536));
        assert_eq!(log.scan_complete(tail, 65536), 65536);
        let AppendOutcome::Appended(next) = log.append(65536, &[0u8; 100], 1408, 0) else { panic!() };
        assert_eq!(next, 65536 + 160);
    }

    #[test]
    fn finds_gaps_between_received_frames() {
        let mut source = LogBuffer::new(identity());
        let mut tail = 0;
        for _ in 0..4 {
            let AppendOutcome::Appended(t) = source.append(tail, &[1u8; 20], 1408, 0) else { panic!() };
            tail = t;
        }
        let mut sink = LogBuffer::new(identity());
        sink.insert(0, &source.term(0)[0..64]);
        sink.insert(192, &source.term(0)[192..256]);
        assert_eq!(sink.scan_complete(0, 256), 64);
        assert_eq!(sink.find_gap(0, 256), Some((64, 128)));
        sink.insert(64, &source.term(0)[64..192]);
        assert_eq!(sink.find_gap(0, 256), None);
    }

    #[test]
    fn refuses_to_pass_the_maximum_position() {
        let mut log = LogBuffer::new(identity());
        let max = identity().max_position();
        assert_eq!(log.append(max - 32, &[0u8; 64], 1408, 0), AppendOutcome::MaxPositionExceeded);
    }
}
