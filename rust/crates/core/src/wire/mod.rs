//! Aeron frame codecs: one module per frame, untrusted bytes in, typed values or a
//! [`WireError`] out (spec `docs/wire-protocol.md` §1–4).
//!
//! Every frame starts with the 8-byte [`FrameHeader`]; all integers are little-endian and
//! fields use 4-byte packing (the SM `receiver_id` sits at offset 28). A datagram carries
//! either one control frame — decode it with [`parse_control`] or the frame's own `parse` — or
//! one or more DATA/PAD frames, iterated with [`DataFrames`].
//!
//! Decoders never panic on network input. `emit` methods write into a caller buffer and panic
//! only if that buffer is too short, which is a programming error.
//!
//! Architecture invariant: no I/O, no clock, no allocation except `to_bytes` and the
//! ERR message.

mod data;
mod error;
mod error_frame;
mod header;
mod nak;
mod response_setup;
mod rttm;
mod setup;
mod status;

pub use data::{align_frame_length, data_frame_count, DataFrames, DataHeader, DATA_HEADER_LENGTH};
pub use error::WireError;
pub use error_frame::{
    ErrorFrame, ERROR_CODE_IMAGE_REJECTED, ERROR_CODE_PUBLICATION_REVOKED, MAX_ERROR_MESSAGE_LENGTH,
};
pub use header::{FrameHeader, FrameType, CURRENT_VERSION, HEADER_LENGTH};
pub use nak::Nak;
pub use response_setup::ResponseSetup;
pub use rttm::RttMeasurement;
pub use setup::Setup;
pub use status::StatusMessage;

/// Flag bits of the header's flags byte; their meaning depends on the frame type.
pub mod flags {
    /// DATA: first fragment of a message.
    pub const BEGIN: u8 = 0x80;
    /// DATA: last fragment of a message.
    pub const END: u8 = 0x40;
    /// DATA: a whole message in one frame (BEGIN | END).
    pub const UNFRAGMENTED: u8 = 0xC0;
    /// DATA heartbeat: end of stream, the publication is closed and fully sent.
    pub const EOS: u8 = 0x20;
    /// SM: the receiver asks for a SETUP.
    pub const SM_SEND_SETUP: u8 = 0x80;
    /// SM: the receiver is leaving.
    pub const SM_EOS: u8 = 0x40;
    /// SETUP: the receiver should answer with RSP_SETUP.
    pub const SETUP_SEND_RESPONSE_SETUP: u8 = 0x80;
    /// SETUP: the sender's channel has group semantics (multicast or MDC).
    pub const SETUP_GROUP: u8 = 0x40;
    /// RTTM: a reply is requested.
    pub const RTTM_REPLY: u8 = 0x80;
    /// ERR: the group tag field is valid.
    pub const ERR_HAS_GROUP_TAG: u8 = 0x08;
}

/// A decoded control frame (anything but DATA/PAD).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlFrame {
    /// SM.
    StatusMessage(StatusMessage),
    /// NAK.
    Nak(Nak),
    /// RTTM.
    Rttm(RttMeasurement),
    /// ERR.
    Error(ErrorFrame),
    /// RSP_SETUP.
    ResponseSetup(ResponseSetup),
    /// SETUP.
    Setup(Setup),
}

impl ControlFrame {
    /// The frame's type.
    pub fn frame_type(&self) -> FrameType {
        match self {
            ControlFrame::StatusMessage(_) => FrameType::StatusMessage,
            ControlFrame::Nak(_) => FrameType::Nak,
            ControlFrame::Rttm(_) => FrameType::Rttm,
            ControlFrame::Error(_) => FrameType::Error,
            ControlFrame::ResponseSetup(_) => FrameType::ResponseSetup,
            ControlFrame::Setup(_) => FrameType::Setup,
        }
    }

    /// Bytes [`ControlFrame::emit`] writes.
    pub fn encoded_length(&self) -> usize {
        match self {
            ControlFrame::StatusMessage(frame) => frame.encoded_length(),
            ControlFrame::Nak(_) => Nak::LENGTH,
            ControlFrame::Rttm(_) => RttMeasurement::LENGTH,
            ControlFrame::Error(frame) => frame.encoded_length(),
            ControlFrame::ResponseSetup(_) => ResponseSetup::LENGTH,
            ControlFrame::Setup(_) => Setup::LENGTH,
        }
    }

    /// Writes the frame to the start of `out`; returns the bytes written.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`ControlFrame::encoded_length`] (a caller bug).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        match self {
            ControlFrame::StatusMessage(frame) => frame.emit(out),
            ControlFrame::Nak(frame) => frame.emit(out),
            ControlFrame::Rttm(frame) => frame.emit(out),
            ControlFrame::Error(frame) => frame.emit(out),
            ControlFrame::ResponseSetup(frame) => frame.emit(out),
            ControlFrame::Setup(frame) => frame.emit(out),
        }
    }

    /// The encoded frame.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0; self.encoded_length()];
        self.emit(&mut out);
        out
    }
}

/// Decodes a datagram that holds one control frame.
///
/// Returns `Ok(None)` for types a peer must ignore: RES, ATS, EXT and unknown codes — and also
/// DATA/PAD, because on multicast a control socket sees the data traffic sharing its port
/// (spec §6.1). Returns `Err` for a datagram shorter than 8 bytes, a version other than 0, or
/// a malformed frame of a known control type (minimum lengths of spec §4.10).
pub fn parse_control(datagram: &[u8]) -> Result<Option<ControlFrame>, WireError> {
    let header = FrameHeader::parse(datagram)?;
    let frame = match header.frame_type {
        FrameType::StatusMessage => ControlFrame::StatusMessage(StatusMessage::parse(datagram)?),
        FrameType::Nak => ControlFrame::Nak(Nak::parse(datagram)?),
        FrameType::Rttm => ControlFrame::Rttm(RttMeasurement::parse(datagram)?),
        FrameType::Error => ControlFrame::Error(ErrorFrame::parse(datagram)?),
        FrameType::ResponseSetup => ControlFrame::ResponseSetup(ResponseSetup::parse(datagram)?),
        FrameType::Setup => ControlFrame::Setup(Setup::parse(datagram)?),
        FrameType::Pad
        | FrameType::Data
        | FrameType::Resolution
        | FrameType::AtsData
        | FrameType::AtsSetup
        | FrameType::AtsStatusMessage
        | FrameType::Extension
        | FrameType::Unknown(_) => return Ok(None),
    };
    Ok(Some(frame))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatches_control_frames() {
        let nak = Nak { session_id: 1, stream_id: 2, term_id: 3, term_offset: 64, length: 128 };
        let parsed = parse_control(&nak.to_bytes()).unwrap();
        assert_eq!(parsed, Some(ControlFrame::Nak(nak)));
        let frame = parsed.unwrap();
        assert_eq!(frame.frame_type(), FrameType::Nak);
        assert_eq!(frame.to_bytes(), nak.to_bytes());
    }

    #[test]
    fn ignores_data_and_unknown_types() {
        let mut bytes = [0u8; 40];
        for code in [0i16, 1, 7, 8, 9, 10, -1, 12, 0x7fff] {
            bytes[6..8].copy_from_slice(&code.to_le_bytes());
            assert_eq!(parse_control(&bytes), Ok(None), "type {code}");
        }
    }

    #[test]
    fn rejects_short_and_wrong_version() {
        assert!(parse_control(&[]).is_err());
        assert!(parse_control(&[0; 7]).is_err());
        let mut bytes = [0u8; 40];
        bytes[4] = 1;
        assert_eq!(parse_control(&bytes), Err(WireError::UnsupportedVersion(1)));
        // A known type that is too short is an error, not ignored.
        let mut short_sm = [0u8; 20];
        short_sm[6] = 3;
        assert!(matches!(parse_control(&short_sm), Err(WireError::Truncated { frame: "SM", .. })));
    }
}
