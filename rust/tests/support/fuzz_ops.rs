//! Hostile receiver input for the whole-receiver fuzz targets: SETUPs, DATA, PAD, heartbeats
//! and EOS with arbitrary fields, raw bytes and waits (shared by `receiver_fuzz.rs` and
//! `media_driver_receiver_fuzz.rs`).
#![allow(dead_code)]

use std::collections::HashMap;

use affinity::wire::{flags, DataHeader, FrameType, Setup, DATA_HEADER_LENGTH};
use proptest::prelude::*;

/// The stream every op names.
pub const STREAM: i32 = 10;

/// One step of hostile traffic.
#[derive(Clone, Debug)]
pub enum Op {
    /// A SETUP.
    Setup {
        session: i32,
        initial: i32,
        active_delta: i32,
        term_offset: i32,
        term_length: i32,
        mtu: i32,
        flags: u8,
    },
    Data {
        session: i32,
        term_delta: i32,
        term_offset: i32,
        payload: usize,
        frame_flags: u8,
        frames: usize,
    },
    Pad {
        session: i32,
        term_delta: i32,
        term_offset: i32,
        length: i32,
    },
    Heartbeat {
        session: i32,
        term_delta: i32,
        term_offset: i32,
        eos: bool,
    },
    Raw(Vec<u8>),
    Wait(u64),
}

fn any_or(small: std::ops::Range<i32>) -> impl Strategy<Value = i32> {
    prop_oneof![4 => small, 1 => any::<i32>()]
}

pub fn op() -> impl Strategy<Value = Op> {
    let session = 0i32..4;
    prop_oneof![
        2 => (
            session.clone(),
            prop_oneof![Just(0), Just(1000), Just(i32::MAX), Just(i32::MIN), any::<i32>()],
            any_or(-3..4),
            prop_oneof![(0i32..2048).prop_map(|o| o * 32), any::<i32>()],
            prop_oneof![Just(65536), Just(131072), Just(1 << 30), any::<i32>()],
            prop_oneof![Just(1408), Just(32), Just(65504), any::<i32>()],
            any::<u8>(),
        )
            .prop_map(|(session, initial, active_delta, term_offset, term_length, mtu, flags)| Op::Setup {
                session,
                initial,
                active_delta,
                term_offset,
                term_length,
                mtu,
                flags
            }),
        8 => (
            session.clone(),
            any_or(-2..4),
            prop_oneof![(0i32..4096).prop_map(|o| o * 32), any::<i32>()],
            0usize..1500,
            prop_oneof![Just(flags::UNFRAGMENTED), any::<u8>()],
            1usize..4,
        )
            .prop_map(|(session, term_delta, term_offset, payload, frame_flags, frames)| Op::Data {
                session,
                term_delta,
                term_offset,
                payload,
                frame_flags,
                frames
            }),
        1 => (session.clone(), any_or(-2..4), prop_oneof![(0i32..4096).prop_map(|o| o * 32), any::<i32>()], any::<i32>())
            .prop_map(|(session, term_delta, term_offset, length)| Op::Pad { session, term_delta, term_offset, length }),
        3 => (session, any_or(-2..200), prop_oneof![(0i32..4096).prop_map(|o| o * 32), any::<i32>()], any::<bool>())
            .prop_map(|(session, term_delta, term_offset, eos)| Op::Heartbeat { session, term_delta, term_offset, eos }),
        1 => prop::collection::vec(any::<u8>(), 0..200).prop_map(Op::Raw),
        2 => prop_oneof![1u64..50, Just(10_500u64)].prop_map(Op::Wait),
    ]
}

fn header(
    session: i32,
    term_id: i32,
    term_offset: i32,
    frame_length: i32,
    frame_flags: u8,
    kind: FrameType,
) -> Vec<u8> {
    let mut bytes = vec![0u8; DATA_HEADER_LENGTH];
    DataHeader {
        frame_length,
        flags: frame_flags,
        frame_type: kind,
        term_offset,
        session_id: session,
        stream_id: STREAM,
        term_id,
        reserved_value: 0,
    }
    .emit(&mut bytes);
    bytes
}

pub fn encode(op: &Op, initial_terms: &mut HashMap<i32, i32>) -> Option<Vec<u8>> {
    let term = |session: i32, delta: i32, initial_terms: &HashMap<i32, i32>| {
        initial_terms.get(&session).copied().unwrap_or(0).wrapping_add(delta)
    };
    Some(match *op {
        Op::Setup { session, initial, active_delta, term_offset, term_length, mtu, flags } => {
            initial_terms.insert(session, initial);
            let mut bytes = vec![0u8; Setup::LENGTH];
            Setup {
                flags,
                term_offset,
                session_id: session,
                stream_id: STREAM,
                initial_term_id: initial,
                active_term_id: initial.wrapping_add(active_delta),
                term_length,
                mtu,
                ttl: 0,
            }
            .emit(&mut bytes);
            bytes
        }
        Op::Data { session, term_delta, term_offset, payload, frame_flags, frames } => {
            let term_id = term(session, term_delta, initial_terms);
            let mut bytes = Vec::new();
            let aligned = (DATA_HEADER_LENGTH + payload).div_ceil(32) * 32;
            for index in 0..frames {
                let offset = term_offset.wrapping_add((index * aligned) as i32);
                bytes.extend(header(
                    session,
                    term_id,
                    offset,
                    (DATA_HEADER_LENGTH + payload) as i32,
                    frame_flags,
                    FrameType::Data,
                ));
                bytes.extend((0..aligned - DATA_HEADER_LENGTH).map(|i| (i as u8) ^ (index as u8)));
            }
            bytes
        }
        Op::Pad { session, term_delta, term_offset, length } => header(
            session,
            term(session, term_delta, initial_terms),
            term_offset,
            length,
            flags::UNFRAGMENTED,
            FrameType::Pad,
        ),
        Op::Heartbeat { session, term_delta, term_offset, eos } => {
            let frame_flags = if eos { flags::UNFRAGMENTED | flags::EOS } else { flags::UNFRAGMENTED };
            header(session, term(session, term_delta, initial_terms), term_offset, 0, frame_flags, FrameType::Data)
        }
        Op::Raw(ref bytes) => bytes.clone(),
        Op::Wait(_) => return None,
    })
}
