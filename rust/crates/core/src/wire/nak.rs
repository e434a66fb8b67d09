//! NAK (0x02): a receiver reports a gap it wants retransmitted (spec §4.4).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                       frame_length (28)                       |  0
//! +---------------+---------------+-------------------------------+
//! |  version (0)  |   flags (0)   |          type (0x02)          |  4
//! +---------------+---------------+-------------------------------+
//! |                          session_id                           |  8
//! +---------------------------------------------------------------+
//! |                           stream_id                           | 12
//! +---------------------------------------------------------------+
//! |                            term_id                            | 16
//! +---------------------------------------------------------------+
//! |                          term_offset                          | 20
//! +---------------------------------------------------------------+
//! |                            length                             | 24
//! +---------------------------------------------------------------+
//! ```
//!
//! All integers little-endian. Range checks of `term_offset` against the term length are the
//! sender's (Aeron ignores a NAK with offset < 0 or > term_length − 32).

use super::error::WireError;
use super::header::{emit_control_header, parse_control_header, read_i32, write_i32, FrameType};

mod field {
    use crate::wire::header::Field;
    pub const SESSION_ID: Field = 8..12;
    pub const STREAM_ID: Field = 12..16;
    pub const TERM_ID: Field = 16..20;
    pub const TERM_OFFSET: Field = 20..24;
    pub const LENGTH: Field = 24..28;
}

/// A NAK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Nak {
    /// Publication session.
    pub session_id: i32,
    /// Stream.
    pub stream_id: i32,
    /// Term of the gap.
    pub term_id: i32,
    /// Start of the gap in that term.
    pub term_offset: i32,
    /// Bytes of the gap (a multiple of 32).
    pub length: i32,
}

impl Nak {
    /// Encoded length.
    pub const LENGTH: usize = 28;

    /// Decodes a NAK: version, type and length ≥ 28 (the flags byte is ignored).
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        parse_control_header(bytes, FrameType::Nak, Self::LENGTH)?;
        Ok(Nak {
            session_id: read_i32(bytes, field::SESSION_ID),
            stream_id: read_i32(bytes, field::STREAM_ID),
            term_id: read_i32(bytes, field::TERM_ID),
            term_offset: read_i32(bytes, field::TERM_OFFSET),
            length: read_i32(bytes, field::LENGTH),
        })
    }

    /// Writes the frame (flags 0) to the start of `out`; returns [`Nak::LENGTH`].
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`Nak::LENGTH`] (a caller bug).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let out = &mut out[..Self::LENGTH];
        emit_control_header(out, FrameType::Nak, 0, Self::LENGTH);
        write_i32(out, field::SESSION_ID, self.session_id);
        write_i32(out, field::STREAM_ID, self.stream_id);
        write_i32(out, field::TERM_ID, self.term_id);
        write_i32(out, field::TERM_OFFSET, self.term_offset);
        write_i32(out, field::LENGTH, self.length);
        Self::LENGTH
    }

    /// The encoded frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0; Self::LENGTH];
        self.emit(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_captured_bytes() {
        // unicast_nak.json #19.
        let golden = [
            0x1c, 0, 0, 0, 0, 0, 0x02, 0, 0x25, 0xd2, 0xdf, 0x7e, 0xe9, 0x03, 0, 0, 0x35, 0x65, 0x15, 0xd6, 0, 0x0e, 0,
            0, 0, 0x01, 0, 0,
        ];
        let nak = Nak { session_id: 2128597541, stream_id: 1001, term_id: -703240907, term_offset: 3584, length: 256 };
        assert_eq!(Nak::parse(&golden), Ok(nak));
        let mut out = [0xa5u8; 28];
        assert_eq!(nak.emit(&mut out), 28);
        assert_eq!(out, golden);
        assert!(matches!(
            Nak::parse(&golden[..27]),
            Err(WireError::Truncated { frame: "NAK", needed: 28, actual: 27 })
        ));
    }
}
