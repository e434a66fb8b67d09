//! End-to-end over loopback UDP and IPC: publication and subscription in one process, on the
//! shared-memory media driver run in process (`embedded::start`).

use std::time::{Duration, Instant};

use affinity::client::attached::{AttachedClient, AttachedPublication, AttachedSubscription};
use affinity::client::MessageBatch;
use affinity::driver::{DriverContext, Threading};
use affinity::embedded::{self, EmbeddedConfig};
use affinity::media::relay::{Impairment, LossyRelay};
use affinity::protocol::OfferError;
use affinity::wire::Setup;

use affinity::media::ports::free_udp_port;

fn message(index: u64) -> Vec<u8> {
    let size = match index % 100 {
        0 => 3000 + (index % 5000) as usize,
        n => (n as usize * 13) % 1024,
    };
    let mut bytes = vec![(index % 251) as u8; size.max(8)];
    bytes[..8].copy_from_slice(&index.to_le_bytes());
    bytes
}

fn client() -> AttachedClient {
    embedded::start(EmbeddedConfig::default()).unwrap()
}

fn transfer(client: &AttachedClient, pub_channel: &str, sub_channel: &str, count: u64) {
    let mut subscription = client.add_subscription(sub_channel, 10).unwrap();
    let publication = client.add_publication(pub_channel, 10).unwrap();
    wait_connected(client, &publication);
    send_and_check(&publication, &mut subscription, count);
}

fn wait_connected(client: &AttachedClient, publication: &AttachedPublication) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !publication.is_connected().unwrap() {
        client.do_work().unwrap();
        assert!(Instant::now() < deadline, "never connected");
    }
}

/// Offers `count` messages and checks the subscription receives each, in order.
fn send_and_check(publication: &AttachedPublication, subscription: &mut AttachedSubscription, count: u64) {
    send_and_check_with(|message| publication.try_offer(message).unwrap(), subscription, count);
}

/// [`send_and_check`] through `try_offer` (a shared or an exclusive publication's).
fn send_and_check_with(
    mut try_offer: impl FnMut(&[u8]) -> Result<i64, OfferError>,
    subscription: &mut AttachedSubscription,
    count: u64,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sent = 0u64;
    let mut received = 0u64;
    let mut batch = MessageBatch::default();
    while received < count {
        assert!(Instant::now() < deadline, "stalled at sent={sent} received={received}");
        while sent < count {
            match try_offer(&message(sent)) {
                Ok(_) => sent += 1,
                Err(OfferError::BackPressured | OfferError::AdminAction) => break,
                Err(error) => panic!("offer failed: {error:?}"),
            }
        }
        batch.clear();
        subscription.poll_into(&mut batch, 256).unwrap();
        for index in 0..batch.len() {
            assert_eq!(batch.message(index), &message(received)[..], "message {received}");
            received += 1;
        }
    }
}

/// `unicast_rollover.json`'s start (Aeron's keys): 2048 bytes before the end of term 102 of a
/// stream whose initial term is 100, so the first messages roll into term 103.
const ROLLOVER_START: &str = "term-length=64k|init-term-id=100|term-id=102|term-offset=63488";
/// `(102 - 100) * 65536 + 63488`.
const ROLLOVER_POSITION: i64 = 2 * 65536 + 63488;

/// A publication started at [`ROLLOVER_START`] begins its log, counters and (UDP) SETUP there;
/// the subscriber's image joins there and gets every message in order across the rotations.
fn starts_at_the_given_position(client: &AttachedClient, pub_channel: &str, sub_channel: &str) {
    let mut subscription = client.add_subscription(sub_channel, 12).unwrap();
    let publication = client.add_publication(pub_channel, 12).unwrap();
    assert_eq!(publication.initial_term_id(), 100);
    assert_eq!(publication.position().unwrap(), ROLLOVER_POSITION, "the log's tail starts at the position");
    wait_connected(client, &publication);
    let images = subscription.images().unwrap();
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0].position, ROLLOVER_POSITION, "the image joins at the start position");
    send_and_check(&publication, &mut subscription, 2_000);
    let end = publication.position().unwrap();
    assert!(end > ROLLOVER_POSITION + 3 * 65536, "rolled through every partition: {end}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while subscription.images().unwrap()[0].position != end {
        client.do_work().unwrap();
        assert!(Instant::now() < deadline, "the subscriber never reached {end}");
    }
}

#[test]
fn a_udp_publication_starts_at_init_term_id_term_id_and_term_offset() {
    let client = client();
    let endpoint = format!("127.0.0.1:{}", free_udp_port().unwrap());
    let pub_channel = format!("aeron:udp?endpoint={endpoint}|{ROLLOVER_START}");
    starts_at_the_given_position(&client, &pub_channel, &format!("aeron:udp?endpoint={endpoint}"));
}

#[test]
fn an_ipc_publication_starts_at_init_term_id_term_id_and_term_offset() {
    let client = client();
    starts_at_the_given_position(&client, &format!("aeron:ipc?{ROLLOVER_START}"), "aeron:ipc");
}

#[test]
fn the_setup_a_started_publication_sends_names_its_start() {
    let client = client();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let channel = format!("aeron:udp?endpoint={}|{ROLLOVER_START}", socket.local_addr().unwrap());
    let publication = client.add_publication(&channel, 13).unwrap();
    let mut datagram = [0u8; 2048];
    let length = socket.recv(&mut datagram).expect("a SETUP");
    let setup = Setup::parse(&datagram[..length]).expect("the first datagram is a SETUP");
    assert_eq!(
        (setup.initial_term_id, setup.active_term_id, setup.term_offset, setup.term_length),
        (100, 102, 63488, 65536)
    );
    assert_eq!((setup.session_id, setup.stream_id), (publication.session_id(), 13));
    // Until a receiver answers, the publisher is held at the start.
    let status = publication.status().unwrap();
    assert_eq!(
        (status.position, status.sender_position, status.publisher_limit),
        (ROLLOVER_POSITION, ROLLOVER_POSITION, ROLLOVER_POSITION)
    );
}

#[test]
fn publications_of_one_channel_share_the_log_and_its_start() {
    let client = client();
    let endpoint = format!("127.0.0.1:{}", free_udp_port().unwrap());
    let channel = format!("aeron:udp?endpoint={endpoint}|{ROLLOVER_START}");
    let mut subscription = client.add_subscription(&format!("aeron:udp?endpoint={endpoint}"), 14).unwrap();
    let first = client.add_publication(&channel, 14).unwrap();
    wait_connected(&client, &first);
    send_and_check(&first, &mut subscription, 10);
    let second = client.add_publication(&channel, 14).unwrap();
    assert_eq!(second.registration_id(), first.registration_id(), "one network publication");
    assert_eq!(second.position().unwrap(), first.position().unwrap(), "the live log, not a new start");
    assert_eq!(subscription.image_count().unwrap(), 1);
}

/// The error text of a refused command.
fn refusal<T>(outcome: Result<T, affinity::error::Error>) -> String {
    match outcome {
        Ok(_) => panic!("accepted"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn an_ipc_publication_naming_another_start_than_the_open_log_is_refused() {
    let client = client();
    let _first = client.add_publication(&format!("aeron:ipc?{ROLLOVER_START}"), 15).unwrap();
    // The same start is the same log.
    client.add_publication(&format!("aeron:ipc?{ROLLOVER_START}"), 15).unwrap();
    client.add_publication("aeron:ipc", 15).unwrap();
    let other = "aeron:ipc?term-length=64k|init-term-id=100|term-id=103|term-offset=0";
    let error = refusal(client.add_publication(other, 15));
    assert!(error.contains("init-term-id=100|term-id=103|term-offset=0 (start position 196608)"), "{error}");
    assert!(error.contains(&format!("init-term-id=100, position {ROLLOVER_POSITION}")), "{error}");
}

#[test]
fn udp_publications_of_one_route_share_one_session_and_a_setting_it_cannot_honour_is_refused() {
    let client = client();
    let endpoint = format!("127.0.0.1:{}", free_udp_port().unwrap());
    let channel = format!("aeron:udp?endpoint={endpoint}|{ROLLOVER_START}");
    let mut subscription = client.add_subscription(&format!("aeron:udp?endpoint={endpoint}"), 17).unwrap();
    let first = client.add_publication(&channel, 17).unwrap();
    wait_connected(&client, &first);
    // Other channel strings to the same destination: the same publication, one image.
    for same in [
        format!("aeron:udp?endpoint={endpoint}"),
        format!("aeron:udp?endpoint={endpoint}|term-length=64k|mtu=1408|linger=1s"),
        format!("aeron:udp?endpoint={endpoint}|session-id={}", first.session_id()),
        format!("aeron:udp?endpoint={endpoint}|{ROLLOVER_START}|linger=2s"),
    ] {
        let shared = client.add_publication(&same, 17).unwrap();
        assert_eq!(shared.registration_id(), first.registration_id(), "{same}");
        assert_eq!(shared.session_id(), first.session_id(), "{same}");
    }
    // Settings the open log cannot honour: refused, naming both values.
    for (other, named) in [
        (format!("aeron:udp?endpoint={endpoint}|term-length=128k"), "term-length=131072 differs from the 65536"),
        (format!("aeron:udp?endpoint={endpoint}|mtu=8192"), "mtu=8192 differs from the 1408"),
        (
            format!("aeron:udp?endpoint={endpoint}|session-id=7"),
            &*format!("session-id=7 differs from the {}", first.session_id()),
        ),
        (
            format!("aeron:udp?endpoint={endpoint}|term-length=64k|init-term-id=100|term-id=103|term-offset=0"),
            "(start position 196608) differs from the aeron:udp publication already open",
        ),
    ] {
        let error = refusal(client.add_publication(&other, 17));
        assert!(error.contains(named), "{other}: {error}");
        assert!(error.contains(&format!("already open to {endpoint} on stream 17")), "{other}: {error}");
    }
    // Another stream, or another destination, is another publication.
    assert_ne!(client.add_publication(&channel, 18).unwrap().registration_id(), first.registration_id());
    send_and_check(&first, &mut subscription, 10);
    assert_eq!(subscription.image_count().unwrap(), 1);
}

#[test]
fn an_exclusive_udp_publication_is_a_session_of_its_own_and_delivers_in_order_across_rotations() {
    let client = client();
    let endpoint = format!("127.0.0.1:{}", free_udp_port().unwrap());
    let channel = format!("aeron:udp?endpoint={endpoint}|{ROLLOVER_START}");
    let mut subscription = client.add_subscription(&format!("aeron:udp?endpoint={endpoint}"), 19).unwrap();
    let shared = client.add_publication(&format!("aeron:udp?endpoint={endpoint}"), 19).unwrap();
    let mut exclusive = client.add_exclusive_publication(&channel, 19).unwrap();
    assert_ne!(exclusive.session_id(), shared.session_id());
    assert_ne!(exclusive.registration_id(), shared.registration_id());
    assert_eq!(exclusive.position(), ROLLOVER_POSITION, "starts where its channel says");
    let joined = client.add_publication(&format!("aeron:udp?endpoint={endpoint}"), 19).unwrap();
    assert_eq!(joined.registration_id(), shared.registration_id(), "a shared publication never joins it");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !exclusive.is_connected().unwrap() {
        client.do_work().unwrap();
        assert!(Instant::now() < deadline, "never connected");
    }
    send_and_check_with(|message| exclusive.try_offer(message).unwrap(), &mut subscription, 2_000);
    assert!(exclusive.position() > 3 * 65536, "rolled into the next terms: {}", exclusive.position());
    assert_eq!(subscription.image_count().unwrap(), 2, "one image per session");
}

#[test]
fn start_positions_that_do_not_fit_are_refused_naming_the_key_and_value() {
    // The driver's UDP terms are 64 KiB: an offset the URI's default (16 MiB) would allow is
    // checked against the log the driver really makes.
    let mut config = EmbeddedConfig::default();
    config.driver.term_length = 65536;
    let client = embedded::start(config).unwrap();
    let endpoint = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
    for (start, key_and_value) in [
        ("init-term-id=100|term-id=99|term-offset=0", "term-id=99: more than 2^31 - 1 terms after init-term-id=100"),
        ("init-term-id=100|term-id=100|term-offset=33", "term-offset=33: must be a non-negative multiple of 32"),
        (
            "init-term-id=100|term-id=100|term-offset=131072",
            "term-offset=131072: must not exceed the term length 65536",
        ),
        ("init-term-id=100|term-id=100|term-offset=65568", "term-offset=65568: must not exceed the term length 65536"),
        ("init-term-id=100|term-id=100", "term-offset: missing: init-term-id, term-id and term-offset"),
    ] {
        for channel in [format!("{endpoint}|{start}"), format!("aeron:ipc?term-length=64k|{start}")] {
            let error = refusal(client.add_publication(&channel, 16));
            assert!(error.contains(key_and_value), "{channel}: {error}");
        }
    }
    // A subscription has no start to take.
    let error = refusal(client.add_subscription(&format!("{endpoint}|{ROLLOVER_START}"), 16));
    assert!(error.contains("apply to publications only"), "{error}");
}

#[test]
fn delivers_in_order_over_loopback() {
    let client = client();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
    transfer(&client, &channel, &channel, 20_000);
}

#[test]
fn delivers_in_order_in_invoker_mode() {
    let client = embedded::start(EmbeddedConfig {
        driver: DriverContext { threading: Threading::Invoker, ..DriverContext::default() },
        ..EmbeddedConfig::default()
    })
    .unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
    transfer(&client, &channel, &channel, 20_000);
}

#[test]
fn repairs_loss_duplication_and_reordering_through_a_relay() {
    let client = client();
    let target: std::net::SocketAddr = format!("127.0.0.1:{}", free_udp_port().unwrap()).parse().unwrap();
    let impairment = Impairment { loss: 0.05, duplicate: 0.01, reorder: 0.02 };
    let relay = LossyRelay::start("127.0.0.1:0".parse().unwrap(), target, impairment, 7).unwrap();
    let pub_channel = format!("aeron:udp?endpoint={}", relay.front_address());
    let sub_channel = format!("aeron:udp?endpoint={target}");
    transfer(&client, &pub_channel, &sub_channel, 20_000);
    assert!(relay.stats().dropped.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

#[test]
fn delivers_in_order_over_ipc_without_sockets() {
    let client = client();
    transfer(&client, "aeron:ipc?term-length=65536", "aeron:ipc", 20_000);
}

#[test]
fn ipc_subscribers_all_receive_everything_including_a_late_one() {
    let client = client();
    let mut early = client.add_subscription("aeron:ipc", 4).unwrap();
    let publication = client.add_publication("aeron:ipc?term-length=65536", 4).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !publication.is_connected().unwrap() {
        assert!(Instant::now() < deadline, "never connected");
    }
    let mut late = client.add_subscription("aeron:ipc", 4).unwrap();
    while late.image_count().unwrap() == 0 {
        assert!(Instant::now() < deadline, "late subscriber never joined");
    }
    let mut sent = 0u64;
    let (mut early_got, mut late_got) = (Vec::new(), Vec::new());
    let mut batch = MessageBatch::default();
    while early_got.len() < 5_000 || late_got.len() < 5_000 {
        assert!(Instant::now() < deadline, "stalled: early {} late {}", early_got.len(), late_got.len());
        while sent < 5_000 && matches!(publication.try_offer(&message(sent)), Ok(Ok(_))) {
            sent += 1;
        }
        for (subscription, got) in [(&mut early, &mut early_got), (&mut late, &mut late_got)] {
            batch.clear();
            subscription.poll_into(&mut batch, 64).unwrap();
            got.extend((0..batch.len()).map(|i| batch.message(i).to_vec()));
        }
    }
    let expected: Vec<Vec<u8>> = (0..5_000).map(message).collect();
    assert_eq!(early_got, expected);
    assert_eq!(late_got, expected, "the late subscriber joined before the first offer");
}

#[test]
fn a_publication_started_far_into_its_stream_leaves_the_terms_before_untouched() {
    // Term 1000 of 16 MiB terms: the log's cleaner (the sender; for IPC the conductor) cleans a
    // term behind the slowest position from the start, never from 0 (which would zero, and so
    // allocate, every partition of the shared file).
    let client = client();
    let start = "term-length=16m|init-term-id=0|term-id=1000|term-offset=0";
    let udp = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
    for (pub_channel, sub_channel) in
        [(format!("{udp}|{start}"), udp), (format!("aeron:ipc?{start}"), "aeron:ipc".into())]
    {
        let _subscription = client.add_subscription(&sub_channel, 17).unwrap();
        let publication = client.add_publication(&pub_channel, 17).unwrap();
        assert_eq!(publication.position().unwrap(), 1000 << 24);
        wait_connected(&client, &publication);
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            client.do_work().unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        // The publication's log and (UDP) the image's.
        use std::os::unix::fs::MetadataExt;
        // The embedded driver's logs are memfds of this process (beside those of the tests
        // running meanwhile: only this stream's).
        let logs: Vec<_> = affinity::shm::log_buffer::driver_logs(std::process::id())
            .unwrap()
            .into_iter()
            .filter(|log| {
                affinity::shm::log_buffer::LogBuffer::open(&log.path)
                    .is_ok_and(|l| l.identity().stream_id == 17 && l.term_length() == 16 << 20)
            })
            .collect();
        assert!(!logs.is_empty());
        for log in logs {
            let allocated = std::fs::metadata(&log.path).unwrap().blocks() * 512;
            assert!(allocated < 1 << 20, "{pub_channel}: {}: {} KiB allocated", log.name, allocated / 1024);
        }
    }
}
