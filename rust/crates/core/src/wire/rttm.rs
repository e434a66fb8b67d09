//! RTTM (0x06): round-trip-time measurement request and reply (spec §4.5).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                       frame_length (40)                       |  0
//! +---------------+-+-------------+-------------------------------+
//! |  version (0)  |R|     0       |          type (0x06)          |  4
//! +---------------+-+-------------+-------------------------------+
//! |                          session_id                           |  8
//! +---------------------------------------------------------------+
//! |                           stream_id                           | 12
//! +---------------------------------------------------------------+
//! |                    echo_timestamp (i64, ns)                   | 16
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                   reception_delta (i64, ns)                   | 24
//! |                                                               |
//! +---------------------------------------------------------------+
//! |                       receiver_id (i64)                       | 32
//! |                                                               |
//! +---------------------------------------------------------------+
//! ```
//!
//! R = REPLY (0x80): a reply is *requested* (set on the request, clear on the reply).
//! All integers little-endian.

use super::error::WireError;
use super::flags;
use super::header::{emit_control_header, parse_control_header, read_i32, read_i64, write_i32, write_i64, FrameType};

mod field {
    use crate::wire::header::Field;
    pub const SESSION_ID: Field = 8..12;
    pub const STREAM_ID: Field = 12..16;
    pub const ECHO_TIMESTAMP: Field = 16..24;
    pub const RECEPTION_DELTA: Field = 24..32;
    pub const RECEIVER_ID: Field = 32..40;
}

/// An RTT measurement frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RttMeasurement {
    /// REPLY (0x80, "reply requested") flag.
    pub flags: u8,
    /// Publication session.
    pub session_id: i32,
    /// Stream.
    pub stream_id: i32,
    /// Originator's monotonic clock in ns, echoed back unchanged.
    pub echo_timestamp_ns: i64,
    /// Responder's processing delay in ns (Aeron always sends 0).
    pub reception_delta_ns: i64,
    /// Receiver endpoint id.
    pub receiver_id: i64,
}

impl RttMeasurement {
    /// Encoded length.
    pub const LENGTH: usize = 40;

    /// Decodes an RTTM: version, type and length ≥ 40.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let header = parse_control_header(bytes, FrameType::Rttm, Self::LENGTH)?;
        Ok(RttMeasurement {
            flags: header.flags,
            session_id: read_i32(bytes, field::SESSION_ID),
            stream_id: read_i32(bytes, field::STREAM_ID),
            echo_timestamp_ns: read_i64(bytes, field::ECHO_TIMESTAMP),
            reception_delta_ns: read_i64(bytes, field::RECEPTION_DELTA),
            receiver_id: read_i64(bytes, field::RECEIVER_ID),
        })
    }

    /// Whether the sender of this frame asks for a reply (flag 0x80).
    pub fn is_reply_requested(&self) -> bool {
        self.flags & flags::RTTM_REPLY != 0
    }

    /// The reply to this request, as Aeron builds it: same session, stream, echo timestamp and
    /// receiver id, flags 0, the given reception delta.
    pub fn reply(&self, reception_delta_ns: i64) -> Self {
        RttMeasurement { flags: 0, reception_delta_ns, ..*self }
    }

    /// Writes the frame to the start of `out`; returns [`RttMeasurement::LENGTH`].
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`RttMeasurement::LENGTH`] (a caller bug).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let out = &mut out[..Self::LENGTH];
        emit_control_header(out, FrameType::Rttm, self.flags, Self::LENGTH);
        write_i32(out, field::SESSION_ID, self.session_id);
        write_i32(out, field::STREAM_ID, self.stream_id);
        write_i64(out, field::ECHO_TIMESTAMP, self.echo_timestamp_ns);
        write_i64(out, field::RECEPTION_DELTA, self.reception_delta_ns);
        write_i64(out, field::RECEIVER_ID, self.receiver_id);
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
    fn matches_captured_request_and_reply() {
        // unicast_rttm.json #2 (request) and #4 (reply).
        let mut golden = [
            0x28, 0, 0, 0, 0, 0x80, 0x06, 0, 0x8a, 0xe0, 0x88, 0x02, 0xe9, 0x03, 0, 0, 0x9d, 0x73, 0xfc, 0xa4, 0x3e,
            0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x4c, 0x72, 0x0e, 0xd1, 0xc1, 0xa9, 0xfa, 0xce,
        ];
        let request = RttMeasurement::parse(&golden).unwrap();
        assert_eq!(
            request,
            RttMeasurement {
                flags: 0x80,
                session_id: 42524810,
                stream_id: 1001,
                echo_timestamp_ns: 2468079235997,
                reception_delta_ns: 0,
                receiver_id: -3532324307817565620,
            }
        );
        assert!(request.is_reply_requested());
        let mut out = [0xa5u8; 40];
        assert_eq!(request.emit(&mut out), 40);
        assert_eq!(out, golden);
        golden[5] = 0;
        let reply = request.reply(0);
        assert!(!reply.is_reply_requested());
        assert_eq!(reply.to_bytes(), golden);
    }

    #[test]
    fn emits_every_byte() {
        let frame = RttMeasurement {
            flags: 0x80,
            session_id: 0x0102_0304,
            stream_id: 0x0506_0708,
            echo_timestamp_ns: 0x1112_1314_1516_1718,
            reception_delta_ns: 0x2122_2324_2526_2728,
            receiver_id: 0x3132_3334_3536_3738,
        };
        let mut out = [0xa5u8; 40];
        frame.emit(&mut out);
        assert!(!out.contains(&0xa5));
        assert_eq!(&out[16..24], &[0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11]);
        assert_eq!(&out[32..], &[0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31]);
        assert_eq!(RttMeasurement::parse(&out), Ok(frame));
    }
}
