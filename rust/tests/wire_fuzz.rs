//! Property tests for the frame codecs: arbitrary or mutated bytes never panic a decoder,
//! emit → parse round-trips for arbitrary field values, and every truncation of a valid frame
//! is rejected.

use affinity::wire::{
    align_frame_length, flags, parse_control, ControlFrame, DataFrames, DataHeader, ErrorFrame, FrameHeader, FrameType,
    Nak, ResponseSetup, RttMeasurement, Setup, StatusMessage, DATA_HEADER_LENGTH, MAX_ERROR_MESSAGE_LENGTH,
};
use proptest::prelude::*;

const CASES: u32 = 2000;

/// Runs every decoder on `bytes`; only panics (the property under test) can fail here.
fn decode_everything(bytes: &[u8]) {
    let _ = FrameHeader::parse(bytes);
    let _ = DataHeader::parse(bytes);
    let _ = DataHeader::is_heartbeat_datagram(bytes);
    for (header, payload) in DataFrames::new(bytes).flatten() {
        assert_eq!(payload.len(), header.payload_length());
        let _ = header.wire_length();
    }
    let _ = Setup::parse(bytes).map(|setup| setup.validate());
    let _ = StatusMessage::parse(bytes);
    let _ = Nak::parse(bytes);
    let _ = RttMeasurement::parse(bytes);
    let _ = ErrorFrame::parse(bytes).map(|frame| frame.message_lossy().len());
    let _ = ResponseSetup::parse(bytes);
    if let Ok(Some(frame)) = parse_control(bytes) {
        // A decoded frame always re-encodes without panicking.
        let _ = frame.to_bytes();
    }
}

/// Bytes that start with a plausible header (version 0, a type code near the known ones, a
/// frame length near the datagram length) so decoders get past their first checks.
fn plausible_datagram() -> impl Strategy<Value = Vec<u8>> {
    (-2i16..=12, any::<u8>(), prop::collection::vec(any::<u8>(), 0..160), -64i32..=200).prop_map(
        |(code, flag_bits, tail, length_delta)| {
            let mut bytes = vec![0u8; 8];
            bytes.extend_from_slice(&tail);
            let frame_length = bytes.len() as i32 + length_delta.clamp(-64, 64);
            bytes[0..4].copy_from_slice(&frame_length.to_le_bytes());
            bytes[5] = flag_bits;
            bytes[6..8].copy_from_slice(&code.to_le_bytes());
            bytes
        },
    )
}

fn setup_strategy() -> impl Strategy<Value = Setup> {
    (any::<u8>(), any::<[i32; 8]>()).prop_map(|(flags, v)| Setup {
        flags,
        term_offset: v[0],
        session_id: v[1],
        stream_id: v[2],
        initial_term_id: v[3],
        active_term_id: v[4],
        term_length: v[5],
        mtu: v[6],
        ttl: v[7],
    })
}

fn status_strategy() -> impl Strategy<Value = StatusMessage> {
    (any::<u8>(), any::<[i32; 5]>(), any::<i64>(), any::<Option<i64>>()).prop_map(
        |(flags, v, receiver_id, group_tag)| StatusMessage {
            flags,
            session_id: v[0],
            stream_id: v[1],
            consumption_term_id: v[2],
            consumption_term_offset: v[3],
            receiver_window: v[4],
            receiver_id,
            group_tag,
        },
    )
}

fn nak_strategy() -> impl Strategy<Value = Nak> {
    any::<[i32; 5]>().prop_map(|v| Nak {
        session_id: v[0],
        stream_id: v[1],
        term_id: v[2],
        term_offset: v[3],
        length: v[4],
    })
}

fn rttm_strategy() -> impl Strategy<Value = RttMeasurement> {
    (any::<u8>(), any::<[i32; 2]>(), any::<[i64; 3]>()).prop_map(|(flags, v, w)| RttMeasurement {
        flags,
        session_id: v[0],
        stream_id: v[1],
        echo_timestamp_ns: w[0],
        reception_delta_ns: w[1],
        receiver_id: w[2],
    })
}

fn error_strategy() -> impl Strategy<Value = ErrorFrame> {
    (
        any::<u8>(),
        any::<[i32; 3]>(),
        any::<[i64; 2]>(),
        prop::collection::vec(any::<u8>(), 0..=MAX_ERROR_MESSAGE_LENGTH),
    )
        .prop_map(|(flags, v, w, message)| ErrorFrame {
            flags,
            session_id: v[0],
            stream_id: v[1],
            error_code: v[2],
            receiver_id: w[0],
            group_tag: w[1],
            message,
        })
}

fn response_setup_strategy() -> impl Strategy<Value = ResponseSetup> {
    any::<[i32; 3]>().prop_map(|v| ResponseSetup { session_id: v[0], stream_id: v[1], response_session_id: v[2] })
}

fn control_strategy() -> impl Strategy<Value = ControlFrame> {
    prop_oneof![
        setup_strategy().prop_map(ControlFrame::Setup),
        status_strategy().prop_map(ControlFrame::StatusMessage),
        nak_strategy().prop_map(ControlFrame::Nak),
        rttm_strategy().prop_map(ControlFrame::Rttm),
        error_strategy().prop_map(ControlFrame::Error),
        response_setup_strategy().prop_map(ControlFrame::ResponseSetup),
    ]
}

/// A valid data header: DATA with frame_length 0 or ≥ 32, or PAD with frame_length ≥ 32,
/// and an aligned, non-negative term offset.
fn data_header_strategy() -> impl Strategy<Value = DataHeader> {
    (
        any::<bool>(),
        prop_oneof![Just(0i32), 32i32..=i32::MAX],
        any::<u8>(),
        0i32..=(i32::MAX / 32),
        any::<[i32; 3]>(),
        any::<i64>(),
    )
        .prop_map(|(pad, frame_length, flags, slot, v, reserved_value)| DataHeader {
            frame_length: if pad { frame_length.max(32) } else { frame_length },
            flags,
            frame_type: if pad { FrameType::Pad } else { FrameType::Data },
            term_offset: slot * 32,
            session_id: v[0],
            stream_id: v[1],
            term_id: v[2],
            reserved_value,
        })
}

/// A data datagram built like a sender would: contiguous frames of one term, optionally
/// ending with a PAD. Returns the bytes and the expected (header, payload) list.
fn data_datagram_strategy() -> impl Strategy<Value = (Vec<u8>, Vec<(DataHeader, Vec<u8>)>)> {
    (
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..100), 1..5),
        any::<bool>(),
        0i32..1000,
        any::<[i32; 3]>(),
        any::<i64>(),
    )
        .prop_map(|(payloads, with_pad, slot, v, reserved_value)| {
            let mut datagram = Vec::new();
            let mut expected = Vec::new();
            let mut term_offset = slot * 32;
            let base = DataHeader {
                frame_length: 0,
                flags: flags::UNFRAGMENTED,
                frame_type: FrameType::Data,
                term_offset: 0,
                session_id: v[0],
                stream_id: v[1],
                term_id: v[2],
                reserved_value,
            };
            for payload in payloads {
                let header =
                    DataHeader { frame_length: (DATA_HEADER_LENGTH + payload.len()) as i32, term_offset, ..base };
                let start = datagram.len();
                datagram.resize(start + align_frame_length(DATA_HEADER_LENGTH + payload.len()), 0);
                let written = header.emit_frame(&payload, &mut datagram[start..]);
                term_offset += written as i32;
                expected.push((header, payload));
            }
            if with_pad {
                let pad = DataHeader { frame_length: 4096, frame_type: FrameType::Pad, term_offset, ..base };
                let start = datagram.len();
                datagram.resize(start + DATA_HEADER_LENGTH, 0);
                pad.emit(&mut datagram[start..]);
                expected.push((pad, Vec::new()));
            }
            (datagram, expected)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        decode_everything(&bytes);
    }

    #[test]
    fn plausible_headers_never_panic(bytes in plausible_datagram()) {
        decode_everything(&bytes);
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        frame in control_strategy(),
        data in data_datagram_strategy(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        for mut bytes in [frame.to_bytes(), data.0] {
            for (index, value) in &edits {
                let at = index.index(bytes.len());
                bytes[at] = *value;
            }
            decode_everything(&bytes);
        }
    }

    #[test]
    fn control_frames_round_trip(frame in control_strategy()) {
        let bytes = frame.to_bytes();
        prop_assert_eq!(bytes.len(), frame.encoded_length());
        prop_assert_eq!(parse_control(&bytes), Ok(Some(frame.clone())));
        // Each frame's own decoder agrees, and a larger buffer changes nothing.
        let mut padded = vec![0xa5u8; bytes.len() + 16];
        prop_assert_eq!(frame.emit(&mut padded), bytes.len());
        prop_assert_eq!(&padded[..bytes.len()], &bytes[..]);
        prop_assert!(padded[bytes.len()..].iter().all(|&byte| byte == 0xa5));
        match &frame {
            ControlFrame::Setup(setup) => prop_assert_eq!(Setup::parse(&bytes), Ok(*setup)),
            ControlFrame::StatusMessage(sm) => {
                prop_assert_eq!(StatusMessage::parse(&bytes), Ok(*sm))
            }
            ControlFrame::Nak(nak) => prop_assert_eq!(Nak::parse(&bytes), Ok(*nak)),
            ControlFrame::Rttm(rttm) => prop_assert_eq!(RttMeasurement::parse(&bytes), Ok(*rttm)),
            ControlFrame::Error(err) => prop_assert_eq!(ErrorFrame::parse(&bytes), Ok(err.clone())),
            ControlFrame::ResponseSetup(rsp) => {
                prop_assert_eq!(ResponseSetup::parse(&bytes), Ok(*rsp))
            }
        }
    }

    #[test]
    fn every_truncation_of_a_control_frame_is_rejected(frame in control_strategy()) {
        let bytes = frame.to_bytes();
        for length in 0..bytes.len() {
            prop_assert!(parse_control(&bytes[..length]).is_err());
        }
    }

    #[test]
    fn data_headers_round_trip(header in data_header_strategy()) {
        let mut bytes = [0xa5u8; DATA_HEADER_LENGTH];
        header.emit(&mut bytes);
        prop_assert_eq!(DataHeader::parse(&bytes), Ok(header));
        prop_assert_eq!(parse_control(&bytes), Ok(None));
        let heartbeat = header.frame_type == FrameType::Data && header.frame_length == 0;
        prop_assert_eq!(DataHeader::is_heartbeat_datagram(&bytes), heartbeat);
        for length in 0..DATA_HEADER_LENGTH {
            prop_assert!(DataHeader::parse(&bytes[..length]).is_err());
        }
    }

    #[test]
    fn data_datagrams_round_trip((datagram, expected) in data_datagram_strategy()) {
        let decoded: Vec<(DataHeader, Vec<u8>)> = DataFrames::new(&datagram)
            .map(|item| item.map(|(header, payload)| (header, payload.to_vec())))
            .collect::<Result<_, _>>()
            .map_err(|error| TestCaseError::fail(error.to_string()))?;
        prop_assert_eq!(decoded, expected);
    }

    #[test]
    fn truncated_data_datagrams_lose_frames_or_fail((datagram, expected) in data_datagram_strategy()) {
        for length in 0..datagram.len() {
            let items: Vec<_> = DataFrames::new(&datagram[..length]).collect();
            let failed = items.iter().any(Result::is_err);
            // Cutting exactly between two frames leaves a shorter, valid datagram; any other
            // cut must be reported.
            if !failed {
                prop_assert!(length > 0 && length % 32 == 0);
                prop_assert!(items.len() < expected.len());
                for (item, (header, payload)) in items.iter().zip(&expected) {
                    let (decoded, decoded_payload) = item.as_ref().unwrap();
                    prop_assert_eq!(decoded, header);
                    prop_assert_eq!(*decoded_payload, &payload[..]);
                }
            }
        }
    }

    #[test]
    fn heartbeats_round_trip(
        v in any::<[i32; 3]>(),
        slot in 0i32..=(i32::MAX / 32),
        end_of_stream in any::<bool>(),
    ) {
        let header = DataHeader::heartbeat(v[0], v[1], v[2], slot * 32, end_of_stream);
        let mut bytes = [0u8; DATA_HEADER_LENGTH];
        header.emit(&mut bytes);
        prop_assert!(DataHeader::is_heartbeat_datagram(&bytes));
        let items: Vec<_> = DataFrames::new(&bytes).collect();
        prop_assert_eq!(items, vec![Ok((header, &[][..]))]);
        prop_assert_eq!(header.is_end_of_stream(), end_of_stream);
    }
}
