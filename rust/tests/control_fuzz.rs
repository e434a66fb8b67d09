//! Property tests for the control plane: arbitrary or mutated bytes never panic a decoder or
//! the group state fed with them, and emit → parse round-trips for arbitrary field values.

use std::time::Duration;

use affinity::control::codec::{emit_record, DATA_FIXED_LENGTH};
use affinity::control::Timing;
use affinity::control::{
    parse_control, Ack, AckEntry, Claim, ClaimState, ControlMessage, DataHeader, DataMessage, Header, Heartbeat,
    ProducerAck, QueueFigures, Role,
};
use affinity::groups::consumer::ConsumerState;
use affinity::groups::publisher::PublisherState;
use affinity::groups::GroupConfig;
use affinity::time::Instant;
use proptest::prelude::*;

const CASES: u32 = 2000;

fn decode_everything(bytes: &[u8]) {
    let _ = Header::parse(bytes);
    let _ = Heartbeat::parse(bytes);
    let _ = Ack::parse(bytes);
    if let Ok(message) = DataMessage::parse(bytes) {
        // A validated DATA message yields exactly its declared records.
        assert_eq!(message.records().count(), message.header.record_count as usize);
    }
    if let Ok(message) = parse_control(bytes) {
        let _ = match message {
            ControlMessage::Heartbeat(heartbeat) => heartbeat.to_bytes(),
            ControlMessage::Ack(ack) => ack.to_bytes(),
        };
    }
}

fn group() -> GroupConfig {
    GroupConfig::new("fuzz", "hp", 16, 4, 1 << 16).unwrap()
}

/// A consumer that owns every queue (epoch 1) so DATA reaches the dedup logic.
fn active_consumer() -> ConsumerState {
    let mut consumer = ConsumerState::new(group(), 10, 0, 1, Timing::default(), Duration::from_secs(30), Instant::ZERO);
    consumer.handle_timeout(Instant::ZERO);
    consumer.handle_timeout(Instant::from_nanos(1_000_000_000));
    assert_eq!(consumer.owned_queues(), vec![0, 1, 2, 3]);
    consumer
}

/// A header naming the fuzz group, so decoders and state get past the first checks.
fn plausible(kind: u8) -> impl Strategy<Value = Vec<u8>> {
    (prop::collection::vec(any::<u8>(), 0..400), any::<u16>(), 0u64..3).prop_map(move |(tail, flags, sender)| {
        let mut bytes = Vec::new();
        bytes.push(1);
        bytes.push(kind);
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&group().fingerprint().to_le_bytes());
        bytes.extend_from_slice(&sender.to_le_bytes());
        bytes.extend_from_slice(&tail);
        bytes
    })
}

fn valid_data(records: &[(Vec<u8>, Vec<u8>)], first: u64, queue: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    DataHeader {
        fingerprint: group().fingerprint(),
        producer: 7,
        queue,
        record_count: records.len() as u32,
        epoch: 1,
        acked_floor: first.saturating_sub(1),
        first_sequence: first,
    }
    .emit(&mut bytes);
    for (key, payload) in records {
        emit_record(&mut bytes, 3, key, None, payload).unwrap();
    }
    bytes
}

fn heartbeat_strategy() -> impl Strategy<Value = Heartbeat> {
    let claim = (any::<u32>(), any::<u64>(), 1u8..=4, prop::collection::vec(any::<(u64, u64, u64)>(), 0..4)).prop_map(
        |(queue, epoch, state, acks)| Claim {
            queue,
            epoch,
            state: ClaimState::from_code(state).unwrap(),
            acks: acks
                .into_iter()
                .map(|(producer, acked, received)| ProducerAck { producer, acked, received })
                .collect(),
        },
    );
    let figure = any::<(u32, u64, u64, u64, u64, u64, u64)>().prop_map(|(queue, owner, epoch, sent, acked, b, m)| {
        QueueFigures { queue, owner, epoch, sent, acked, retained_bytes: b, retained_messages: m }
    });
    (
        any::<(u64, u64, bool)>(),
        1u8..=3,
        "\\PC{0,20}",
        "[0-9.:]{0,30}",
        any::<(u32, u32, u32)>(),
        prop::collection::vec(claim, 0..5),
        prop::collection::vec(figure, 0..5),
    )
        .prop_map(
            |((fingerprint, member_id, leaving), role, name, endpoint, (index, count, pid), claims, figures)| {
                Heartbeat {
                    fingerprint,
                    member_id,
                    leaving,
                    role: Role::from_code(role).unwrap(),
                    name,
                    endpoint,
                    index,
                    count,
                    pid,
                    claims,
                    figures,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn arbitrary_bytes_never_panic_a_decoder(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        decode_everything(&bytes);
    }

    #[test]
    fn plausible_messages_never_panic_decoders_or_state(kind in 1u8..=3, bytes in (1u8..=3).prop_flat_map(plausible)) {
        let mut bytes = bytes;
        if let Some(byte) = bytes.get_mut(1) {
            *byte = kind;
        }
        decode_everything(&bytes);
        let mut consumer = active_consumer();
        let now = Instant::from_nanos(2_000_000_000);
        let _ = consumer.on_data(&bytes, now);
        let mut publisher = PublisherState::new(group(), 7, Timing::default(), Duration::from_secs(1), now);
        match parse_control(&bytes) {
            Ok(ControlMessage::Heartbeat(heartbeat)) => {
                consumer.on_heartbeat(heartbeat.clone(), now);
                publisher.on_heartbeat(heartbeat, now);
            }
            Ok(ControlMessage::Ack(ack)) => publisher.on_ack(&ack, now),
            Err(_) => {}
        }
        consumer.handle_timeout(now + Duration::from_secs(1));
        publisher.handle_timeout(now + Duration::from_secs(1));
        let mut out = Vec::new();
        consumer.deliver(1000, &mut out);
        let _ = consumer.take_acks();
        prop_assert!(consumer.heartbeat("c", "127.0.0.1:1", 1).to_bytes().is_ok());
    }

    #[test]
    fn mutated_data_never_panics_and_never_delivers_out_of_order(
        records in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..8), prop::collection::vec(any::<u8>(), 0..16)), 1..6),
        first in 1u64..4,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut bytes = valid_data(&records, first, 1);
        for (index, value) in flips {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        decode_everything(&bytes);
        let mut consumer = active_consumer();
        let now = Instant::from_nanos(2_000_000_000);
        let _ = consumer.on_data(&bytes, now);
        let _ = consumer.on_data(&valid_data(&records, 1, 1), now);
        let mut out = Vec::new();
        consumer.deliver(usize::MAX, &mut out);
        let mut last: std::collections::HashMap<(u64, u32), u64> = Default::default();
        for delivery in out {
            let previous = last.insert((delivery.producer, delivery.queue), delivery.sequence);
            prop_assert!(previous.is_none_or(|p| delivery.sequence == p + 1));
        }
    }

    #[test]
    fn heartbeats_round_trip(heartbeat in heartbeat_strategy()) {
        let bytes = heartbeat.to_bytes().unwrap();
        prop_assert_eq!(bytes.len(), heartbeat.encoded_length());
        prop_assert_eq!(Heartbeat::parse(&bytes).unwrap(), heartbeat);
        for length in 0..bytes.len() {
            prop_assert!(Heartbeat::parse(&bytes[..length]).is_err());
        }
    }

    #[test]
    fn acks_round_trip(
        header in any::<(u64, u64, u64)>(),
        entries in prop::collection::vec(any::<(u32, u32, u64, u64, u64)>(), 0..8),
    ) {
        let ack = Ack {
            fingerprint: header.0,
            consumer: header.1,
            producer: header.2,
            entries: entries
                .into_iter()
                .map(|(queue, flags, epoch, acked, received)| AckEntry { queue, flags, epoch, acked, received })
                .collect(),
        };
        let bytes = ack.to_bytes().unwrap();
        prop_assert_eq!(Ack::parse(&bytes).unwrap(), ack);
    }

    #[test]
    fn data_round_trips_and_truncations_are_rejected(
        records in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..8), prop::collection::vec(any::<u8>(), 0..16)), 0..6),
        first in 1u64..1_000_000,
    ) {
        let bytes = valid_data(&records, first, 2);
        let message = DataMessage::parse(&bytes).unwrap();
        let decoded: Vec<(u64, Vec<u8>, Vec<u8>)> =
            message.records().map(|(sequence, r)| (sequence, r.key.to_vec(), r.payload.to_vec())).collect();
        prop_assert_eq!(decoded.len(), records.len());
        for (i, ((sequence, key, payload), (k, p))) in decoded.iter().zip(&records).enumerate() {
            prop_assert_eq!(*sequence, first + i as u64);
            prop_assert_eq!(key, k);
            prop_assert_eq!(payload, p);
        }
        prop_assert!(bytes.len() >= DATA_FIXED_LENGTH);
        for length in 0..bytes.len() {
            prop_assert!(DataMessage::parse(&bytes[..length]).is_err(), "truncated to {}", length);
        }
    }
}
