//! The error every decoder in [`crate::wire`] returns for malformed input.

use std::fmt;

/// Why a datagram or frame could not be decoded.
///
/// Every parser of untrusted bytes returns this instead of panicking. Receivers usually count
/// these (Aeron's "invalid packets" counter) and drop the datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than the frame's fixed layout needs.
    Truncated {
        /// Frame name, e.g. `"SM"`.
        frame: &'static str,
        /// Bytes the frame needs.
        needed: usize,
        /// Bytes available.
        actual: usize,
    },
    /// The header's version byte is not 0.
    UnsupportedVersion(u8),
    /// The type code is not the one this decoder handles.
    WrongType {
        /// What the decoder expected, e.g. `"SETUP"`.
        expected: &'static str,
        /// The type code found.
        actual: i16,
    },
    /// `frame_length` is inconsistent with the frame type or the datagram.
    BadFrameLength {
        /// Frame name, e.g. `"DATA"`.
        frame: &'static str,
        /// The `frame_length` field.
        frame_length: i32,
        /// Bytes available in the datagram (from the frame's start).
        datagram_length: usize,
    },
    /// A data frame's `term_offset` is negative or not a multiple of 32.
    Misaligned {
        /// The offending term offset.
        term_offset: i32,
    },
    /// A field holds a value the protocol does not allow.
    Invalid {
        /// Frame name, e.g. `"SETUP"`.
        frame: &'static str,
        /// Field name as in the wire spec, e.g. `"term_length"`.
        field: &'static str,
        /// The offending value.
        value: i64,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated { frame, needed, actual } => {
                write!(f, "truncated {frame} frame: need {needed} bytes, got {actual}")
            }
            WireError::UnsupportedVersion(version) => {
                write!(f, "unsupported frame version {version}")
            }
            WireError::WrongType { expected, actual } => {
                write!(f, "expected a {expected} frame, got type code {actual:#06x}")
            }
            WireError::BadFrameLength { frame, frame_length, datagram_length } => {
                write!(f, "bad {frame} frame_length {frame_length} for {datagram_length} available bytes")
            }
            WireError::Misaligned { term_offset } => {
                write!(f, "term_offset {term_offset} is not a non-negative multiple of 32")
            }
            WireError::Invalid { frame, field, value } => write!(f, "invalid {frame} {field}: {value}"),
        }
    }
}

impl std::error::Error for WireError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_frame_and_the_numbers() {
        let truncated = WireError::Truncated { frame: "SM", needed: 36, actual: 20 };
        assert_eq!(truncated.to_string(), "truncated SM frame: need 36 bytes, got 20");
        let wrong = WireError::WrongType { expected: "SETUP", actual: 3 };
        assert_eq!(wrong.to_string(), "expected a SETUP frame, got type code 0x0003");
        let invalid = WireError::Invalid { frame: "SETUP", field: "mtu", value: 1400 };
        assert_eq!(invalid.to_string(), "invalid SETUP mtu: 1400");
        let error: Box<dyn std::error::Error> = Box::new(WireError::UnsupportedVersion(1));
        assert_eq!(error.to_string(), "unsupported frame version 1");
    }
}
