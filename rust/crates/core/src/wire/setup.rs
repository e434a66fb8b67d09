//! SETUP (0x05): a sender announces a stream; the receiver creates an image from it (spec §4.2).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                       frame_length (40)                       |  0
//! +---------------+-+-+-----------+-------------------------------+
//! |  version (0)  |R|G|     0     |          type (0x05)          |  4
//! +---------------+-+-+-----------+-------------------------------+
//! |                          term_offset                          |  8
//! +---------------------------------------------------------------+
//! |                          session_id                           | 12
//! +---------------------------------------------------------------+
//! |                           stream_id                           | 16
//! +---------------------------------------------------------------+
//! |                        initial_term_id                        | 20
//! +---------------------------------------------------------------+
//! |                        active_term_id                         | 24
//! +---------------------------------------------------------------+
//! |                          term_length                          | 28
//! +---------------------------------------------------------------+
//! |                              mtu                              | 32
//! +---------------------------------------------------------------+
//! |                              ttl                              | 36
//! +---------------------------------------------------------------+
//! ```
//!
//! R = SEND_RESPONSE_SETUP (0x80), G = GROUP (0x40). All integers little-endian.

use super::error::WireError;
use super::header::{emit_control_header, parse_control_header, read_i32, write_i32, FrameType};
use crate::limits::{self, FRAME_ALIGNMENT};

mod field {
    use crate::wire::header::Field;
    pub const TERM_OFFSET: Field = 8..12;
    pub const SESSION_ID: Field = 12..16;
    pub const STREAM_ID: Field = 16..20;
    pub const INITIAL_TERM_ID: Field = 20..24;
    pub const ACTIVE_TERM_ID: Field = 24..28;
    pub const TERM_LENGTH: Field = 28..32;
    pub const MTU: Field = 32..36;
    pub const TTL: Field = 36..40;
}

/// A SETUP frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Setup {
    /// SEND_RESPONSE_SETUP (0x80) and GROUP (0x40) flags.
    pub flags: u8,
    /// Sender's current term offset (where the receiver joins).
    pub term_offset: i32,
    /// Publication session.
    pub session_id: i32,
    /// Stream.
    pub stream_id: i32,
    /// Term id of position 0.
    pub initial_term_id: i32,
    /// Term id of the sender's current position.
    pub active_term_id: i32,
    /// Term length (power of two, 64 KiB ..= 1 GiB once validated).
    pub term_length: i32,
    /// Sender's MTU.
    pub mtu: i32,
    /// Multicast TTL, 0 if not set.
    pub ttl: i32,
}

impl Setup {
    /// Encoded length.
    pub const LENGTH: usize = 40;

    /// Decodes a SETUP frame: checks version, type and length ≥ 40 (like the Aeron receiver);
    /// field values are checked separately by [`Setup::validate`].
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let header = parse_control_header(bytes, FrameType::Setup, Self::LENGTH)?;
        Ok(Setup {
            flags: header.flags,
            term_offset: read_i32(bytes, field::TERM_OFFSET),
            session_id: read_i32(bytes, field::SESSION_ID),
            stream_id: read_i32(bytes, field::STREAM_ID),
            initial_term_id: read_i32(bytes, field::INITIAL_TERM_ID),
            active_term_id: read_i32(bytes, field::ACTIVE_TERM_ID),
            term_length: read_i32(bytes, field::TERM_LENGTH),
            mtu: read_i32(bytes, field::MTU),
            ttl: read_i32(bytes, field::TTL),
        })
    }

    /// Semantic checks a receiver makes before creating an image: term length a power of two
    /// in 64 KiB ..= 1 GiB ([`limits::is_valid_term_length`]), term offset a multiple of 32
    /// within the term, MTU a multiple of 32 in 64 ..= 65504 ([`limits::is_valid_mtu`], as
    /// Aeron's `Configuration.validateMtuLength` requires of a sender's MTU: more than the
    /// 32-byte header) and no larger than the term, active term id at or after the initial one
    /// (modulo 2^32). (Checks against local limits — window, socket buffer — are the caller's.)
    pub fn validate(&self) -> Result<(), WireError> {
        let invalid = |field, value: i32| Err(WireError::Invalid { frame: "SETUP", field, value: value.into() });
        let term_length = self.term_length;
        if !limits::is_valid_term_length(term_length.into()) {
            return invalid("term_length", term_length);
        }
        let alignment = FRAME_ALIGNMENT as i32;
        if self.term_offset % alignment != 0 {
            return Err(WireError::Misaligned { term_offset: self.term_offset });
        }
        if !(0..=term_length).contains(&self.term_offset) {
            return invalid("term_offset", self.term_offset);
        }
        if !limits::is_valid_mtu(self.mtu.into()) || self.mtu > term_length {
            return invalid("mtu", self.mtu);
        }
        // The active term must not precede the initial one: term ids wrap, so the term count
        // `active - initial` (mod 2^32) must lie in 0 ..= i32::MAX, or the join position would
        // be negative (no partition holds it).
        if self.active_term_id.wrapping_sub(self.initial_term_id) < 0 {
            return invalid("active_term_id", self.active_term_id);
        }
        Ok(())
    }

    /// Writes the frame to the start of `out`; returns [`Setup::LENGTH`].
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`Setup::LENGTH`] (a caller bug).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let out = &mut out[..Self::LENGTH];
        emit_control_header(out, FrameType::Setup, self.flags, Self::LENGTH);
        write_i32(out, field::TERM_OFFSET, self.term_offset);
        write_i32(out, field::SESSION_ID, self.session_id);
        write_i32(out, field::STREAM_ID, self.stream_id);
        write_i32(out, field::INITIAL_TERM_ID, self.initial_term_id);
        write_i32(out, field::ACTIVE_TERM_ID, self.active_term_id);
        write_i32(out, field::TERM_LENGTH, self.term_length);
        write_i32(out, field::MTU, self.mtu);
        write_i32(out, field::TTL, self.ttl);
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

    fn captured() -> Setup {
        Setup {
            flags: 0,
            term_offset: 0,
            session_id: -2026710985,
            stream_id: 1001,
            initial_term_id: -639539685,
            active_term_id: -639539685,
            term_length: 16 * 1024 * 1024,
            mtu: 1408,
            ttl: 0,
        }
    }

    #[test]
    fn matches_captured_bytes() {
        // unicast_basic.json #0.
        let golden = [
            0x28, 0, 0, 0, 0, 0, 0x05, 0, 0, 0, 0, 0, 0x37, 0xd8, 0x32, 0x87, 0xe9, 0x03, 0, 0, 0x1b, 0x66, 0xe1, 0xd9,
            0x1b, 0x66, 0xe1, 0xd9, 0, 0, 0, 0x01, 0x80, 0x05, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(Setup::parse(&golden), Ok(captured()));
        let mut out = [0xa5u8; 40];
        assert_eq!(captured().emit(&mut out), 40);
        assert_eq!(out, golden);
        assert_eq!(captured().validate(), Ok(()));
    }

    #[test]
    fn emits_every_byte() {
        let setup = Setup {
            flags: 0xc0,
            term_offset: 0x0102_0304,
            session_id: 0x0506_0708,
            stream_id: 0x090a_0b0c,
            initial_term_id: 0x0d0e_0f10,
            active_term_id: 0x1112_1314,
            term_length: 0x1516_1718,
            mtu: 0x191a_1b1c,
            ttl: 0x1d1e_1f20,
        };
        let mut out = [0xa5u8; 40];
        setup.emit(&mut out);
        assert!(!out.contains(&0xa5));
        assert_eq!(&out[..8], &[40, 0, 0, 0, 0, 0xc0, 5, 0]);
        assert_eq!(&out[36..], &[0x20, 0x1f, 0x1e, 0x1d]);
        assert_eq!(Setup::parse(&out), Ok(setup));
    }

    #[test]
    fn validate_rejects_bad_terms_and_mtus() {
        let bad_term = Setup { term_length: 3 * 65536, ..captured() };
        assert!(matches!(bad_term.validate(), Err(WireError::Invalid { field: "term_length", .. })));
        for term_length in [32768, i32::MIN, 0, -65536] {
            assert!(Setup { term_length, ..captured() }.validate().is_err());
        }
        for mtu in [0, 16, 32, 1400, 65536, -32] {
            assert!(Setup { mtu, ..captured() }.validate().is_err());
        }
        assert_eq!(Setup { term_offset: 40, ..captured() }.validate(), Err(WireError::Misaligned { term_offset: 40 }));
        assert!(Setup { term_offset: -32, ..captured() }.validate().is_err());
    }

    #[test]
    fn validate_rejects_an_active_term_before_the_initial_term() {
        let before = Setup { initial_term_id: 1000, active_term_id: 999, ..captured() };
        assert!(matches!(before.validate(), Err(WireError::Invalid { field: "active_term_id", .. })));
        let far = Setup { initial_term_id: i32::MIN, active_term_id: i32::MAX, ..captured() };
        assert!(far.validate().is_err(), "2^32 - 1 terms ahead is 1 term behind");
        let wrapped = Setup { initial_term_id: i32::MAX, active_term_id: i32::MIN, ..captured() };
        assert!(wrapped.validate().is_ok(), "one term after the initial one, across the wrap");
    }

    #[test]
    fn parse_rejects_short_and_wrong_type() {
        let bytes = captured().to_bytes();
        assert!(matches!(
            Setup::parse(&bytes[..39]),
            Err(WireError::Truncated { frame: "SETUP", needed: 40, actual: 39 })
        ));
        assert!(Setup::parse(&bytes[..3]).is_err());
        let mut wrong = bytes.clone();
        wrong[6] = 6;
        assert!(matches!(Setup::parse(&wrong), Err(WireError::WrongType { actual: 6, .. })));
    }
}
