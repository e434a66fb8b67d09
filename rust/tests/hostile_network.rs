//! Forged datagrams at a live subscriber over loopback UDP, through the real driver: the
//! attacks of issue 12 (a heartbeat far ahead, end of stream ahead of and behind the stream, a
//! SETUP flood). The driver must stay up, lose nothing it can recover, and count what it drops.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use affinity::client::{Client, MessageBatch, Publication, Subscription};
use affinity::driver::DriverContext;
use affinity::media::relay::{Impairment, LossyRelay};
use affinity::protocol::{ImageCounters, OfferError};
use affinity::wire::{flags, DataHeader, FrameType, Setup, DATA_HEADER_LENGTH};

const STREAM: i32 = 10;

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Resident set size of this process, from `/proc/self/statm`.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("resident pages");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).expect("page size")
}

fn message(index: u64) -> [u8; 32] {
    let mut bytes = [(index % 251) as u8; 32];
    bytes[..8].copy_from_slice(&index.to_le_bytes());
    bytes
}

/// A 32-byte heartbeat for `publication`'s session, `delta` bytes from its sender position.
fn heartbeat(publication: &Publication, delta: i64, eos: bool) -> Vec<u8> {
    let state = publication.shared().state();
    let identity = *state.identity();
    let position = (state.sender_position() + delta).max(0) & !31;
    let mut bytes = vec![0u8; DATA_HEADER_LENGTH];
    DataHeader {
        frame_length: 0,
        flags: if eos { flags::UNFRAGMENTED | flags::EOS } else { flags::UNFRAGMENTED },
        frame_type: FrameType::Data,
        term_offset: identity.term_offset(position),
        session_id: identity.session_id,
        stream_id: identity.stream_id,
        term_id: identity.term_id(position),
        reserved_value: 0,
    }
    .emit(&mut bytes);
    bytes
}

/// Sends `count` numbered messages and receives them all in order; once `attack_at` messages
/// were received, `attack` runs (once). Returns the subscription's image counters.
fn transfer(
    publication: &Publication,
    subscription: &Subscription,
    count: u64,
    attack_at: u64,
    mut attack: impl FnMut(&Publication),
) -> ImageCounters {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !publication.is_connected() {
        assert!(Instant::now() < deadline, "never connected");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (mut sent, mut received, mut attacked) = (0u64, 0u64, false);
    let mut batch = MessageBatch::default();
    while received < count {
        assert!(Instant::now() < deadline, "stalled at sent={sent} received={received}: {:?}", subscription.images());
        while sent < count {
            match publication.offer(&message(sent)) {
                Ok(_) => sent += 1,
                Err(OfferError::BackPressured | OfferError::AdminAction) => break,
                Err(error) => panic!("offer failed: {error:?}"),
            }
        }
        if !attacked && received >= attack_at {
            attack(publication);
            attacked = true;
        }
        batch.clear();
        subscription.poll_into(&mut batch, 256).unwrap();
        for index in 0..batch.len() {
            assert_eq!(batch.message(index), &message(received)[..], "message {received}");
            received += 1;
        }
    }
    let images = subscription.images();
    assert_eq!(images.len(), 1, "{images:?}");
    images[0].counters
}

#[test]
fn a_forged_heartbeat_far_ahead_through_a_lossy_relay_disables_no_repair() {
    let client = Client::new(DriverContext::default()).unwrap();
    let target: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let impairment = Impairment { loss: 0.02, duplicate: 0.0, reorder: 0.0 };
    let relay = LossyRelay::start("127.0.0.1:0".parse().unwrap(), target, impairment, 12).unwrap();
    let subscription = client.add_subscription(&format!("aeron:udp?endpoint={target}"), STREAM).unwrap();
    let publication = client.add_publication(&format!("aeron:udp?endpoint={}", relay.front_address()), STREAM).unwrap();
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let counters = transfer(&publication, &subscription, 20_000, 2_000, |publication| {
        // One 32-byte heartbeat for the live session, term id = current + 100.
        let term_length = i64::from(publication.shared().state().identity().term_length);
        attacker.send_to(&heartbeat(publication, 100 * term_length, false), target).unwrap();
    });
    assert!(relay.stats().dropped.load(Ordering::Relaxed) > 0);
    assert!(counters.naks_sent > 0, "{counters:?}");
    assert!(counters.overruns >= 1, "{counters:?}");
    assert_eq!(counters.unrecoverable_gaps, 0, "{counters:?}");
}

#[test]
fn forged_end_of_stream_ahead_of_or_behind_the_stream_ends_nothing() {
    let client = Client::new(DriverContext::default()).unwrap();
    let port = free_port();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let subscription = client.add_subscription(&channel, STREAM).unwrap();
    let publication = client.add_publication(&channel, STREAM).unwrap();
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let counters = transfer(&publication, &subscription, 50_000, 10_000, |publication| {
        for delta in [32_000, -4_096, -64] {
            attacker.send_to(&heartbeat(publication, delta, true), target).unwrap();
        }
    });
    assert!(counters.eos_rejected >= 1, "{counters:?}");
    assert_eq!(client.driver().receiver_counters().images_ended_incomplete.load(Ordering::Relaxed), 0);
}

#[test]
fn a_setup_flood_is_bounded_and_counted_and_the_subscription_still_works() {
    let client = Client::new(DriverContext::default()).unwrap();
    let port = free_port();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let subscription = client.add_subscription(&channel, STREAM).unwrap();
    let limit = client.context().max_images_per_subscription;
    let counters = client.driver().receiver_counters();
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut bytes = [0u8; Setup::LENGTH];
    let flood = 5_000usize;
    let rss_before = rss();
    let deadline = Instant::now() + Duration::from_secs(30);
    for session in 0..flood {
        Setup {
            flags: 0,
            term_offset: 0,
            session_id: 1_000_000 + session as i32,
            stream_id: STREAM,
            initial_term_id: 7,
            active_term_id: 7,
            term_length: 64 * 1024,
            mtu: 1408,
            ttl: 0,
        }
        .emit(&mut bytes);
        attacker.send_to(&bytes, target).unwrap();
        if session % 200 == 199 {
            // Paced so the socket buffer drops none: every SETUP is either an image or a refusal.
            let handled = session + 1;
            while subscription.images().len() + (counters.images_refused.load(Ordering::Relaxed) as usize) < handled {
                assert!(Instant::now() < deadline, "the receiver fell behind the flood");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    assert_eq!(subscription.images().len(), limit);
    assert_eq!(counters.images_refused.load(Ordering::Relaxed) as usize, flood - limit);
    let grown = rss().saturating_sub(rss_before);
    eprintln!("{flood} SETUPs: {limit} images, RSS +{} KiB", grown / 1024);
    assert!(grown < 64 << 20, "the flood grew RSS by {} MiB", grown >> 20);
    // The driver is alive and other subscriptions are unaffected (the flooded one is full
    // until the forged images time out).
    let other = client.add_subscription(&channel, STREAM + 1).unwrap();
    let publication = client.add_publication(&channel, STREAM + 1).unwrap();
    transfer_plain(&publication, &other, 1_000);
}

fn transfer_plain(publication: &Publication, subscription: &Subscription, count: u64) {
    transfer(publication, subscription, count, u64::MAX, |_| {});
}
