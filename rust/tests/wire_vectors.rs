//! Decodes every packet captured from a real Aeron 1.48 C driver (`rust/tests/vectors/*.json`),
//! checks every field against the independent decode in the file, re-encodes the packet to the
//! identical bytes, and checks the per-type frame counts.
//!
//! The vectors live in the repository at `rust/tests/vectors/` (found through
//! `CARGO_MANIFEST_DIR`); `AFFINITY_VECTORS_DIR` overrides the location. A missing directory
//! fails the test.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use affinity::wire::{parse_control, ControlFrame, DataFrames, DataHeader, FrameHeader, FrameType, DATA_HEADER_LENGTH};
use serde_json::{json, Map, Value};

mod support;
use support::{from_hex, load, vectors_dir};

fn vector_files() -> Vec<PathBuf> {
    let dir = vectors_dir();
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| {
            path.extension().is_some_and(|ext| ext == "json")
                && path.file_name().is_some_and(|name| name != "summary.json")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 8, "expected at least 8 vector files in {}, found {}", dir.display(), files.len());
    files
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Flag names as the vectors spell them, highest bit first.
fn flag_names(frame_type: FrameType, flags: u8) -> Value {
    let table: &[(u8, &str)] = match frame_type {
        FrameType::Data | FrameType::Pad => &[(0x80, "BEGIN"), (0x40, "END"), (0x20, "EOS")],
        FrameType::StatusMessage => &[(0x80, "SEND_SETUP"), (0x40, "EOS")],
        FrameType::Setup => &[(0x80, "SEND_RESPONSE_SETUP"), (0x40, "GROUP")],
        FrameType::Rttm => &[(0x80, "REPLY_REQUESTED")],
        FrameType::Error => &[(0x08, "HAS_GROUP_TAG")],
        _ => &[],
    };
    table.iter().filter(|(bit, _)| flags & bit != 0).map(|(_, name)| json!(name)).collect()
}

/// Fields every frame has, in the vectors' naming.
fn common(offset: usize, frame_type: FrameType, flags: u8, frame_length: i32) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("offset_in_datagram".into(), json!(offset));
    map.insert("type".into(), json!(frame_type.name()));
    map.insert("type_code".into(), json!(frame_type.code()));
    map.insert("version".into(), json!(0));
    map.insert("flags".into(), json!(format!("{flags:#04x}")));
    map.insert("frame_length".into(), json!(frame_length));
    map
}

fn data_fields(offset: usize, header: &DataHeader, payload: &[u8], heartbeat: bool) -> Map<String, Value> {
    let mut map = common(offset, header.frame_type, header.flags, header.frame_length);
    map.insert("term_offset".into(), json!(header.term_offset));
    map.insert("session_id".into(), json!(header.session_id));
    map.insert("stream_id".into(), json!(header.stream_id));
    map.insert("term_id".into(), json!(header.term_id));
    map.insert("reserved_value".into(), json!(header.reserved_value));
    map.insert("flag_names".into(), flag_names(header.frame_type, header.flags));
    if header.frame_type == FrameType::Data && !heartbeat {
        assert_eq!(payload.len(), header.payload_length());
        map.insert("payload_length".into(), json!(header.payload_length()));
        map.insert("payload_hex".into(), json!(to_hex(payload)));
        map.insert("aligned_length".into(), json!(header.wire_length()));
    }
    map
}

fn control_fields(frame: &ControlFrame, frame_length: i32) -> Map<String, Value> {
    let (flags, named_flags) = match frame {
        ControlFrame::StatusMessage(sm) => (sm.flags, true),
        ControlFrame::Setup(setup) => (setup.flags, true),
        ControlFrame::Rttm(rttm) => (rttm.flags, true),
        ControlFrame::Error(err) => (err.flags, true),
        ControlFrame::Nak(_) | ControlFrame::ResponseSetup(_) => (0, false),
    };
    let mut map = common(0, frame.frame_type(), flags, frame_length);
    if named_flags {
        map.insert("flag_names".into(), flag_names(frame.frame_type(), flags));
    }
    let mut put = |key: &str, value: Value| {
        map.insert(key.into(), value);
    };
    match frame {
        ControlFrame::StatusMessage(sm) => {
            put("session_id", json!(sm.session_id));
            put("stream_id", json!(sm.stream_id));
            put("consumption_term_id", json!(sm.consumption_term_id));
            put("consumption_term_offset", json!(sm.consumption_term_offset));
            put("receiver_window", json!(sm.receiver_window));
            put("receiver_id", json!(sm.receiver_id));
            if let Some(tag) = sm.group_tag {
                put("group_tag", json!(tag));
            }
        }
        ControlFrame::Nak(nak) => {
            put("session_id", json!(nak.session_id));
            put("stream_id", json!(nak.stream_id));
            put("term_id", json!(nak.term_id));
            put("term_offset", json!(nak.term_offset));
            put("length", json!(nak.length));
        }
        ControlFrame::Rttm(rttm) => {
            put("session_id", json!(rttm.session_id));
            put("stream_id", json!(rttm.stream_id));
            put("echo_timestamp", json!(rttm.echo_timestamp_ns));
            put("reception_delta", json!(rttm.reception_delta_ns));
            put("receiver_id", json!(rttm.receiver_id));
        }
        ControlFrame::Error(err) => {
            put("session_id", json!(err.session_id));
            put("stream_id", json!(err.stream_id));
            put("receiver_id", json!(err.receiver_id));
            put("group_tag", json!(err.group_tag));
            put("error_code", json!(err.error_code));
            put("error_length", json!(err.message.len()));
            put("error_text", json!(err.message_lossy()));
        }
        ControlFrame::ResponseSetup(rsp) => {
            put("session_id", json!(rsp.session_id));
            put("stream_id", json!(rsp.stream_id));
            put("response_session_id", json!(rsp.response_session_id));
        }
        ControlFrame::Setup(setup) => {
            put("term_offset", json!(setup.term_offset));
            put("session_id", json!(setup.session_id));
            put("stream_id", json!(setup.stream_id));
            put("initial_term_id", json!(setup.initial_term_id));
            put("active_term_id", json!(setup.active_term_id));
            put("term_length", json!(setup.term_length));
            put("mtu", json!(setup.mtu));
            put("ttl", json!(setup.ttl));
        }
    }
    map
}

/// The category label `frame_type_counts` uses.
fn count_label(frame: &ControlFrame) -> String {
    match frame {
        ControlFrame::StatusMessage(sm) => {
            let mut label =
                String::from(if sm.group_tag.is_some() { "SM(with group tag)" } else { "SM(no group tag)" });
            if sm.is_send_setup() {
                label.push_str("+SEND_SETUP");
            }
            if sm.is_end_of_stream() {
                label.push_str("+EOS");
            }
            label
        }
        ControlFrame::Rttm(rttm) if rttm.is_reply_requested() => "RTTM(request)".into(),
        ControlFrame::Rttm(_) => "RTTM(reply)".into(),
        other => other.frame_type().name().into(),
    }
}

/// Compares our decode with the file's, key by key (the key sets must match exactly, so every
/// field of the independent decode is checked).
fn assert_same_fields(context: &str, ours: &Map<String, Value>, theirs: &Value) {
    let mut theirs = theirs.as_object().expect("frame object").clone();
    if let Some(kind) = theirs.remove("kind") {
        let kind = kind.as_str().expect("kind string").to_owned();
        let our_kind = ours.get("kind").and_then(Value::as_str).unwrap_or("");
        assert!(
            kind.starts_with(our_kind) && !our_kind.is_empty(),
            "{context}: kind {kind:?}, we decoded {our_kind:?}"
        );
    }
    let mut ours = ours.clone();
    ours.remove("kind");
    let our_keys: Vec<_> = ours.keys().collect();
    let their_keys: Vec<_> = theirs.keys().collect();
    assert_eq!(our_keys, their_keys, "{context}: field sets differ");
    for (key, value) in &theirs {
        assert_eq!(&ours[key], value, "{context}: field {key}");
    }
}

/// Decodes, checks and re-encodes one DATA/PAD datagram; returns the count labels.
fn check_data_datagram(context: &str, datagram: &[u8], frames: &[Value]) -> Vec<String> {
    let heartbeat = DataHeader::is_heartbeat_datagram(datagram);
    let decoded: Vec<(DataHeader, &[u8])> =
        DataFrames::new(datagram).collect::<Result<_, _>>().unwrap_or_else(|error| panic!("{context}: {error}"));
    assert_eq!(decoded.len(), frames.len(), "{context}: frame count");

    let mut rebuilt = vec![0xa5u8; datagram.len()];
    let mut offset = 0;
    let mut labels = Vec::new();
    for (index, ((header, payload), expected)) in decoded.iter().zip(frames).enumerate() {
        let context = format!("{context} frame {index}");
        let mut ours = data_fields(offset, header, payload, heartbeat);
        let label = match header.frame_type {
            FrameType::Pad => {
                ours.insert("kind".into(), json!("padding"));
                "PAD".to_owned()
            }
            _ if heartbeat && header.is_end_of_stream() => {
                ours.insert("kind".into(), json!("heartbeat+EOS"));
                "DATA(heartbeat+EOS)".to_owned()
            }
            _ if heartbeat => {
                ours.insert("kind".into(), json!("heartbeat"));
                "DATA(heartbeat)".to_owned()
            }
            _ => "DATA".to_owned(),
        };
        assert_same_fields(&context, &ours, expected);
        labels.push(label);

        let written = if header.frame_type == FrameType::Data && !heartbeat {
            header.emit_frame(payload, &mut rebuilt[offset..])
        } else {
            header.emit(&mut rebuilt[offset..]);
            DATA_HEADER_LENGTH
        };
        assert_eq!(written, header.wire_length(), "{context}: wire length");
        offset += written;
    }
    assert_eq!(offset, datagram.len(), "{context}: frames do not cover the datagram");
    assert_eq!(to_hex(&rebuilt), to_hex(datagram), "{context}: re-encoded datagram");
    labels
}

/// Decodes, checks and re-encodes one control datagram; returns its count label.
fn check_control_datagram(context: &str, datagram: &[u8], frames: &[Value]) -> String {
    assert_eq!(frames.len(), 1, "{context}: one control frame per datagram");
    let header = FrameHeader::parse(datagram).unwrap_or_else(|e| panic!("{context}: {e}"));
    let frame = parse_control(datagram)
        .unwrap_or_else(|error| panic!("{context}: {error}"))
        .unwrap_or_else(|| panic!("{context}: control frame ignored"));
    assert_same_fields(context, &control_fields(&frame, header.frame_length), &frames[0]);
    assert_eq!(frame.encoded_length(), datagram.len(), "{context}: length");
    let mut rebuilt = vec![0xa5u8; datagram.len()];
    assert_eq!(frame.emit(&mut rebuilt), datagram.len());
    assert_eq!(to_hex(&rebuilt), to_hex(datagram), "{context}: re-encoded frame");
    assert_eq!(frame.to_bytes(), datagram, "{context}: to_bytes");
    count_label(&frame)
}

fn expected_direction(datagram: &[u8]) -> &'static str {
    match FrameHeader::parse(datagram).map(|header| (header.frame_type, header.flags)) {
        Ok((FrameType::Data | FrameType::Pad | FrameType::Setup, _)) => "sender->receiver",
        Ok((FrameType::Rttm, flags)) if flags & 0x80 == 0 => "sender->receiver",
        _ => "receiver->sender",
    }
}

#[test]
fn every_captured_packet_decodes_and_reencodes_identically() {
    let mut total_packets = 0;
    let mut checked_types = BTreeMap::<String, u64>::new();
    for path in vector_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let vector = load(&path);
        let packets = vector["packets"].as_array().expect("packets array");
        assert!(!packets.is_empty(), "{name}: no packets");
        if let Some(count) = vector.get("packet_count").and_then(Value::as_u64) {
            assert_eq!(count, packets.len() as u64, "{name}: packet_count");
        }

        let mut counts = BTreeMap::<String, u64>::new();
        for packet in packets {
            let context = format!("{name} #{}", packet["index"]);
            let datagram = from_hex(packet["hex"].as_str().expect("hex string"));
            assert_eq!(packet["length"].as_u64(), Some(datagram.len() as u64), "{context}: length");
            assert_eq!(packet["direction"].as_str(), Some(expected_direction(&datagram)), "{context}: direction");
            let frames = packet["frames"].as_array().expect("frames array");
            let header = FrameHeader::parse(&datagram).unwrap_or_else(|e| panic!("{context}: {e}"));
            let labels = match header.frame_type {
                FrameType::Data | FrameType::Pad => {
                    assert_eq!(parse_control(&datagram), Ok(None), "{context}: data as control");
                    check_data_datagram(&context, &datagram, frames)
                }
                _ => vec![check_control_datagram(&context, &datagram, frames)],
            };
            for label in labels {
                *counts.entry(label).or_default() += 1;
            }
            total_packets += 1;
        }

        let expected: BTreeMap<String, u64> = vector["frame_type_counts"]
            .as_object()
            .expect("frame_type_counts")
            .iter()
            .map(|(key, value)| (key.clone(), value.as_u64().expect("count")))
            .collect();
        assert_eq!(counts, expected, "{name}: frame_type_counts");
        for (label, count) in counts {
            *checked_types.entry(label).or_default() += count;
        }
    }
    // Every frame type the transport speaks was seen at least once.
    for label in [
        "DATA",
        "DATA(heartbeat)",
        "DATA(heartbeat+EOS)",
        "PAD",
        "SETUP",
        "SM(no group tag)",
        "SM(with group tag)",
        "SM(no group tag)+SEND_SETUP",
        "NAK",
        "ERR",
        "RTTM(request)",
        "RTTM(reply)",
        "RSP_SETUP",
    ] {
        assert!(checked_types.contains_key(label), "no {label} in the vectors");
    }
    assert!(total_packets > 500, "only {total_packets} packets checked");
}

#[test]
fn summary_lists_every_vector_file() {
    let summary = load(&vectors_dir().join("summary.json"));
    let summary = summary.as_object().expect("summary object");
    for path in vector_files() {
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let vector = load(&path);
        let entry = summary.get(&stem).unwrap_or_else(|| panic!("summary.json lacks {stem}"));
        assert_eq!(entry["frame_type_counts"], vector["frame_type_counts"], "{stem}: summary counts");
    }
}
