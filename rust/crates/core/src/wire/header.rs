//! The 8-byte header that starts every Aeron frame, and the frame type codes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                      frame_length (i32 LE)                    |  0
//! +---------------+---------------+-------------------------------+
//! |  version (0)  |     flags     |          type (i16 LE)        |  4
//! +---------------+---------------+-------------------------------+
//! ```

use super::error::WireError;

/// Length of the common frame header.
pub const HEADER_LENGTH: usize = 8;

/// The only frame version Aeron speaks.
pub const CURRENT_VERSION: u8 = 0;

/// A byte range of a field inside a frame.
pub(crate) type Field = core::ops::Range<usize>;

/// Where the fields of the 8-byte frame header lie.
pub(crate) mod field {
    use super::Field;
    pub const FRAME_LENGTH: Field = 0..4;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 5;
    pub const TYPE: Field = 6..8;
}

/// Copies a fixed-width field; `field` is a constant of the right width and the caller has
/// already checked that `bytes` covers it.
fn read_array<const N: usize>(bytes: &[u8], field: Field) -> [u8; N] {
    let mut array = [0u8; N];
    array.copy_from_slice(&bytes[field]);
    array
}

/// Reads a little-endian i16 from a length-checked buffer.
pub(crate) fn read_i16(bytes: &[u8], field: Field) -> i16 {
    i16::from_le_bytes(read_array(bytes, field))
}

/// Reads a little-endian i32 from a length-checked buffer.
pub(crate) fn read_i32(bytes: &[u8], field: Field) -> i32 {
    i32::from_le_bytes(read_array(bytes, field))
}

/// Reads a little-endian i64 from a length-checked buffer.
pub(crate) fn read_i64(bytes: &[u8], field: Field) -> i64 {
    i64::from_le_bytes(read_array(bytes, field))
}

/// Writes a little-endian i16.
pub(crate) fn write_i16(out: &mut [u8], field: Field, value: i16) {
    out[field].copy_from_slice(&value.to_le_bytes());
}

/// Writes a little-endian i32.
pub(crate) fn write_i32(out: &mut [u8], field: Field, value: i32) {
    out[field].copy_from_slice(&value.to_le_bytes());
}

/// Writes a little-endian i64.
pub(crate) fn write_i64(out: &mut [u8], field: Field, value: i64) {
    out[field].copy_from_slice(&value.to_le_bytes());
}

/// Aeron frame type (the i16 at offset 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameType {
    /// `0x00` PAD: padding at the end of a term.
    Pad,
    /// `0x01` DATA, also used for heartbeats.
    Data,
    /// `0x02` NAK: a receiver reports a gap.
    Nak,
    /// `0x03` SM: status message from a receiver.
    StatusMessage,
    /// `0x04` ERR: error from a receiver.
    Error,
    /// `0x05` SETUP: announces a stream.
    Setup,
    /// `0x06` RTTM: round-trip-time measurement.
    Rttm,
    /// `0x07` RES: name resolution (driver name resolver only).
    Resolution,
    /// `0x08` ATS_DATA (Aeron Transport Security; reserved).
    AtsData,
    /// `0x09` ATS_SETUP (reserved).
    AtsSetup,
    /// `0x0A` ATS_SM (reserved).
    AtsStatusMessage,
    /// `0x0B` RSP_SETUP: response setup.
    ResponseSetup,
    /// `-1` (`0xFFFF`) EXT: extension (reserved).
    Extension,
    /// Any other code. `from_code` never produces this for a known code.
    Unknown(i16),
}

impl FrameType {
    /// Maps a wire type code to a frame type.
    pub fn from_code(code: i16) -> Self {
        match code {
            0x00 => FrameType::Pad,
            0x01 => FrameType::Data,
            0x02 => FrameType::Nak,
            0x03 => FrameType::StatusMessage,
            0x04 => FrameType::Error,
            0x05 => FrameType::Setup,
            0x06 => FrameType::Rttm,
            0x07 => FrameType::Resolution,
            0x08 => FrameType::AtsData,
            0x09 => FrameType::AtsSetup,
            0x0A => FrameType::AtsStatusMessage,
            0x0B => FrameType::ResponseSetup,
            -1 => FrameType::Extension,
            other => FrameType::Unknown(other),
        }
    }

    /// The wire type code.
    pub fn code(self) -> i16 {
        match self {
            FrameType::Pad => 0x00,
            FrameType::Data => 0x01,
            FrameType::Nak => 0x02,
            FrameType::StatusMessage => 0x03,
            FrameType::Error => 0x04,
            FrameType::Setup => 0x05,
            FrameType::Rttm => 0x06,
            FrameType::Resolution => 0x07,
            FrameType::AtsData => 0x08,
            FrameType::AtsSetup => 0x09,
            FrameType::AtsStatusMessage => 0x0A,
            FrameType::ResponseSetup => 0x0B,
            FrameType::Extension => -1,
            FrameType::Unknown(code) => code,
        }
    }

    /// The name used in the wire spec and in error messages (`"SM"`, `"RSP_SETUP"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FrameType::Pad => "PAD",
            FrameType::Data => "DATA",
            FrameType::Nak => "NAK",
            FrameType::StatusMessage => "SM",
            FrameType::Error => "ERR",
            FrameType::Setup => "SETUP",
            FrameType::Rttm => "RTTM",
            FrameType::Resolution => "RES",
            FrameType::AtsData => "ATS_DATA",
            FrameType::AtsSetup => "ATS_SETUP",
            FrameType::AtsStatusMessage => "ATS_SM",
            FrameType::ResponseSetup => "RSP_SETUP",
            FrameType::Extension => "EXT",
            FrameType::Unknown(_) => "unknown",
        }
    }
}

/// The common 8-byte frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Frame length without alignment padding (0 for a heartbeat).
    pub frame_length: i32,
    /// Version byte; always 0 after a successful [`FrameHeader::parse`].
    pub version: u8,
    /// Type-specific flags (see [`crate::wire::flags`]).
    pub flags: u8,
    /// Frame type.
    pub frame_type: FrameType,
}

impl FrameHeader {
    /// Decodes the header at the start of `bytes`.
    ///
    /// Fails if fewer than 8 bytes are given or the version is not 0 (receivers drop such
    /// datagrams, spec §1).
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        if bytes.len() < HEADER_LENGTH {
            return Err(WireError::Truncated { frame: "frame header", needed: HEADER_LENGTH, actual: bytes.len() });
        }
        let version = bytes[field::VERSION];
        if version != CURRENT_VERSION {
            return Err(WireError::UnsupportedVersion(version));
        }
        Ok(FrameHeader {
            frame_length: read_i32(bytes, field::FRAME_LENGTH),
            version,
            flags: bytes[field::FLAGS],
            frame_type: FrameType::from_code(read_i16(bytes, field::TYPE)),
        })
    }

    /// Writes the 8 header bytes to the start of `out`.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`HEADER_LENGTH`] (a caller bug, not network input).
    pub fn emit(&self, out: &mut [u8]) {
        write_i32(out, field::FRAME_LENGTH, self.frame_length);
        out[field::VERSION] = self.version;
        out[field::FLAGS] = self.flags;
        write_i16(out, field::TYPE, self.frame_type.code());
    }
}

/// Shared entry check of the control-frame decoders: header, version, type, minimum length.
pub(crate) fn parse_control_header(
    bytes: &[u8],
    expected: FrameType,
    min_length: usize,
) -> Result<FrameHeader, WireError> {
    let frame = expected.name();
    let header = FrameHeader::parse(bytes).map_err(|error| match error {
        WireError::Truncated { actual, .. } => WireError::Truncated { frame, needed: min_length, actual },
        other => other,
    })?;
    if header.frame_type != expected {
        return Err(WireError::WrongType { expected: frame, actual: header.frame_type.code() });
    }
    if bytes.len() < min_length {
        return Err(WireError::Truncated { frame, needed: min_length, actual: bytes.len() });
    }
    Ok(header)
}

/// Writes the header of a control frame.
pub(crate) fn emit_control_header(out: &mut [u8], frame_type: FrameType, flags: u8, length: usize) {
    FrameHeader {
        // Control frames are at most 40 + 1023 bytes, so this never truncates.
        frame_length: length as i32,
        version: CURRENT_VERSION,
        flags,
        frame_type,
    }
    .emit(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_code_round_trips() {
        for code in -2..=12 {
            assert_eq!(FrameType::from_code(code).code(), code);
        }
        assert_eq!(FrameType::from_code(-1), FrameType::Extension);
        assert_eq!(FrameType::from_code(0x0B), FrameType::ResponseSetup);
        assert_eq!(FrameType::from_code(12), FrameType::Unknown(12));
    }

    #[test]
    fn header_emits_every_byte() {
        let mut out = [0xa5u8; 8];
        FrameHeader { frame_length: 36, version: 0, flags: 0x40, frame_type: FrameType::StatusMessage }.emit(&mut out);
        assert_eq!(out, [36, 0, 0, 0, 0, 0x40, 3, 0]);
    }

    #[test]
    fn header_rejects_short_and_wrong_version() {
        assert!(matches!(FrameHeader::parse(&[0; 7]), Err(WireError::Truncated { needed: 8, actual: 7, .. })));
        assert_eq!(FrameHeader::parse(&[0, 0, 0, 0, 1, 0, 1, 0]), Err(WireError::UnsupportedVersion(1)));
        let header = FrameHeader::parse(&[0xff, 0xff, 0xff, 0xff, 0, 0xc0, 0xff, 0xff]).unwrap();
        assert_eq!(header.frame_length, -1);
        assert_eq!(header.flags, 0xc0);
        assert_eq!(header.frame_type, FrameType::Extension);
    }
}
