//! Forged datagrams at a live subscriber over loopback UDP, through the real driver: the
//! attacks of issue 12 (a heartbeat far ahead, end of stream ahead of and behind the stream, a
//! SETUP flood). The driver must stay up, lose nothing it can recover, and count what it drops.
//! The client runs the shared-memory media driver in process (`embedded::start`).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use affinity::client::attached::{
    AttachedClient, AttachedPublication as Publication, AttachedSubscription as Subscription,
};
use affinity::client::MessageBatch;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::media::relay::{Impairment, LossyRelay};
use affinity::protocol::OfferError;
use affinity::shm::status::{ImageInfo, SystemCounter};
use affinity::wire::{flags, DataHeader, FrameType, Setup, StatusMessage, DATA_HEADER_LENGTH};

use affinity::media::ports::free_udp_port;

const STREAM: i32 = 10;

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
    let sender_position = publication.status().expect("publication status").sender_position;
    let position = (sender_position + delta).max(0) & !31;
    let term_length = publication.term_length();
    let mut bytes = vec![0u8; DATA_HEADER_LENGTH];
    DataHeader {
        frame_length: 0,
        flags: if eos { flags::UNFRAGMENTED | flags::EOS } else { flags::UNFRAGMENTED },
        frame_type: FrameType::Data,
        term_offset: (position & (i64::from(term_length) - 1)) as i32,
        session_id: publication.session_id(),
        stream_id: publication.stream_id(),
        term_id: publication.initial_term_id().wrapping_add((position >> term_length.trailing_zeros()) as i32),
        reserved_value: 0,
    }
    .emit(&mut bytes);
    bytes
}

/// Sends `count` numbered messages and receives them all in order; each time another
/// `attack_every` messages were received, `attack` runs, at most `attacks` times. Returns the
/// subscription's image record.
fn transfer(
    publication: &Publication,
    subscription: &mut Subscription,
    count: u64,
    (attack_every, attacks): (u64, u64),
    mut attack: impl FnMut(&Publication),
) -> ImageInfo {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !publication.is_connected().unwrap() {
        assert!(Instant::now() < deadline, "never connected");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (mut sent, mut received, mut attacked) = (0u64, 0u64, 0u64);
    let mut batch = MessageBatch::default();
    while received < count {
        assert!(Instant::now() < deadline, "stalled at sent={sent} received={received}: {:?}", subscription.images());
        while sent < count {
            match publication.try_offer(&message(sent)).unwrap() {
                Ok(_) => sent += 1,
                // Not connected: a forged EOS made the subscriber say goodbye for a moment.
                Err(OfferError::BackPressured | OfferError::AdminAction | OfferError::NotConnected) => break,
                Err(error) => panic!("offer failed: {error:?}"),
            }
        }
        if attacked < attacks && received >= attack_every.saturating_mul(attacked + 1) {
            attack(publication);
            attacked += 1;
        }
        batch.clear();
        subscription.poll_into(&mut batch, 256).unwrap();
        for index in 0..batch.len() {
            assert_eq!(batch.message(index), &message(received)[..], "message {received}");
            received += 1;
        }
    }
    let mut images = subscription.images().unwrap();
    assert_eq!(images.len(), 1, "{images:?}");
    images.remove(0)
}

fn client() -> AttachedClient {
    embedded::start(EmbeddedConfig::default()).unwrap()
}

fn system(client: &AttachedClient, counter: SystemCounter) -> i64 {
    counter.read(client.counters()).expect("system counter")
}

#[test]
fn a_forged_heartbeat_far_ahead_through_a_lossy_relay_disables_no_repair() {
    let client = client();
    let target: SocketAddr = format!("127.0.0.1:{}", free_udp_port().unwrap()).parse().unwrap();
    let impairment = Impairment { loss: 0.02, duplicate: 0.0, reorder: 0.0 };
    let relay = LossyRelay::start("127.0.0.1:0".parse().unwrap(), target, impairment, 12).unwrap();
    let mut subscription = client.add_subscription(&format!("aeron:udp?endpoint={target}"), STREAM).unwrap();
    let publication = client.add_publication(&format!("aeron:udp?endpoint={}", relay.front_address()), STREAM).unwrap();
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let counters = transfer(&publication, &mut subscription, 20_000, (2_000, 1), |publication| {
        // One 32-byte heartbeat for the live session, term id = current + 100.
        let term_length = i64::from(publication.term_length());
        attacker.send_to(&heartbeat(publication, 100 * term_length, false), target).unwrap();
    });
    eprintln!("forged heartbeat through 2% loss: 20000/20000 received, {counters:?}");
    assert!(relay.stats().dropped.load(Ordering::Relaxed) > 0);
    assert!(counters.naks_sent > 0, "{counters:?}");
    assert!(counters.overruns >= 1, "{counters:?}");
    assert_eq!(counters.unrecoverable_gaps, 0, "{counters:?}");
}

#[test]
fn forged_end_of_stream_at_ahead_of_or_behind_the_live_position_loses_nothing() {
    let client = client();
    let port = free_udp_port().unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut subscription = client.add_subscription(&channel, STREAM).unwrap();
    let publication = client.add_publication(&channel, STREAM).unwrap();
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    // Ten rounds: EOS at the live position (accepted when the subscriber has caught up, then
    // revoked by the data that follows), 32,000 bytes ahead, and behind.
    transfer(&publication, &mut subscription, 50_000, (4_000, 10), |publication| {
        for delta in [0, 32_000, -4_096, -64] {
            attacker.send_to(&heartbeat(publication, delta, true), target).unwrap();
        }
    });
    // Every message arrived in order (checked by `transfer`), and no image ended with data
    // missing. (An EOS at the live position may still end an image whose publication then
    // stalls, not connected, until a new image replaces it: nothing is lost.)
    assert_eq!(system(&client, SystemCounter::ImagesEndedIncomplete), 0);
}

#[test]
fn a_setup_flood_is_bounded_and_counted_and_the_subscription_still_works() {
    let client = client();
    let port = free_udp_port().unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let target: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let subscription = client.add_subscription(&channel, STREAM).unwrap();
    let limit = EmbeddedConfig::default().driver.max_images_per_subscription;
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
            let refused = || usize::try_from(system(&client, SystemCounter::ImagesRefused)).unwrap();
            while subscription.images().unwrap().len() + refused() < handled {
                assert!(Instant::now() < deadline, "the receiver fell behind the flood");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    assert_eq!(subscription.images().unwrap().len(), limit);
    assert_eq!(system(&client, SystemCounter::ImagesRefused) as usize, flood - limit);
    let grown = rss().saturating_sub(rss_before);
    eprintln!("{flood} SETUPs: {limit} images, RSS +{} KiB", grown / 1024);
    assert!(grown < 64 << 20, "the flood grew RSS by {} MiB", grown >> 20);
    // The driver is alive and other subscriptions are unaffected (the flooded one is full
    // until the forged images time out).
    let mut other = client.add_subscription(&channel, STREAM + 1).unwrap();
    let publication = client.add_publication(&channel, STREAM + 1).unwrap();
    transfer_plain(&publication, &mut other, 1_000);
}

fn transfer_plain(publication: &Publication, subscription: &mut Subscription, count: u64) {
    transfer(publication, subscription, count, (u64::MAX, 0), |_| {});
}

/// The receiver window the driver advertises to a sender whose SETUP arrives at `channel`
/// (read from its first status message).
fn advertised_window(client: &AttachedClient, channel: &str, port: u16) -> i32 {
    let _subscription = client.add_subscription(channel, STREAM).unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut setup = [0u8; Setup::LENGTH];
    Setup {
        flags: 0,
        term_offset: 0,
        session_id: 77,
        stream_id: STREAM,
        initial_term_id: 7,
        active_term_id: 7,
        term_length: 16 << 20,
        mtu: 1408,
        ttl: 0,
    }
    .emit(&mut setup);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buffer = [0u8; 2048];
    loop {
        assert!(Instant::now() < deadline, "no status message for the SETUP at {channel}");
        sender.send_to(&setup, ("127.0.0.1", port)).unwrap();
        if let Ok(length) = sender.recv(&mut buffer) {
            if let Ok(status) = StatusMessage::parse(&buffer[..length]) {
                return status.receiver_window;
            }
        }
    }
}

#[test]
fn the_default_receiver_window_fits_the_receive_buffer_the_os_granted() {
    use affinity::protocol::defaults::{default_receiver_window, AERON_RECEIVER_WINDOW};
    let client = client();
    // A socket buffer of 256 KiB asked: half of it is below Aeron's window, which stands.
    let port = free_udp_port().unwrap();
    let small = advertised_window(&client, &format!("aeron:udp?endpoint=127.0.0.1:{port}|so-rcvbuf=256k"), port);
    assert_eq!(small, AERON_RECEIVER_WINDOW as i32);
    // The default buffer: half of what the OS granted, at most the default window.
    let probe = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
    probe.set_recv_buffer_size(EmbeddedConfig::default().driver.socket_receive_buffer).unwrap();
    let granted = probe.recv_buffer_size().unwrap() / 2;
    let port = free_udp_port().unwrap();
    let default = advertised_window(&client, &format!("aeron:udp?endpoint=127.0.0.1:{port}"), port);
    assert_eq!(default, default_receiver_window(granted) as i32);
    // A window set by hand is used as given.
    let port = free_udp_port().unwrap();
    let set =
        advertised_window(&client, &format!("aeron:udp?endpoint=127.0.0.1:{port}|rcv-wnd=512k|so-rcvbuf=256k"), port);
    assert_eq!(set, 512 * 1024);
}
