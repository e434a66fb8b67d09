//! RSP_SETUP (0x0B): a response-channel server tells the client which session answers it
//! (spec §4.7).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                       frame_length (20)                       |  0
//! +---------------+---------------+-------------------------------+
//! |  version (0)  |   flags (0)   |          type (0x0B)          |  4
//! +---------------+---------------+-------------------------------+
//! |              session_id (of the request publication)          |  8
//! +---------------------------------------------------------------+
//! |               stream_id (of the request publication)          | 12
//! +---------------------------------------------------------------+
//! |                      response_session_id                      | 16
//! +---------------------------------------------------------------+
//! ```
//!
//! All integers little-endian; 20 bytes, not a multiple of 8.

use super::error::WireError;
use super::header::{emit_control_header, parse_control_header, read_i32, write_i32, FrameType};

mod field {
    use crate::wire::header::Field;
    pub const SESSION_ID: Field = 8..12;
    pub const STREAM_ID: Field = 12..16;
    pub const RESPONSE_SESSION_ID: Field = 16..20;
}

/// A response setup frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResponseSetup {
    /// Session of the request publication being answered.
    pub session_id: i32,
    /// Stream of the request publication.
    pub stream_id: i32,
    /// Session id of the server's response publication.
    pub response_session_id: i32,
}

impl ResponseSetup {
    /// Encoded length.
    pub const LENGTH: usize = 20;

    /// Decodes an RSP_SETUP: version, type and length ≥ 20 (flags ignored).
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        parse_control_header(bytes, FrameType::ResponseSetup, Self::LENGTH)?;
        Ok(ResponseSetup {
            session_id: read_i32(bytes, field::SESSION_ID),
            stream_id: read_i32(bytes, field::STREAM_ID),
            response_session_id: read_i32(bytes, field::RESPONSE_SESSION_ID),
        })
    }

    /// Writes the frame (flags 0) to the start of `out`; returns [`ResponseSetup::LENGTH`].
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`ResponseSetup::LENGTH`] (a caller bug).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let out = &mut out[..Self::LENGTH];
        emit_control_header(out, FrameType::ResponseSetup, 0, Self::LENGTH);
        write_i32(out, field::SESSION_ID, self.session_id);
        write_i32(out, field::STREAM_ID, self.stream_id);
        write_i32(out, field::RESPONSE_SESSION_ID, self.response_session_id);
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
        // response_channel.json #5.
        let golden = [0x14, 0, 0, 0, 0, 0, 0x0b, 0, 0x8c, 0x89, 0x36, 0x19, 0x10, 0x27, 0, 0, 0x0c, 0x6b, 0xaa, 0xe9];
        let frame = ResponseSetup { session_id: 423004556, stream_id: 10000, response_session_id: -374707444 };
        assert_eq!(ResponseSetup::parse(&golden), Ok(frame));
        let mut out = [0xa5u8; 20];
        assert_eq!(frame.emit(&mut out), 20);
        assert_eq!(out, golden);
        assert!(ResponseSetup::parse(&golden[..19]).is_err());
    }
}
