//! ERR (0x04): a receiver reports an error to the sender, e.g. a rejected image (spec §4.6).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                     frame_length (40 + L)                     |  0
//! +---------------+-------+-+-----+-------------------------------+
//! |  version (0)  |   0   |G|  0  |          type (0x04)          |  4
//! +---------------+-------+-+-----+-------------------------------+
//! |                          session_id                           |  8
//! +---------------------------------------------------------------+
//! |                           stream_id                           | 12
//! +---------------------------------------------------------------+
//! |                       receiver_id (i64)                       | 16
//! |                                                               |
//! +---------------------------------------------------------------+
//! |              group_tag (i64, valid iff G is set)              | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                          error_code                           | 32
//! +---------------------------------------------------------------+
//! |                      error_length (L <= 1023)                 | 36
//! +---------------------------------------------------------------+
//! |              error text, L bytes, no padding ...              | 40
//! +---------------------------------------------------------------+
//! ```
//!
//! G = HAS_GROUP_TAG (0x08). All integers little-endian.

use super::error::WireError;
use super::flags;
use super::header::{emit_control_header, parse_control_header, read_i32, read_i64, write_i32, write_i64, FrameType};

mod field {
    use crate::wire::header::Field;
    pub const SESSION_ID: Field = 8..12;
    pub const STREAM_ID: Field = 12..16;
    pub const RECEIVER_ID: Field = 16..24;
    pub const GROUP_TAG: Field = 24..32;
    pub const ERROR_CODE: Field = 32..36;
    pub const ERROR_LENGTH: Field = 36..40;
    pub const MESSAGE: usize = 40;
}

/// Longest error text Aeron sends.
pub const MAX_ERROR_MESSAGE_LENGTH: usize = 1023;

/// Aeron error code for a rejected image.
pub const ERROR_CODE_IMAGE_REJECTED: i32 = 13;
/// Aeron error code for a revoked publication.
pub const ERROR_CODE_PUBLICATION_REVOKED: i32 = 14;

/// An error frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ErrorFrame {
    /// HAS_GROUP_TAG (0x08) flag.
    pub flags: u8,
    /// Publication session.
    pub session_id: i32,
    /// Stream.
    pub stream_id: i32,
    /// Receiver endpoint id.
    pub receiver_id: i64,
    /// Raw group tag field; only meaningful with flag 0x08 (see [`ErrorFrame::group_tag`]).
    /// Aeron 1.48 puts garbage (100) here when the flag is clear; it is kept for re-encoding.
    pub group_tag: i64,
    /// Error code, e.g. [`ERROR_CODE_IMAGE_REJECTED`].
    pub error_code: i32,
    /// Error text (UTF-8 in practice, not NUL-terminated), at most 1023 bytes on the wire.
    pub message: Vec<u8>,
}

impl ErrorFrame {
    /// Length of the fixed part.
    pub const HEADER_LENGTH: usize = 40;

    /// Decodes an ERR frame like the Aeron sender: datagram ≥ 40 and ≥ `frame_length`; also
    /// `0 <= error_length <= 1023` and the text within the datagram.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let header = parse_control_header(bytes, FrameType::Error, Self::HEADER_LENGTH)?;
        if usize::try_from(header.frame_length).is_ok_and(|length| length > bytes.len()) {
            return Err(WireError::BadFrameLength {
                frame: "ERR",
                frame_length: header.frame_length,
                datagram_length: bytes.len(),
            });
        }
        let error_length = read_i32(bytes, field::ERROR_LENGTH);
        let length = usize::try_from(error_length)
            .ok()
            .filter(|&length| length <= MAX_ERROR_MESSAGE_LENGTH)
            .ok_or(WireError::Invalid { frame: "ERR", field: "error_length", value: error_length.into() })?;
        let message = bytes.get(field::MESSAGE..field::MESSAGE + length).ok_or(WireError::Truncated {
            frame: "ERR",
            needed: field::MESSAGE + length,
            actual: bytes.len(),
        })?;
        Ok(ErrorFrame {
            flags: header.flags,
            session_id: read_i32(bytes, field::SESSION_ID),
            stream_id: read_i32(bytes, field::STREAM_ID),
            receiver_id: read_i64(bytes, field::RECEIVER_ID),
            group_tag: read_i64(bytes, field::GROUP_TAG),
            error_code: read_i32(bytes, field::ERROR_CODE),
            message: message.to_vec(),
        })
    }

    /// The group tag if flag 0x08 says it is valid.
    pub fn group_tag(&self) -> Option<i64> {
        (self.flags & flags::ERR_HAS_GROUP_TAG != 0).then_some(self.group_tag)
    }

    /// The text, lossily decoded as UTF-8.
    pub fn message_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.message)
    }

    /// 40 + message length, the message being cut at 1023 bytes.
    pub fn encoded_length(&self) -> usize {
        Self::HEADER_LENGTH + self.message.len().min(MAX_ERROR_MESSAGE_LENGTH)
    }

    /// Writes the frame to the start of `out`; returns [`ErrorFrame::encoded_length`]. A
    /// message longer than 1023 bytes is cut to 1023 bytes.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than the encoded length (a caller bug).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let length = self.encoded_length();
        let out = &mut out[..length];
        let message = &self.message[..length - Self::HEADER_LENGTH];
        emit_control_header(out, FrameType::Error, self.flags, length);
        write_i32(out, field::SESSION_ID, self.session_id);
        write_i32(out, field::STREAM_ID, self.stream_id);
        write_i64(out, field::RECEIVER_ID, self.receiver_id);
        write_i64(out, field::GROUP_TAG, self.group_tag);
        write_i32(out, field::ERROR_CODE, self.error_code);
        // At most 1023, fits.
        write_i32(out, field::ERROR_LENGTH, message.len() as i32);
        out[field::MESSAGE..].copy_from_slice(message);
        length
    }

    /// The encoded frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0; self.encoded_length()];
        self.emit(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured() -> ErrorFrame {
        ErrorFrame {
            flags: 0,
            session_id: -1401599016,
            stream_id: 1001,
            receiver_id: -1826897948636844589,
            group_tag: 100,
            error_code: ERROR_CODE_IMAGE_REJECTED,
            message: b"vector test: image rejected".to_vec(),
        }
    }

    #[test]
    fn matches_captured_bytes() {
        // unicast_reject.json #8.
        let mut golden = vec![
            0x43, 0, 0, 0, 0, 0, 0x04, 0, 0xd8, 0x4b, 0x75, 0xac, 0xe9, 0x03, 0, 0, 0xd3, 0x6d, 0x9c, 0xba, 0xfe, 0x8d,
            0xa5, 0xe6, 0x64, 0, 0, 0, 0, 0, 0, 0, 0x0d, 0, 0, 0, 0x1b, 0, 0, 0,
        ];
        golden.extend_from_slice(b"vector test: image rejected");
        let frame = ErrorFrame::parse(&golden).unwrap();
        assert_eq!(frame, captured());
        assert_eq!(frame.group_tag(), None);
        assert_eq!(frame.message_lossy(), "vector test: image rejected");
        let mut out = vec![0xa5u8; golden.len()];
        assert_eq!(frame.emit(&mut out), 67);
        assert_eq!(out, golden);
    }

    #[test]
    fn group_tag_honours_flag() {
        let tagged = ErrorFrame { flags: flags::ERR_HAS_GROUP_TAG, group_tag: 1001, ..captured() };
        assert_eq!(tagged.group_tag(), Some(1001));
        assert_eq!(ErrorFrame::parse(&tagged.to_bytes()), Ok(tagged));
    }

    #[test]
    fn rejects_bad_lengths() {
        let bytes = captured().to_bytes();
        assert!(matches!(ErrorFrame::parse(&bytes[..66]), Err(WireError::BadFrameLength { frame_length: 67, .. })));
        let mut lying = bytes.clone();
        lying[36] = 200; // error_length beyond the datagram
        assert!(matches!(ErrorFrame::parse(&lying), Err(WireError::Truncated { .. })));
        lying[36..40].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(matches!(ErrorFrame::parse(&lying), Err(WireError::Invalid { field: "error_length", value: -1, .. })));
        lying[36..40].copy_from_slice(&1024i32.to_le_bytes());
        assert!(ErrorFrame::parse(&lying).is_err());
    }

    #[test]
    fn long_messages_are_cut_at_1023_bytes() {
        let long = ErrorFrame { message: vec![b'x'; 2000], ..captured() };
        let bytes = long.to_bytes();
        assert_eq!(bytes.len(), 40 + 1023);
        assert_eq!(ErrorFrame::parse(&bytes).unwrap().message.len(), 1023);
    }
}
