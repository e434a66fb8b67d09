//! SM (0x03): status message, the receiver's position and window (spec §4.3).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                     frame_length (36 / 44)                    |  0
//! +---------------+-+-+-----------+-------------------------------+
//! |  version (0)  |S|E|     0     |          type (0x03)          |  4
//! +---------------+-+-+-----------+-------------------------------+
//! |                          session_id                           |  8
//! +---------------------------------------------------------------+
//! |                           stream_id                           | 12
//! +---------------------------------------------------------------+
//! |                      consumption_term_id                      | 16
//! +---------------------------------------------------------------+
//! |                    consumption_term_offset                    | 20
//! +---------------------------------------------------------------+
//! |                        receiver_window                        | 24
//! +---------------------------------------------------------------+
//! |                     receiver_id (i64, only                    | 28
//! |                      4-byte aligned!)                         |
//! +---------------------------------------------------------------+
//! |               group_tag (i64, optional: present               | 36
//! |                 iff frame_length == 44)                       |
//! +---------------------------------------------------------------+
//! ```
//!
//! S = SEND_SETUP (0x80), E = EOS (0x40). All integers little-endian.

use super::error::WireError;
use super::header::{emit_control_header, parse_control_header, read_i32, read_i64, write_i32, write_i64, FrameType};

mod field {
    use crate::wire::header::Field;
    pub const SESSION_ID: Field = 8..12;
    pub const STREAM_ID: Field = 12..16;
    pub const CONSUMPTION_TERM_ID: Field = 16..20;
    pub const CONSUMPTION_TERM_OFFSET: Field = 20..24;
    pub const RECEIVER_WINDOW: Field = 24..28;
    pub const RECEIVER_ID: Field = 28..36;
    pub const GROUP_TAG: Field = 36..44;
}

/// A status message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StatusMessage {
    /// SEND_SETUP (0x80) and EOS (0x40) flags.
    pub flags: u8,
    /// Publication session.
    pub session_id: i32,
    /// Stream.
    pub stream_id: i32,
    /// Term id of the receiver's reported position.
    pub consumption_term_id: i32,
    /// Term offset of that position.
    pub consumption_term_offset: i32,
    /// Bytes the sender may send beyond that position.
    pub receiver_window: i32,
    /// Receiving channel endpoint id.
    pub receiver_id: i64,
    /// Group tag (tagged flow control); sent as the optional 8 bytes at offset 36.
    pub group_tag: Option<i64>,
}

impl StatusMessage {
    /// Length without group tag.
    pub const LENGTH: usize = 36;
    /// Length with group tag.
    pub const LENGTH_WITH_GROUP_TAG: usize = 44;

    /// Decodes an SM like the Aeron sender: datagram ≥ 36 bytes and ≥ `frame_length`. The group
    /// tag is present iff `frame_length == 44`; any other length means "no tag" (spec §4.3).
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let header = parse_control_header(bytes, FrameType::StatusMessage, Self::LENGTH)?;
        if usize::try_from(header.frame_length).is_ok_and(|length| length > bytes.len()) {
            return Err(WireError::BadFrameLength {
                frame: "SM",
                frame_length: header.frame_length,
                datagram_length: bytes.len(),
            });
        }
        let group_tag =
            (header.frame_length == Self::LENGTH_WITH_GROUP_TAG as i32).then(|| read_i64(bytes, field::GROUP_TAG));
        Ok(StatusMessage {
            flags: header.flags,
            session_id: read_i32(bytes, field::SESSION_ID),
            stream_id: read_i32(bytes, field::STREAM_ID),
            consumption_term_id: read_i32(bytes, field::CONSUMPTION_TERM_ID),
            consumption_term_offset: read_i32(bytes, field::CONSUMPTION_TERM_OFFSET),
            receiver_window: read_i32(bytes, field::RECEIVER_WINDOW),
            receiver_id: read_i64(bytes, field::RECEIVER_ID),
            group_tag,
        })
    }

    /// 36, or 44 with a group tag.
    pub fn encoded_length(&self) -> usize {
        if self.group_tag.is_some() {
            Self::LENGTH_WITH_GROUP_TAG
        } else {
            Self::LENGTH
        }
    }

    /// Whether the receiver asks for a SETUP (flag 0x80).
    pub fn is_send_setup(&self) -> bool {
        self.flags & super::flags::SM_SEND_SETUP != 0
    }

    /// Whether the receiver is leaving (flag 0x40).
    pub fn is_end_of_stream(&self) -> bool {
        self.flags & super::flags::SM_EOS != 0
    }

    /// Writes the frame to the start of `out`; returns [`StatusMessage::encoded_length`].
    ///
    /// # Panics
    ///
    /// If `out` is shorter than the encoded length (a caller bug).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let length = self.encoded_length();
        let out = &mut out[..length];
        emit_control_header(out, FrameType::StatusMessage, self.flags, length);
        write_i32(out, field::SESSION_ID, self.session_id);
        write_i32(out, field::STREAM_ID, self.stream_id);
        write_i32(out, field::CONSUMPTION_TERM_ID, self.consumption_term_id);
        write_i32(out, field::CONSUMPTION_TERM_OFFSET, self.consumption_term_offset);
        write_i32(out, field::RECEIVER_WINDOW, self.receiver_window);
        write_i64(out, field::RECEIVER_ID, self.receiver_id);
        if let Some(tag) = self.group_tag {
            write_i64(out, field::GROUP_TAG, tag);
        }
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

    fn sm(group_tag: Option<i64>) -> StatusMessage {
        StatusMessage {
            flags: 0,
            session_id: -2026710985,
            stream_id: 1001,
            consumption_term_id: -639539685,
            consumption_term_offset: 0,
            receiver_window: 131072,
            receiver_id: -2186868625447144900,
            group_tag,
        }
    }

    #[test]
    fn receiver_id_sits_at_offset_28() {
        // unicast_basic.json #2.
        let golden = [
            0x24, 0, 0, 0, 0, 0, 0x03, 0, 0x37, 0xd8, 0x32, 0x87, 0xe9, 0x03, 0, 0, 0x1b, 0x66, 0xe1, 0xd9, 0, 0, 0, 0,
            0, 0, 0x02, 0, 0x3c, 0xb2, 0xc6, 0x59, 0x92, 0xae, 0xa6, 0xe1,
        ];
        assert_eq!(StatusMessage::parse(&golden), Ok(sm(None)));
        let mut out = [0xa5u8; 36];
        assert_eq!(sm(None).emit(&mut out), 36);
        assert_eq!(out, golden);
    }

    #[test]
    fn group_tag_present_iff_frame_length_44() {
        let tagged = sm(Some(1001));
        let mut out = [0xa5u8; 44];
        assert_eq!(tagged.emit(&mut out), 44);
        assert_eq!(out[0], 44);
        assert_eq!(&out[36..], &[0xe9, 0x03, 0, 0, 0, 0, 0, 0]);
        assert_eq!(StatusMessage::parse(&out), Ok(tagged));
        // frame_length 40: logged by Aeron, treated as "no tag".
        out[0] = 40;
        assert_eq!(StatusMessage::parse(&out).unwrap().group_tag, None);
        // frame_length 36 with trailing bytes: no tag.
        out[0] = 36;
        assert_eq!(StatusMessage::parse(&out).unwrap().group_tag, None);
    }

    #[test]
    fn rejects_frame_length_beyond_datagram() {
        let mut bytes = sm(Some(7)).to_bytes();
        bytes.truncate(40);
        assert!(matches!(
            StatusMessage::parse(&bytes),
            Err(WireError::BadFrameLength { frame_length: 44, datagram_length: 40, .. })
        ));
        assert!(matches!(
            StatusMessage::parse(&bytes[..35]),
            Err(WireError::Truncated { frame: "SM", needed: 36, actual: 35 })
        ));
    }

    #[test]
    fn flag_helpers() {
        let request = StatusMessage { flags: 0x80, ..sm(None) };
        assert!(request.is_send_setup());
        assert!(!request.is_end_of_stream());
        assert!(StatusMessage { flags: 0x40, ..sm(None) }.is_end_of_stream());
    }
}
