//! DATA (0x01) and PAD (0x00) frames: the 32-byte data header, heartbeats, and the iterator
//! over the frames batched in one data datagram (spec §1, §4.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                         frame_length                          |  0
//! +---------------+-+-+-+---------+-------------------------------+
//! |  version (0)  |B|E|S|   0     |      type (0x01 / 0x00)       |  4
//! +---------------+-+-+-+---------+-------------------------------+
//! |                          term_offset                          |  8
//! +---------------------------------------------------------------+
//! |                          session_id                           | 12
//! +---------------------------------------------------------------+
//! |                           stream_id                           | 16
//! +---------------------------------------------------------------+
//! |                            term_id                            | 20
//! +---------------------------------------------------------------+
//! |                     reserved_value (i64)                      | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |             payload (frame_length - 32 bytes) ...             | 32
//! +---------------------------------------------------------------+
//! |            zero padding up to a multiple of 32 ...            |
//! +---------------------------------------------------------------+
//! ```
//!
//! B = BEGIN (0x80), E = END (0x40), S = EOS (0x20, heartbeats only). All integers little-endian.
//! A heartbeat is a 32-byte datagram with `frame_length == 0`; a PAD frame's `frame_length`
//! covers the rest of the term, but only its 32-byte header travels on the wire.

use super::error::WireError;
use super::flags;
use super::header::{
    field as header_field, read_i16, read_i32, read_i64, write_i32, write_i64, FrameHeader, FrameType, CURRENT_VERSION,
};

/// Length of the data header (DATA and PAD).
pub const DATA_HEADER_LENGTH: usize = 32;

/// Every frame in a term starts at a multiple of [`crate::limits::FRAME_ALIGNMENT`] (as `usize`).
const FRAME_ALIGNMENT: usize = crate::limits::FRAME_ALIGNMENT as usize;

mod field {
    use crate::wire::header::Field;
    pub const TERM_OFFSET: Field = 8..12;
    pub const SESSION_ID: Field = 12..16;
    pub const STREAM_ID: Field = 16..20;
    pub const TERM_ID: Field = 20..24;
    pub const RESERVED_VALUE: Field = 24..32;
}

/// Rounds `length` up to the next multiple of the frame alignment (32 bytes).
///
/// # Panics
///
/// On overflow, i.e. only for `length > usize::MAX - 31` (never for an `i32` frame length).
pub const fn align_frame_length(length: usize) -> usize {
    (length + (FRAME_ALIGNMENT - 1)) & !(FRAME_ALIGNMENT - 1)
}

/// The 32-byte header of a DATA or PAD frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// 32 + payload length (unaligned); 0 for a heartbeat; for PAD the padded region's length.
    pub frame_length: i32,
    /// BEGIN / END / EOS flags (see [`crate::wire::flags`]).
    pub flags: u8,
    /// [`FrameType::Data`] or [`FrameType::Pad`].
    pub frame_type: FrameType,
    /// Offset of this frame in its term (a multiple of 32).
    pub term_offset: i32,
    /// Publication session.
    pub session_id: i32,
    /// Stream.
    pub stream_id: i32,
    /// Term the frame belongs to.
    pub term_id: i32,
    /// Application/driver value, 0 by default.
    pub reserved_value: i64,
}

impl DataHeader {
    /// Decodes the data header at the start of `bytes` (only 32 bytes are needed; the payload is
    /// not checked here, see [`DataFrames`]).
    ///
    /// Checks: length ≥ 32, version 0, type DATA or PAD, `term_offset` a non-negative multiple
    /// of 32, and `frame_length` either 0 (a DATA heartbeat) or ≥ 32.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let header = FrameHeader::parse(bytes).map_err(|error| match error {
            WireError::Truncated { actual, .. } => {
                WireError::Truncated { frame: "DATA", needed: DATA_HEADER_LENGTH, actual }
            }
            other => other,
        })?;
        let frame = match header.frame_type {
            FrameType::Data => "DATA",
            FrameType::Pad => "PAD",
            other => return Err(WireError::WrongType { expected: "DATA or PAD", actual: other.code() }),
        };
        if bytes.len() < DATA_HEADER_LENGTH {
            return Err(WireError::Truncated { frame, needed: DATA_HEADER_LENGTH, actual: bytes.len() });
        }
        let frame_length = header.frame_length;
        let heartbeat = frame_length == 0 && header.frame_type == FrameType::Data;
        if !heartbeat && frame_length < DATA_HEADER_LENGTH as i32 {
            return Err(WireError::BadFrameLength { frame, frame_length, datagram_length: bytes.len() });
        }
        let term_offset = read_i32(bytes, field::TERM_OFFSET);
        if term_offset < 0 || term_offset % FRAME_ALIGNMENT as i32 != 0 {
            return Err(WireError::Misaligned { term_offset });
        }
        Ok(DataHeader {
            frame_length,
            flags: header.flags,
            frame_type: header.frame_type,
            term_offset,
            session_id: read_i32(bytes, field::SESSION_ID),
            stream_id: read_i32(bytes, field::STREAM_ID),
            term_id: read_i32(bytes, field::TERM_ID),
            reserved_value: read_i64(bytes, field::RESERVED_VALUE),
        })
    }

    /// Writes the 32 header bytes to the start of `out` (the payload is not touched).
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`DATA_HEADER_LENGTH`] (a caller bug, not network input).
    pub fn emit(&self, out: &mut [u8]) {
        let out = &mut out[..DATA_HEADER_LENGTH];
        FrameHeader { frame_length: self.frame_length, version: 0, flags: self.flags, frame_type: self.frame_type }
            .emit(out);
        write_i32(out, field::TERM_OFFSET, self.term_offset);
        write_i32(out, field::SESSION_ID, self.session_id);
        write_i32(out, field::STREAM_ID, self.stream_id);
        write_i32(out, field::TERM_ID, self.term_id);
        write_i64(out, field::RESERVED_VALUE, self.reserved_value);
    }

    /// Writes header, `payload` and zero padding up to the next multiple of 32, as a frame
    /// appears in a datagram; returns the bytes written (`align32(32 + payload.len())`).
    ///
    /// The header's `frame_length` is written as it is; it should be `32 + payload.len()`.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than the aligned frame (a caller bug).
    pub fn emit_frame(&self, payload: &[u8], out: &mut [u8]) -> usize {
        let end = DATA_HEADER_LENGTH + payload.len();
        let aligned = align_frame_length(end);
        self.emit(out);
        out[DATA_HEADER_LENGTH..end].copy_from_slice(payload);
        out[end..aligned].fill(0);
        aligned
    }

    /// A heartbeat: the 32-byte DATA frame with `frame_length` 0 that carries the sender's
    /// position (flags BEGIN|END, plus EOS when `end_of_stream`).
    pub fn heartbeat(session_id: i32, stream_id: i32, term_id: i32, term_offset: i32, end_of_stream: bool) -> Self {
        let eos = if end_of_stream { flags::EOS } else { 0 };
        DataHeader {
            frame_length: 0,
            flags: flags::UNFRAGMENTED | eos,
            frame_type: FrameType::Data,
            term_offset,
            session_id,
            stream_id,
            term_id,
            reserved_value: 0,
        }
    }

    /// Whether `datagram` is a heartbeat: exactly 32 bytes, version 0, type DATA,
    /// `frame_length` 0 (the receiver's test in Aeron).
    pub fn is_heartbeat_datagram(datagram: &[u8]) -> bool {
        datagram.len() == DATA_HEADER_LENGTH
            && matches!(
                FrameHeader::parse(datagram),
                Ok(FrameHeader { frame_length: 0, frame_type: FrameType::Data, .. })
            )
    }

    /// Whether the EOS flag (0x20) is set (only heartbeats carry it).
    pub fn is_end_of_stream(&self) -> bool {
        self.flags & flags::EOS != 0
    }

    /// Bytes of payload on the wire: `frame_length - 32` for DATA, 0 for heartbeats and PAD
    /// (a PAD frame only carries its header; the padded length is `frame_length`).
    pub fn payload_length(&self) -> usize {
        match self.frame_type {
            FrameType::Data => usize::try_from(self.frame_length).unwrap_or(0).saturating_sub(DATA_HEADER_LENGTH),
            _ => 0,
        }
    }

    /// Bytes this frame occupies in a datagram: `align32(frame_length)` for DATA, 32 for PAD
    /// and heartbeats.
    pub fn wire_length(&self) -> usize {
        match self.frame_type {
            FrameType::Data if self.frame_length > 0 => align_frame_length(DATA_HEADER_LENGTH + self.payload_length()),
            _ => DATA_HEADER_LENGTH,
        }
    }
}

/// Iterates the frames of a DATA datagram.
///
/// Each item is `Ok((DataHeader, payload))` for a DATA frame. A heartbeat (a 32-byte datagram
/// with `frame_length` 0) yields `(header, &[])`. A PAD frame yields `(header, &[])` and ends
/// the iteration: only its 32-byte header is on the wire, so it must be the datagram's last 32
/// bytes. Frames are 32-byte aligned and contiguous (trailing padding included); a frame whose
/// aligned length runs past the datagram, trailing bytes after a PAD, a zero `frame_length` in
/// a longer datagram, or a `term_id` / `session_id` / `stream_id` / `term_offset` that does not
/// continue the first frame yields one `Err` and stops. An empty datagram yields one `Err`.
#[derive(Clone, Debug)]
pub struct DataFrames<'a> {
    datagram: &'a [u8],
    offset: usize,
    first: Option<DataHeader>,
    done: bool,
}

impl<'a> DataFrames<'a> {
    /// Starts iterating `datagram`.
    pub fn new(datagram: &'a [u8]) -> Self {
        DataFrames { datagram, offset: 0, first: None, done: false }
    }

    fn next_frame(&mut self) -> Result<(DataHeader, &'a [u8]), WireError> {
        let datagram = self.datagram;
        let rest = &datagram[self.offset..];
        let header = DataHeader::parse(rest)?;
        let frame = header.frame_type.name();
        let bad_length =
            || WireError::BadFrameLength { frame, frame_length: header.frame_length, datagram_length: rest.len() };
        if let Some(first) = self.first {
            if header.term_id != first.term_id {
                return Err(invalid(frame, "term_id", header.term_id.into()));
            }
            if header.session_id != first.session_id {
                return Err(invalid(frame, "session_id", header.session_id.into()));
            }
            if header.stream_id != first.stream_id {
                return Err(invalid(frame, "stream_id", header.stream_id.into()));
            }
            // `offset` is at most the datagram length, far below i64 range.
            let expected = i64::from(first.term_offset) + self.offset as i64;
            if i64::from(header.term_offset) != expected {
                return Err(invalid(frame, "term_offset", header.term_offset.into()));
            }
        } else {
            self.first = Some(header);
        }
        match header.frame_type {
            FrameType::Data if header.frame_length == 0 => {
                // A heartbeat is a datagram of its own.
                if datagram.len() != DATA_HEADER_LENGTH {
                    return Err(bad_length());
                }
                self.done = true;
                Ok((header, &[]))
            }
            FrameType::Data => {
                let end = DATA_HEADER_LENGTH + header.payload_length();
                let aligned = align_frame_length(end);
                if aligned > rest.len() {
                    return Err(bad_length());
                }
                self.offset += aligned;
                self.done = self.offset == datagram.len();
                Ok((header, &rest[DATA_HEADER_LENGTH..end]))
            }
            _ => {
                if rest.len() != DATA_HEADER_LENGTH {
                    return Err(bad_length());
                }
                self.done = true;
                Ok((header, &[]))
            }
        }
    }
}

fn invalid(frame: &'static str, field: &'static str, value: i64) -> WireError {
    WireError::Invalid { frame, field, value }
}

/// How many DATA frames `datagram` holds when it is nothing but DATA frames (none a heartbeat)
/// of one stream and term, back to back from a 32-byte aligned term offset, each at its own term
/// offset and whole: what a publication sends, and exactly the datagrams that [`DataFrames`]
/// passes without an error or a PAD. `None` for anything else, which the caller then walks with
/// [`DataFrames`] to learn what is wrong. Reads only the fields those checks need (the
/// receiver's per-frame check of every datagram).
pub fn data_frame_count(datagram: &[u8]) -> Option<usize> {
    let first = datagram.get(..DATA_HEADER_LENGTH)?;
    let term_offset = i64::from(read_i32(first, field::TERM_OFFSET));
    let (session_id, stream_id, term_id) =
        (read_i32(first, field::SESSION_ID), read_i32(first, field::STREAM_ID), read_i32(first, field::TERM_ID));
    if term_offset < 0 || term_offset % FRAME_ALIGNMENT as i64 != 0 {
        return None;
    }
    let mut offset = 0;
    let mut frames = 0;
    while offset < datagram.len() {
        let frame = datagram.get(offset..offset + DATA_HEADER_LENGTH)?;
        let frame_length = read_i32(frame, header_field::FRAME_LENGTH);
        let whole = frame[header_field::VERSION] == CURRENT_VERSION
            && read_i16(frame, header_field::TYPE) == FrameType::Data.code()
            && frame_length >= DATA_HEADER_LENGTH as i32
            && i64::from(read_i32(frame, field::TERM_OFFSET)) == term_offset + offset as i64
            && read_i32(frame, field::SESSION_ID) == session_id
            && read_i32(frame, field::STREAM_ID) == stream_id
            && read_i32(frame, field::TERM_ID) == term_id;
        // A frame length ≥ 32 here: positive, far below usize range.
        let end = offset + align_frame_length(frame_length.max(0) as usize);
        if !whole || end > datagram.len() {
            return None;
        }
        offset = end;
        frames += 1;
    }
    Some(frames)
}

impl<'a> Iterator for DataFrames<'a> {
    type Item = Result<(DataHeader, &'a [u8]), WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.next_frame();
        if item.is_err() {
            self.done = true;
        }
        Some(item)
    }
}

impl std::iter::FusedIterator for DataFrames<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(frame_length: i32, term_offset: i32) -> DataHeader {
        DataHeader {
            frame_length,
            flags: flags::UNFRAGMENTED,
            frame_type: FrameType::Data,
            term_offset,
            session_id: -2026710985,
            stream_id: 1001,
            term_id: -639539685,
            reserved_value: 0,
        }
    }

    /// What `data_frame_count` must answer, from the frame-by-frame walk: the frame count when
    /// every frame is a whole DATA frame (no heartbeat, no PAD, no error), else `None`.
    fn counted_by_walking(datagram: &[u8]) -> Option<usize> {
        let frames: Vec<_> = DataFrames::new(datagram).collect::<Result<_, _>>().ok()?;
        let plain = frames.iter().all(|(header, _)| header.frame_type == FrameType::Data && header.frame_length > 0);
        (plain && !frames.is_empty()).then_some(frames.len())
    }

    #[test]
    fn the_one_pass_count_agrees_with_the_frame_by_frame_walk_on_every_corruption() {
        // Frames of 32 + 0, 1, 31, 32 and 100 payload bytes from term offset 4096, back to back.
        let mut datagram = Vec::new();
        for payload in [0usize, 1, 31, 32, 100] {
            let start = datagram.len();
            let frame_length = DATA_HEADER_LENGTH + payload;
            datagram.resize(start + align_frame_length(frame_length), 0xA5);
            header(frame_length as i32, 4096 + start as i32).emit(&mut datagram[start..]);
        }
        assert_eq!(data_frame_count(&datagram), Some(5));
        assert_eq!(counted_by_walking(&datagram), Some(5));
        let mut cases = 0;
        let mut plain = 0;
        // Every byte of every header set to a few values, and every truncation.
        for index in 0..datagram.len() {
            for value in [0x00, 0x01, 0x20, 0x80, 0xFF, datagram[index].wrapping_add(1)] {
                let mut corrupt = datagram.clone();
                corrupt[index] = value;
                let expected = counted_by_walking(&corrupt);
                assert_eq!(data_frame_count(&corrupt), expected, "byte {index} set to {value:#04x}");
                plain += usize::from(expected.is_some());
                cases += 1;
            }
            assert_eq!(data_frame_count(&datagram[..index]), counted_by_walking(&datagram[..index]), "cut at {index}");
        }
        // Both answers occur: payload and flag bytes change nothing, header fields do.
        assert!(plain > 0 && plain < cases, "{plain} of {cases} still plain");
        // A PAD or a heartbeat is never counted: the walk checks those.
        let mut pad = datagram[..32].to_vec();
        pad[6..8].copy_from_slice(&FrameType::Pad.code().to_le_bytes());
        assert_eq!(data_frame_count(&pad), None);
        let heartbeat = {
            let mut bytes = vec![0; 32];
            header(0, 4096).emit(&mut bytes);
            bytes
        };
        assert_eq!(data_frame_count(&heartbeat), None);
    }

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn emits_every_header_byte() {
        let mut out = [0xa5u8; 32];
        DataHeader {
            frame_length: 0x0102_0304,
            flags: 0x80,
            frame_type: FrameType::Data,
            term_offset: 0x1122_3340,
            session_id: -2,
            stream_id: 0x0a0b_0c0d,
            term_id: 0x1a1b_1c1d,
            reserved_value: 0x2122_2324_2526_2728,
        }
        .emit(&mut out);
        assert_eq!(
            out,
            [
                0x04, 0x03, 0x02, 0x01, 0x00, 0x80, 0x01, 0x00, //
                0x40, 0x33, 0x22, 0x11, 0xfe, 0xff, 0xff, 0xff, //
                0x0d, 0x0c, 0x0b, 0x0a, 0x1d, 0x1c, 0x1b, 0x1a, //
                0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,
            ]
        );
    }

    #[test]
    fn decodes_captured_message_and_reemits_it() {
        // unicast_basic.json #4: M1, 26 bytes, frame_length 58, sent as 64 bytes.
        let datagram = hex("3a00000000c001000000000037d83287e90300001b66e1d9000000000000000048656c6c6f204165726f6e207769726520766563746f72202331000000000000");
        let frames: Vec<_> = DataFrames::new(&datagram).collect::<Result<_, _>>().unwrap();
        assert_eq!(frames.len(), 1);
        let (decoded, payload) = frames[0];
        assert_eq!(decoded, header(58, 0));
        assert_eq!(payload, b"Hello Aeron wire vector #1");
        let mut out = vec![0xa5u8; 64];
        assert_eq!(decoded.emit_frame(payload, &mut out), 64);
        assert_eq!(out, datagram);
    }

    #[test]
    fn iterates_batched_frames() {
        // unicast_basic.json #6: M2 (16 bytes) and M3 (empty) in one 96-byte datagram.
        let mut datagram = vec![0u8; 96];
        header(48, 64).emit_frame(&[7; 16], &mut datagram);
        header(32, 128).emit(&mut datagram[64..]);
        let frames: Vec<_> = DataFrames::new(&datagram).collect::<Result<_, _>>().unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].1, &[7; 16]);
        assert_eq!(frames[1].0.term_offset, 128);
        assert!(frames[1].1.is_empty());
    }

    #[test]
    fn recognises_heartbeats() {
        let mut datagram = [0u8; 32];
        DataHeader::heartbeat(1, 2, 3, 3424, true).emit(&mut datagram);
        assert!(DataHeader::is_heartbeat_datagram(&datagram));
        let decoded = DataHeader::parse(&datagram).unwrap();
        assert!(decoded.is_end_of_stream());
        assert_eq!(decoded.flags, 0xe0);
        assert_eq!(decoded.payload_length(), 0);
        let frames: Vec<_> = DataFrames::new(&datagram).collect();
        assert_eq!(frames, vec![Ok((decoded, &[][..]))]);
        // A zero-length message is not a heartbeat.
        header(32, 0).emit(&mut datagram);
        assert!(!DataHeader::is_heartbeat_datagram(&datagram));
        assert!(!DataHeader::is_heartbeat_datagram(&[0u8; 64]));
    }

    #[test]
    fn pad_ends_iteration() {
        // unicast_rollover.json #5.
        let datagram = hex("6007000000c00000a0f80000a6aeb348e9030000660000000000000000000000");
        let frames: Vec<_> = DataFrames::new(&datagram).collect::<Result<_, _>>().unwrap();
        assert_eq!(frames.len(), 1);
        let (pad, payload) = frames[0];
        assert_eq!(pad.frame_type, FrameType::Pad);
        assert_eq!(pad.frame_length, 1888);
        assert_eq!(pad.term_offset, 63648);
        assert_eq!(pad.payload_length(), 0);
        assert_eq!(pad.wire_length(), 32);
        assert!(payload.is_empty());
        // Data followed by PAD at the end of a term is fine; bytes after a PAD are not.
        let mut datagram = vec![0u8; 96];
        header(48, 64).emit_frame(&[1; 16], &mut datagram);
        let mut pad = header(1000, 128);
        pad.frame_type = FrameType::Pad;
        pad.emit(&mut datagram[64..]);
        assert_eq!(DataFrames::new(&datagram).filter(Result::is_ok).count(), 2);
        datagram.extend_from_slice(&[0; 32]);
        assert!(DataFrames::new(&datagram).any(|item| item.is_err()));
    }

    #[test]
    fn rejects_overrunning_and_inconsistent_frames() {
        let mut datagram = vec![0u8; 64];
        header(58, 0).emit(&mut datagram);
        assert!(DataFrames::new(&datagram[..63]).next().unwrap().is_err());
        // Second frame of another term.
        let mut datagram = vec![0u8; 128];
        header(58, 0).emit(&mut datagram);
        let mut other = header(58, 64);
        other.term_id += 1;
        other.emit(&mut datagram[64..]);
        let items: Vec<_> = DataFrames::new(&datagram).collect();
        assert_eq!(items.len(), 2);
        assert!(items[0].is_ok());
        assert!(matches!(items[1], Err(WireError::Invalid { field: "term_id", .. })));
        // Second frame not contiguous in the term.
        header(58, 96).emit(&mut datagram[64..]);
        assert!(matches!(
            DataFrames::new(&datagram).nth(1),
            Some(Err(WireError::Invalid { field: "term_offset", .. }))
        ));
        // A heartbeat-shaped frame inside a longer datagram.
        header(0, 64).emit(&mut datagram[64..]);
        assert!(DataFrames::new(&datagram).nth(1).unwrap().is_err());
        // Empty datagram and short frame lengths.
        assert!(DataFrames::new(&[]).next().unwrap().is_err());
        header(31, 0).emit(&mut datagram);
        assert!(matches!(DataHeader::parse(&datagram), Err(WireError::BadFrameLength { frame_length: 31, .. })));
    }

    #[test]
    fn rejects_misaligned_offsets_and_other_types() {
        let mut bytes = [0u8; 32];
        header(32, 33).emit(&mut bytes);
        assert_eq!(DataHeader::parse(&bytes), Err(WireError::Misaligned { term_offset: 33 }));
        header(32, -32).emit(&mut bytes);
        assert!(DataHeader::parse(&bytes).is_err());
        bytes[6] = 5;
        assert!(matches!(DataHeader::parse(&bytes), Err(WireError::WrongType { actual: 5, .. })));
    }
}
