//! The error every control-plane decoder returns for malformed input.

use std::fmt;

/// Why a control-plane message could not be decoded (or encoded).
///
/// Decoders of untrusted bytes return this instead of panicking; the runtime counts these and
/// drops the message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlError {
    /// Fewer bytes than the message's layout needs.
    Truncated {
        /// Message (or part) being read, e.g. `"HEARTBEAT claim"`.
        what: &'static str,
        /// Bytes needed from the start of the message.
        needed: usize,
        /// Bytes available.
        actual: usize,
    },
    /// The version byte is not one this build speaks.
    UnsupportedVersion(u8),
    /// The kind byte is not the one the decoder handles (or not known at all).
    WrongKind {
        /// What the decoder expected, e.g. `"HEARTBEAT"`.
        expected: &'static str,
        /// The kind code found.
        actual: u8,
    },
    /// A count or length field exceeds its protocol limit.
    TooLong {
        /// Message name.
        what: &'static str,
        /// Field name, e.g. `"claim_count"`.
        field: &'static str,
        /// The value found.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A field holds a value the protocol does not allow.
    Invalid {
        /// Message name.
        what: &'static str,
        /// Field name.
        field: &'static str,
        /// The offending value.
        value: u64,
    },
    /// A text field is not UTF-8.
    NotUtf8 {
        /// Message name.
        what: &'static str,
        /// Field name.
        field: &'static str,
    },
    /// Bytes left over after the last declared element.
    TrailingBytes {
        /// Message name.
        what: &'static str,
        /// How many bytes were left.
        count: usize,
    },
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::Truncated { what, needed, actual } => {
                write!(f, "truncated {what}: need {needed} bytes, got {actual}")
            }
            ControlError::UnsupportedVersion(version) => write!(f, "unsupported control-plane version {version}"),
            ControlError::WrongKind { expected, actual } => {
                write!(f, "expected a {expected} message, got kind {actual}")
            }
            ControlError::TooLong { what, field, value, max } => {
                write!(f, "{what}: {field} = {value} exceeds the limit of {max}")
            }
            ControlError::Invalid { what, field, value } => write!(f, "{what}: invalid {field} = {value}"),
            ControlError::NotUtf8 { what, field } => write!(f, "{what}: {field} is not UTF-8"),
            ControlError::TrailingBytes { what, count } => write!(f, "{what}: {count} unexpected trailing bytes"),
        }
    }
}

impl std::error::Error for ControlError {}
