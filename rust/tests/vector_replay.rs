//! Interoperability with captured Aeron traffic (`rust/tests/vectors/`), in both directions:
//! our receiver state machine rebuilds the application messages from the packets an Aeron
//! sender produced, and our sender produces the same bytes an Aeron sender put on the wire
//! for the same messages.

use std::time::Duration;

use affinity::flow_control::{build, FlowControlDefaults};
use affinity::logbuffer::StreamIdentity;
use affinity::protocol::{ImageConfig, PublicationConfig};
use affinity::time::Instant;
use affinity::wire::{flags, parse_control, ControlFrame, DataHeader, FrameHeader, FrameType, Setup};
use serde_json::Value;

mod support;
use support::{from_hex, load, vectors_dir};

#[path = "support/anonymous_logs.rs"]
mod anonymous_logs;
use anonymous_logs::{new_image, new_publication, Image, NetworkPublication};

fn scenario(name: &str) -> Value {
    load(&vectors_dir().join(format!("{name}.json")))
}

fn packets(scenario: &Value, direction: &str) -> Vec<(usize, Vec<u8>)> {
    scenario["packets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["direction"] == direction)
        .map(|p| (p["index"].as_u64().unwrap() as usize, from_hex(p["hex"].as_str().unwrap())))
        .collect()
}

/// The payloads M1..M5 of `rust/tests/vectors/README.md`.
fn basic_payloads() -> Vec<Vec<u8>> {
    vec![
        b"Hello Aeron wire vector #1".to_vec(),
        (0u8..16).collect(),
        Vec::new(),
        (0..3000).map(|i| (i & 0xff) as u8).collect(),
        vec![0xAB; 100],
    ]
}

/// B0000..B0039 of `unicast_nak.json`.
fn bulk_payload(n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; 200];
    let text = format!("bulk message {n:05}");
    bytes[..text.len()].copy_from_slice(text.as_bytes());
    for (j, byte) in bytes.iter_mut().enumerate().skip(32) {
        *byte = ((n + j) & 0xff) as u8;
    }
    bytes
}

fn image_for(setup: &Setup) -> Image {
    let identity = StreamIdentity {
        session_id: setup.session_id,
        stream_id: setup.stream_id,
        initial_term_id: setup.initial_term_id,
        term_length: setup.term_length as u32,
    };
    let mut config = ImageConfig::new(identity, identity.position(setup.active_term_id, setup.term_offset), 1);
    // The vectors were captured with Aeron's default window (`AERON_RCV_INITIAL_WINDOW_LENGTH`),
    // not this driver's larger default.
    config.receiver_window = affinity::protocol::defaults::AERON_RECEIVER_WINDOW.min(identity.term_length / 2);
    let mut image = new_image(config, Instant::ZERO);
    image.add_consumer(1);
    image
}

/// Feeds every sender→receiver packet of `name` into our image; returns the messages.
fn receive(name: &str) -> (Vec<Vec<u8>>, Image) {
    let scenario = scenario(name);
    let mut image: Option<Image> = None;
    let mut messages = Vec::new();
    let mut partial = Vec::new();
    for (index, datagram) in packets(&scenario, "sender->receiver") {
        let now = Instant::from_nanos(index as u64 * 1_000_000);
        match FrameHeader::parse(&datagram).unwrap().frame_type {
            FrameType::Setup => {
                image.get_or_insert_with(|| image_for(&Setup::parse(&datagram).unwrap()));
            }
            FrameType::Data | FrameType::Pad => {
                let image = image.as_mut().expect("SETUP comes first");
                // Retransmits of data already received are duplicates; everything else is taken.
                let _ = image.on_data(&datagram, now);
                image.poll_fragments(1, usize::MAX, |fragment| {
                    partial.extend_from_slice(fragment.payload);
                    if fragment.header.flags & flags::END != 0 {
                        messages.push(std::mem::take(&mut partial));
                    }
                });
            }
            _ => {}
        }
    }
    (messages, image.expect("an image"))
}

#[test]
fn our_receiver_rebuilds_the_messages_of_an_aeron_sender() {
    let (messages, image) = receive("unicast_basic");
    assert_eq!(messages, basic_payloads());
    assert!(image.is_end_of_stream(), "the EOS heartbeats end the stream");
}

#[test]
fn our_receiver_follows_a_term_rollover_with_padding() {
    let (messages, _) = receive("unicast_rollover");
    assert_eq!(messages, basic_payloads());
}

#[test]
fn our_receiver_takes_aeron_retransmissions() {
    let (messages, image) = receive("unicast_nak");
    assert_eq!(messages, (0..40).map(bulk_payload).collect::<Vec<_>>());
    assert!(image.counters().duplicates > 0 || image.counters().retransmits_received > 0);
}

fn publication_like(setup: &Setup) -> NetworkPublication {
    let identity = StreamIdentity {
        session_id: setup.session_id,
        stream_id: setup.stream_id,
        initial_term_id: setup.initial_term_id,
        term_length: setup.term_length as u32,
    };
    let initial_position = identity.position(setup.active_term_id, setup.term_offset);
    let config = PublicationConfig { mtu: setup.mtu as u32, ..PublicationConfig::new(identity, initial_position) };
    new_publication(config, build(None, false, &FlowControlDefaults::default()), Instant::ZERO)
}

/// Offers M1, M2+M3, M4, M5 as the captured Aeron client did and checks every datagram we
/// send against the capture, byte for byte.
fn send_like_aeron(name: &str) {
    let scenario = scenario(name);
    let sent = packets(&scenario, "sender->receiver");
    let received = packets(&scenario, "receiver->sender");
    let setup = Setup::parse(&sent[0].1).unwrap();
    let mut publication = publication_like(&setup);
    let mut out = vec![0u8; 2048];
    let now = Instant::ZERO;

    let length = publication.poll_transmit(now, &mut out).unwrap();
    assert_eq!(&out[..length], &sent[0].1[..], "SETUP");
    let Some(ControlFrame::StatusMessage(first_sm)) = parse_control(&received[0].1).unwrap() else { panic!() };
    publication.on_status_message(&first_sm, now);
    publication.on_idle(now);
    assert!(publication.is_connected());

    let expected_data: Vec<&Vec<u8>> = sent
        .iter()
        .map(|(_, bytes)| bytes)
        .filter(|bytes| {
            let header = FrameHeader::parse(bytes).unwrap();
            matches!(header.frame_type, FrameType::Data | FrameType::Pad) && !DataHeader::is_heartbeat_datagram(bytes)
        })
        .collect();
    let payloads = basic_payloads();
    let groups: [&[usize]; 4] = [&[0], &[1, 2], &[3], &[4]];
    let mut ours = Vec::new();
    for group in groups {
        for &message in group {
            publication.offer(&payloads[message], 0).unwrap();
        }
        while let Some(length) = publication.poll_transmit(now, &mut out) {
            ours.push(out[..length].to_vec());
        }
    }
    assert_eq!(ours.len(), expected_data.len(), "datagram count");
    for (index, (ours, theirs)) in ours.iter().zip(&expected_data).enumerate() {
        assert_eq!(ours, *theirs, "data datagram {index}");
    }

    // The idle heartbeat carries the position after M5, exactly as Aeron's.
    let heartbeat = sent.iter().map(|(_, b)| b).rfind(|b| DataHeader::is_heartbeat_datagram(b) && b[5] == 0xC0);
    let length = publication.poll_transmit(now + Duration::from_millis(100), &mut out).unwrap();
    assert_eq!(&out[..length], &heartbeat.unwrap()[..], "heartbeat");
}

#[test]
fn our_sender_emits_the_bytes_an_aeron_sender_emits() {
    send_like_aeron("unicast_basic");
}

#[test]
fn our_sender_pads_and_rolls_over_like_aeron() {
    send_like_aeron("unicast_rollover");
}

#[test]
fn our_status_messages_match_aerons_but_for_the_receiver_id() {
    for name in ["unicast_basic", "unicast_rollover"] {
        let scenario = scenario(name);
        let setup = Setup::parse(&packets(&scenario, "sender->receiver")[0].1).unwrap();
        let theirs = &packets(&scenario, "receiver->sender")[0].1;
        let mut image = image_for(&setup);
        let mut out = vec![0u8; 64];
        let length = image.poll_transmit(Instant::ZERO, &mut out).unwrap();
        assert_eq!(length, theirs.len(), "{name}");
        assert_eq!(&out[..28], &theirs[..28], "{name}: everything before the receiver id");
    }
}

#[test]
fn our_receiver_rebuilds_aeron_multicast_and_rttm_streams() {
    for name in ["multicast_min", "multicast_tagged", "unicast_rttm"] {
        let (messages, _) = receive(name);
        assert_eq!(messages, basic_payloads(), "{name}");
    }
}

/// Feeds the status messages Aeron receivers sent in `name` to our publication configured with
/// `fc`, at their captured times; returns the index of the packet after which it connected.
fn connects_after(name: &str, fc: &str) -> (usize, Value) {
    let scenario = scenario(name);
    let setup = Setup::parse(&packets(&scenario, "sender->receiver")[0].1).unwrap();
    let spec = affinity::flow_control::FlowControlSpec::parse(fc).unwrap();
    let defaults = FlowControlDefaults::default();
    let flow_control = affinity::flow_control::build_checked(Some(&spec), true, &defaults).unwrap();
    let mut publication = publication_like(&setup);
    // Same settings, group semantics and the requested strategy.
    let config = PublicationConfig { is_group: true, ..publication.config().clone() };
    publication = new_publication(config, flow_control, Instant::ZERO);
    let mut out = vec![0u8; 2048];
    publication.poll_transmit(Instant::ZERO, &mut out);
    for packet in scenario["packets"].as_array().unwrap() {
        let now = Instant::from_nanos((packet["t_rel_s"].as_f64().unwrap() * 1e9) as u64);
        if packet["direction"] == "receiver->sender" {
            let bytes = from_hex(packet["hex"].as_str().unwrap());
            if let Ok(Some(ControlFrame::StatusMessage(message))) = parse_control(&bytes) {
                publication.on_status_message(&message, now);
            }
        }
        publication.on_idle(now);
        if publication.is_connected() {
            return (packet["index"].as_u64().unwrap() as usize, scenario);
        }
    }
    panic!("{name}: never connected");
}

/// Index of the first normal (not SEND_SETUP) status message from the `n`-th receiver id.
fn first_status_of_receiver(scenario: &Value, n: usize) -> usize {
    let mut receivers: Vec<(u64, i64)> = scenario["identifiers"]["receivers_in_order_of_first_SM"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, info)| (info["first_packet_index"].as_u64().unwrap(), id.parse().unwrap()))
        .collect();
    receivers.sort();
    let receiver_id = receivers[n].1;
    scenario["packets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["direction"] == "receiver->sender")
        .find_map(|p| match parse_control(&from_hex(p["hex"].as_str().unwrap())) {
            Ok(Some(ControlFrame::StatusMessage(m))) if m.receiver_id == receiver_id && !m.is_send_setup() => {
                Some(p["index"].as_u64().unwrap() as usize)
            }
            _ => None,
        })
        .unwrap()
}

#[test]
fn tagged_group_of_two_connects_when_aerons_second_tagged_receiver_reports() {
    // Receivers in order of first SM: A (tag 1001), B (untagged), C (tag 1001, late).
    let (connected_at, scenario) = connects_after("multicast_tagged", "tagged,g:1001/2,t:2s");
    let third = first_status_of_receiver(&scenario, 2);
    assert_eq!(connected_at, third, "connected exactly when C's first status message arrived");
}

#[test]
fn min_group_of_two_connects_when_aerons_second_receiver_reports() {
    let (connected_at, scenario) = connects_after("multicast_min", "min,g:/2");
    let second = first_status_of_receiver(&scenario, 1);
    assert_eq!(connected_at, second);
}
