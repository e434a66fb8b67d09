//! A publication and an image driven by a fake clock over a seeded lossy "network":
//! no sockets, no threads, no sleeps.

use std::collections::VecDeque;
use std::time::Duration;

use affinity::flow_control::{build, FlowControlDefaults};
use affinity::logbuffer::StreamIdentity;
use affinity::protocol::{ImageConfig, ImageCounters, OfferError, PublicationConfig};
use affinity::time::Instant;
use affinity::wire::{
    flags, parse_control, ControlFrame, DataHeader, FrameHeader, FrameType, Setup, DATA_HEADER_LENGTH,
};

#[path = "support/anonymous_logs.rs"]
mod anonymous_logs;
use anonymous_logs::{new_image, new_publication, Image, NetworkPublication};

const TERM_LENGTH: u32 = 64 * 1024;

struct Network {
    seed: u64,
    loss: f64,
    duplicate: f64,
    reorder: f64,
}

impl Network {
    fn chance(&mut self) -> f64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        (self.seed >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Delivers `datagram` into `queue` with loss, duplication and reordering.
    fn carry(&mut self, datagram: Vec<u8>, queue: &mut VecDeque<Vec<u8>>) {
        if self.chance() < self.loss {
            return;
        }
        if self.chance() < self.duplicate {
            queue.push_back(datagram.clone());
        }
        if self.chance() < self.reorder && !queue.is_empty() {
            let index = (self.chance() * queue.len() as f64) as usize;
            queue.insert(index, datagram);
        } else {
            queue.push_back(datagram);
        }
    }
}

fn publication(now: Instant) -> NetworkPublication {
    let identity = StreamIdentity { session_id: 77, stream_id: 1001, initial_term_id: -5, term_length: TERM_LENGTH };
    let config = PublicationConfig { linger: Duration::from_secs(1), ..PublicationConfig::new(identity, 0) };
    new_publication(config, build(None, false, &FlowControlDefaults::default()), now)
}

fn image_from(setup: &Setup, now: Instant) -> Image {
    let identity = StreamIdentity {
        session_id: setup.session_id,
        stream_id: setup.stream_id,
        initial_term_id: setup.initial_term_id,
        term_length: setup.term_length as u32,
    };
    let join_position = identity.position(setup.active_term_id, setup.term_offset);
    let config =
        ImageConfig { receiver_window: 16 * 1024, random_seed: 9, ..ImageConfig::new(identity, join_position, 4242) };
    let mut image = new_image(config, now);
    image.add_consumer(1);
    image
}

struct Run {
    delivered: Vec<Vec<u8>>,
    setups_seen: usize,
    elapsed: Duration,
    /// The image's counters at the end.
    image: ImageCounters,
    /// The furthest edge (consumption position + window) of a status message the publication got.
    last_edge: i64,
    /// The publication's sender position at the end.
    sender_position: i64,
}

/// Hostile or abnormal events of a run.
#[derive(Clone, Copy, Default)]
struct Scenario {
    /// The receiver's status messages and NAKs stop reaching the publication after this time.
    drop_status_after: Option<Duration>,
    /// Once this many messages were delivered, one forged heartbeat for the live session is
    /// injected, `terms_ahead` terms beyond the publication's current term.
    forged_heartbeat: Option<(usize, i32)>,
}

/// A 32-byte heartbeat for `publication`'s session, `terms_ahead` terms past its sender position.
fn forged_heartbeat(publication: &NetworkPublication, terms_ahead: i32) -> Vec<u8> {
    let identity = *publication.identity();
    let mut bytes = vec![0u8; DATA_HEADER_LENGTH];
    DataHeader {
        frame_length: 0,
        flags: flags::UNFRAGMENTED,
        frame_type: FrameType::Data,
        term_offset: 0,
        session_id: identity.session_id,
        stream_id: identity.stream_id,
        term_id: identity.term_id(publication.sender_position()).wrapping_add(terms_ahead),
        reserved_value: 0,
    }
    .emit(&mut bytes);
    bytes
}

/// Sends `count` messages through the network, returning what the consumer saw.
fn simulate(count: usize, forward: &mut Network, backward: &mut Network, scenario: Scenario) -> Run {
    let drop_status_after = scenario.drop_status_after;
    let mut forged = scenario.forged_heartbeat;
    let mut last_edge = 0i64;
    let step = Duration::from_micros(50);
    let mut now = Instant::ZERO;
    let mut publication = publication(now);
    let mut image: Option<Image> = None;
    let (mut to_receiver, mut to_sender) = (VecDeque::new(), VecDeque::new());
    let mut buffer = vec![0u8; 65536];
    let mut delivered = Vec::new();
    let mut setups_seen = 0;
    let mut offered = 0;
    let message = |i: usize| -> Vec<u8> {
        let mut bytes = vec![(i % 251) as u8; 1 + (i * 37) % 3000];
        bytes[0] = (i % 256) as u8;
        bytes
    };
    let mut partial: Vec<u8> = Vec::new();
    for _ in 0..2_000_000 {
        now = now + step;
        while offered < count {
            match publication.offer(&message(offered), 0) {
                Ok(_) => offered += 1,
                Err(OfferError::BackPressured | OfferError::NotConnected) => break,
                Err(other) => panic!("{other:?}"),
            }
        }
        while let Some(length) = publication.poll_transmit(now, &mut buffer) {
            forward.carry(buffer[..length].to_vec(), &mut to_receiver);
        }
        publication.on_idle(now);
        while let Some(datagram) = to_receiver.pop_front() {
            let header = FrameHeader::parse(&datagram).unwrap();
            match header.frame_type {
                FrameType::Setup => {
                    setups_seen += 1;
                    if image.is_none() {
                        image = Some(image_from(&Setup::parse(&datagram).unwrap(), now));
                    }
                }
                _ => {
                    if let Some(image) = image.as_mut() {
                        let _ = image.on_data(&datagram, now);
                    }
                }
            }
        }
        if let Some(image) = image.as_mut() {
            image.poll_fragments(1, 64, |fragment| {
                partial.extend_from_slice(fragment.payload);
                if fragment.header.flags & 0x40 != 0 {
                    delivered.push(std::mem::take(&mut partial));
                }
            });
            image.on_tick(now);
            let silenced = drop_status_after.is_some_and(|after| now.as_nanos() >= after.as_nanos() as u64);
            while let Some(length) = image.poll_transmit(now, &mut buffer) {
                if !silenced {
                    backward.carry(buffer[..length].to_vec(), &mut to_sender);
                }
            }
        }
        if let Some((after, terms_ahead)) = forged {
            if delivered.len() >= after {
                to_receiver.push_back(forged_heartbeat(&publication, terms_ahead));
                forged = None;
            }
        }
        while let Some(datagram) = to_sender.pop_front() {
            match parse_control(&datagram).unwrap() {
                Some(ControlFrame::StatusMessage(message)) => {
                    let identity = publication.identity();
                    let position = identity.position(message.consumption_term_id, message.consumption_term_offset);
                    last_edge = last_edge.max(position + i64::from(message.receiver_window));
                    publication.on_status_message(&message, now)
                }
                Some(ControlFrame::Nak(nak)) => publication.on_nak(&nak, now),
                _ => {}
            }
        }
        if delivered.len() == count || (drop_status_after.is_some() && now.as_nanos() > 7_000_000_000) {
            break;
        }
    }
    for (index, got) in delivered.iter().enumerate() {
        assert_eq!(got, &message(index), "message {index}");
    }
    Run {
        delivered,
        setups_seen,
        elapsed: Duration::from_nanos(now.as_nanos()),
        image: image.map(|image| image.counters()).unwrap_or_default(),
        last_edge,
        sender_position: publication.sender_position(),
    }
}

fn clean() -> Network {
    Network { seed: 1, loss: 0.0, duplicate: 0.0, reorder: 0.0 }
}

#[test]
fn delivers_everything_in_order_on_a_perfect_network() {
    let run = simulate(2_000, &mut clean(), &mut clean(), Scenario::default());
    assert_eq!(run.delivered.len(), 2_000);
}

#[test]
fn repairs_loss_duplication_and_reordering_in_both_directions() {
    let mut forward = Network { seed: 0x1234_5678, loss: 0.05, duplicate: 0.02, reorder: 0.05 };
    let mut backward = Network { seed: 0x8765_4321, loss: 0.05, duplicate: 0.02, reorder: 0.05 };
    let run = simulate(5_000, &mut forward, &mut backward, Scenario::default());
    assert_eq!(run.delivered.len(), 5_000);
}

#[test]
fn survives_heavy_loss() {
    let mut forward = Network { seed: 99, loss: 0.2, duplicate: 0.0, reorder: 0.0 };
    let mut backward = Network { seed: 98, loss: 0.2, duplicate: 0.0, reorder: 0.0 };
    let run = simulate(1_000, &mut forward, &mut backward, Scenario::default());
    assert_eq!(run.delivered.len(), 1_000);
}

#[test]
fn a_lost_setup_is_sent_again_until_a_status_message_arrives() {
    // The first datagrams (the first SETUPs) are lost; the publication keeps announcing itself.
    let mut forward = Network { seed: 5, loss: 0.6, duplicate: 0.0, reorder: 0.0 };
    let run = simulate(100, &mut forward, &mut clean(), Scenario::default());
    assert_eq!(run.delivered.len(), 100);
    assert!(run.setups_seen >= 1);
}

#[test]
fn lost_status_messages_only_delay_delivery() {
    let mut backward = Network { seed: 77, loss: 0.5, duplicate: 0.0, reorder: 0.0 };
    let run = simulate(2_000, &mut clean(), &mut backward, Scenario::default());
    assert_eq!(run.delivered.len(), 2_000);
}

#[test]
fn a_receiver_that_stops_sending_status_messages_stalls_the_publisher_within_its_window() {
    // Status messages stop after 20 ms: the publisher may only send one receiver window beyond
    // the last reported position, so delivery stops short and nothing is corrupted.
    let scenario = Scenario { drop_status_after: Some(Duration::from_millis(20)), ..Scenario::default() };
    let run = simulate(20_000, &mut clean(), &mut clean(), scenario);
    assert!(run.delivered.len() < 20_000, "delivered {}", run.delivered.len());
    assert!(run.elapsed >= Duration::from_secs(7));
    // Within the window: never past the last edge reported, and stalled right at it (less than
    // one datagram short).
    assert!(run.last_edge > 0);
    assert!(run.sender_position <= run.last_edge, "sent to {} past the edge {}", run.sender_position, run.last_edge);
    assert!(
        run.last_edge - run.sender_position < 1408,
        "stalled at {} short of {}",
        run.sender_position,
        run.last_edge
    );
}

#[test]
fn a_forged_heartbeat_far_ahead_does_not_disable_loss_repair() {
    // The reported attack: 2% loss, one 32-byte heartbeat for the live session with
    // term id = current + 100. Every message must still arrive, repaired by NAKs.
    let mut forward = Network { seed: 0x2545_f491, loss: 0.02, duplicate: 0.0, reorder: 0.0 };
    let scenario = Scenario { forged_heartbeat: Some((1_000, 100)), ..Scenario::default() };
    let run = simulate(20_000, &mut forward, &mut clean(), scenario);
    assert_eq!(run.delivered.len(), 20_000);
    assert!(run.image.naks_sent > 0, "{:?}", run.image);
    assert_eq!(run.image.unrecoverable_gaps, 0, "{:?}", run.image);
    assert_eq!(run.image.overruns, 1, "the forged heartbeat is an overrun: {:?}", run.image);
}

#[test]
fn publication_is_not_connected_after_the_receiver_goes_silent() {
    let mut now = Instant::ZERO;
    let mut publication = publication(now);
    let mut buffer = vec![0u8; 2048];
    let length = publication.poll_transmit(now, &mut buffer).unwrap();
    let setup = Setup::parse(&buffer[..length]).unwrap();
    let mut image = image_from(&setup, now);
    let length = image.poll_transmit(now, &mut buffer).unwrap();
    let Some(ControlFrame::StatusMessage(message)) = parse_control(&buffer[..length]).unwrap() else { panic!() };
    publication.on_status_message(&message, now);
    publication.on_idle(now);
    assert!(publication.is_connected());
    now = now + Duration::from_secs(6);
    publication.on_idle(now);
    assert!(!publication.is_connected());
    assert_eq!(publication.offer(b"x", 0), Err(OfferError::NotConnected));
}
