//! `aeron:udp` through the standalone media driver with real processes: `affinity-driver` in
//! one process, a publisher and a subscriber (`affinity-ipc --channel aeron:udp?...`) in
//! others, each attached to the driver over shared memory; the driver's sender and receiver
//! agents carry the stream over loopback UDP. Every wait is bounded by time.

use std::net::UdpSocket;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use affinity::client::attached::{AttachedClient, AttachedOffer};
use affinity::logbuffer::position::partition_index;
use affinity::shm::cnc::{Cnc, CNC_FILE};
use affinity::shm::log_buffer::{driver_logs, meta, publication_log_name, LogBuffer};
use affinity::shm::status::SystemCounter;

#[path = "support/netns.rs"]
mod netns;
#[path = "support/processes.rs"]
mod processes;

use affinity::media::ports::free_udp_port;
use netns::in_private_netns;

use processes::{output, tempdir as temp_dir, Proc, TempDir, IPC};

fn tempdir(name: &str) -> TempDir {
    temp_dir("udp", name)
}

fn start_driver(dir: &Path, extra: &[&str]) -> Proc {
    processes::start_driver(dir, extra, Stdio::inherit())
}

fn client(role: &str, dir: &Path, channel: &str, count: u64, size: usize) -> Proc {
    Proc(
        Command::new(IPC)
            .arg(role)
            .arg("--dir")
            .arg(dir)
            .args(["--channel", channel, "--count", &count.to_string(), "--size", &size.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn affinity-ipc"),
    )
}

fn system(dir: &Path, counter: SystemCounter) -> i64 {
    let cnc = Cnc::open(&dir.join(CNC_FILE), false).expect("open cnc");
    counter.read(&cnc.counters().expect("counters")).expect("system counter")
}

/// Publisher and subscriber processes over `channel` through a driver started with `extra`;
/// returns the driver's directory (its files removed by SIGTERM) and its error log's messages
/// as they were just before.
fn transfer(name: &str, extra: &[&str], channel: &str, count: u64, size: usize) -> (TempDir, Vec<String>) {
    let dir = tempdir(name);
    let mut driver = start_driver(&dir, extra);
    let mut subscriber = client("subscribe", &dir, channel, count, size);
    subscriber.wait_for_line("ready");
    let publisher = client("publish", &dir, channel, count, size);
    let published = output(publisher, Duration::from_secs(300));
    let received = output(subscriber, Duration::from_secs(300));
    assert!(published.contains(&format!("\"messages\":{count}")), "{published}");
    assert!(received.contains(&format!("\"messages\":{count}")), "{received}");
    assert!(system(&dir, SystemCounter::BytesSent) > (count * size as u64) as i64);
    let errors = error_messages(&dir);
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success());
    (dir, errors)
}

#[test]
fn a_million_udp_messages_between_processes_arrive_in_order() {
    let port = free_udp_port().unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let (dir, _) = transfer("million", &[], &channel, 1_000_000, 32);
    assert!(!dir.join(CNC_FILE).exists(), "SIGTERM removes the driver's files");
}

#[test]
fn every_threading_mode_moves_data_in_order() {
    for mode in ["dedicated", "shared-network", "shared"] {
        let port = free_udp_port().unwrap();
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
        transfer(mode, &["--threading", mode], &channel, 100_000, 200);
    }
}

#[test]
fn a_publication_closed_a_window_ahead_of_its_sender_still_delivers_every_message() {
    // Terms of 64 KiB: a publisher may run half a term (32 KiB, not a whole number of 1,056-byte
    // frames) ahead of the sender, and its last offer crosses that limit. The subscriber reads
    // nothing yet, so the receiver's window (a quarter term) holds the sender back. The
    // publication is closed right there, as by a publisher that exits: once the subscriber reads,
    // every message the publisher was told was taken arrives.
    let dir = tempdir("close-ahead");
    let mut driver = start_driver(&dir, &[]);
    let port = free_udp_port().unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}|term-length=65536");
    let client = AttachedClient::connect(&dir, Duration::from_secs(10)).expect("attach");
    let mut subscription = client.add_subscription(&channel, 10).expect("subscription");
    let publication = client.add_publication(&channel, 10).expect("publication");
    assert!(wait_until(Duration::from_secs(10), || publication.is_connected().unwrap()), "never connected");
    let (payload, mut offered) = ([7u8; 1000], 0usize);
    // Offer until back pressured twice 100 ms apart: the sender has stopped at the receiver's
    // window and the publisher limit no longer moves.
    let mut stable = false;
    for _ in 0..50 {
        loop {
            match publication.offer(&payload).expect("offer") {
                AttachedOffer::Position(_) => offered += 1,
                AttachedOffer::AdminAction => {}
                AttachedOffer::BackPressured => break,
                other => panic!("offer refused: {other:?}"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        if matches!(publication.offer(&payload).expect("offer"), AttachedOffer::BackPressured) {
            stable = true;
            break;
        }
        offered += 1;
    }
    assert!(stable, "the publisher limit kept moving");
    assert!(offered * 1056 > 32 * 1024, "the publisher ran a window ahead ({offered} messages)");
    drop(publication);
    std::thread::sleep(Duration::from_millis(200));
    let mut received = 0usize;
    wait_until(Duration::from_secs(10), || {
        received += subscription.poll(64, |message| assert_eq!(message, payload)).expect("poll");
        received >= offered
    });
    assert_eq!(received, offered, "every message the publisher was told was taken arrived");
    drop((subscription, client));
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success());
}

/// Offers `message` until the log takes it (bounded).
fn offer_until_taken(publication: &affinity::client::attached::AttachedPublication, message: &[u8]) {
    let taken = wait_until(Duration::from_secs(10), || {
        matches!(publication.offer(message).expect("offer"), AttachedOffer::Position(_))
    });
    assert!(taken, "never taken");
}

#[test]
fn a_claim_no_client_commits_is_padded_over_after_the_unblock_timeout_and_the_messages_after_it_arrive() {
    // A client that claims space in a shared publication's log and never commits it (as one
    // killed in the middle of an append does) would hold every later message of the stream,
    // other clients' too, for ever. After two client timeouts (here 2 x 500 ms) the driver pads
    // the claim over, counts it and logs it: the messages after it arrive, in order.
    let port = free_udp_port().unwrap();
    for channel in ["aeron:ipc".to_owned(), format!("aeron:udp?endpoint=127.0.0.1:{port}")] {
        let dir = tempdir("unblock");
        let mut driver = start_driver(&dir, &["--client-timeout", "500ms"]);
        let client = AttachedClient::connect(&dir, Duration::from_secs(10)).expect("attach");
        let mut subscription = client.add_subscription(&channel, 10).expect("subscription");
        let publication = client.add_publication(&channel, 10).expect("publication");
        assert!(wait_until(Duration::from_secs(10), || publication.is_connected().unwrap()), "{channel}");
        offer_until_taken(&publication, b"before");
        // The claim: 1,056 bytes on the active term's tail counter, nothing written there.
        let name = publication_log_name(publication.registration_id());
        let logs = driver_logs(driver.0.id()).expect("driver fds");
        let path = &logs.iter().find(|log| log.name == name).expect("the publication's log").path;
        let log = LogBuffer::open(path).expect("open the log");
        let partition = partition_index(i64::from(log.active_term_count().unwrap()));
        log.metadata().get_and_add_i64(meta::TERM_TAIL_COUNTERS + 8 * partition, 1056).unwrap();
        let claimed = Instant::now();
        offer_until_taken(&publication, b"after 1");
        offer_until_taken(&publication, b"after 2");
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut poll = |got: &mut Vec<Vec<u8>>| subscription.poll(10, |m| got.push(m.to_vec())).expect("poll");
        assert!(wait_until(Duration::from_secs(5), || {
            poll(&mut got);
            !got.is_empty()
        }));
        assert!(wait_until(Duration::from_secs(10), || {
            poll(&mut got);
            got.len() >= 3
        }));
        let waited = claimed.elapsed();
        assert_eq!(got, [&b"before"[..], b"after 1", b"after 2"], "{channel}");
        assert!(waited >= Duration::from_millis(1000), "{channel}: padded after {waited:?}, before the timeout");
        assert_eq!(system(&dir, SystemCounter::UnblockedPublications), 1, "{channel}");
        let errors = error_messages(&dir);
        assert!(
            errors.iter().any(|e| e.contains("that no client committed was padded over (1056 bytes lost")),
            "{channel}: {errors:?}"
        );
        drop((publication, subscription, client));
        driver.signal(libc::SIGTERM);
        assert!(driver.wait_exit(Duration::from_secs(10)).success());
    }
}

#[test]
fn a_closed_udp_publication_whose_last_claim_was_never_committed_still_drains_and_is_freed() {
    // The last thing in the log is a claim no client commits, and the publication is closed:
    // the sender, which would wait at that claim for ever, pads it over once the unblock timeout
    // has passed (no writer is left to claim there), drains, lingers and frees the publication.
    let dir = tempdir("unblock-closed");
    let mut driver = start_driver(&dir, &["--client-timeout", "500ms", "--linger", "200ms"]);
    let port = free_udp_port().unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let client = AttachedClient::connect(&dir, Duration::from_secs(10)).expect("attach");
    let mut subscription = client.add_subscription(&channel, 10).expect("subscription");
    let publication = client.add_publication(&channel, 10).expect("publication");
    assert!(wait_until(Duration::from_secs(10), || publication.is_connected().unwrap()));
    offer_until_taken(&publication, b"before");
    let name = publication_log_name(publication.registration_id());
    let logs = driver_logs(driver.0.id()).expect("driver fds");
    let log = LogBuffer::open(&logs.iter().find(|log| log.name == name).expect("the publication's log").path).unwrap();
    let partition = partition_index(i64::from(log.active_term_count().unwrap()));
    log.metadata().get_and_add_i64(meta::TERM_TAIL_COUNTERS + 8 * partition, 2112).unwrap();
    drop(publication);
    let mut got = 0;
    assert!(
        wait_until(Duration::from_secs(10), || {
            got += subscription.poll(10, |_| {}).expect("poll");
            system(&dir, SystemCounter::NetworkPublications) == 0
        }),
        "the closed publication was never freed"
    );
    assert_eq!(got, 1);
    assert_eq!(system(&dir, SystemCounter::UnblockedPublications), 1);
    assert!(error_messages(&dir).iter().any(|e| e.contains("padded over (2112 bytes lost")));
    drop((subscription, log, client));
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success());
}

#[test]
fn loss_through_a_relay_is_repaired_by_naks_through_the_standalone_driver() {
    use affinity::media::relay::{Impairment, LossyRelay};
    use std::sync::atomic::Ordering;
    let port = free_udp_port().unwrap();
    let target = format!("127.0.0.1:{port}").parse().expect("address");
    let impairment = Impairment { loss: 0.02, duplicate: 0.01, reorder: 0.01 };
    let relay = LossyRelay::start("127.0.0.1:0".parse().expect("address"), target, impairment, 7).expect("relay");
    let dir = tempdir("loss");
    let mut driver = start_driver(&dir, &[]);
    let mut subscriber = client("subscribe", &dir, &format!("aeron:udp?endpoint=127.0.0.1:{port}"), 200_000, 64);
    subscriber.wait_for_line("ready");
    let front = relay.front_address();
    let publisher = client("publish", &dir, &format!("aeron:udp?endpoint={front}"), 200_000, 64);
    assert!(output(publisher, Duration::from_secs(300)).contains("\"messages\":200000"));
    assert!(output(subscriber, Duration::from_secs(300)).contains("\"messages\":200000"));
    assert!(relay.stats().dropped.load(Ordering::Relaxed) > 0, "the relay dropped nothing");
    assert!(system(&dir, SystemCounter::NaksSent) > 0, "no NAK was sent");
    assert!(system(&dir, SystemCounter::Retransmits) > 0, "nothing was retransmitted");
    assert!(system(&dir, SystemCounter::DuplicateDataFrames) > 0, "duplicates are counted apart");
    assert_eq!(system(&dir, SystemCounter::InvalidDataFrames), 0, "duplicates are not malformed");
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success());
}

fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_killed_udp_publisher_is_reclaimed_after_the_client_timeout_and_its_data_still_arrives() {
    let dir = tempdir("kill");
    let mut driver = start_driver(&dir, &["--client-timeout", "1s", "--linger", "1s"]);
    let port = free_udp_port().unwrap();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let count = 50_000;
    let mut subscriber = client("subscribe", &dir, &channel, count, 64);
    subscriber.wait_for_line("ready");
    let mut publisher = Proc(
        Command::new(IPC)
            .args(["publish", "--dir"])
            .arg(dir.path())
            .args(["--channel", &channel, "--count", &count.to_string(), "--size", "64", "--hang", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn publisher"),
    );
    publisher.wait_for_line("\"role\":\"publish\"");
    assert_eq!(system(&dir, SystemCounter::NetworkPublications), 1);
    publisher.signal(libc::SIGKILL);
    let _ = publisher.wait_exit(Duration::from_secs(10));
    // Everything it appended before dying reaches the subscriber.
    assert!(output(subscriber, Duration::from_secs(120)).contains(&format!("\"messages\":{count}")));
    assert!(
        wait_until(Duration::from_secs(20), || system(&dir, SystemCounter::NetworkPublications) == 0),
        "the dead client's publication was not reclaimed"
    );
    assert!(system(&dir, SystemCounter::ClientTimeouts) >= 1);
    // The publication's log (a memfd of the driver) went with it; the images' may remain.
    assert!(!driver_logs(driver.0.id()).expect("driver fds").iter().any(|log| log.name.contains("publication-")));
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success());
}

/// A 32-byte DATA header (a heartbeat) for `session` at `position` of a stream whose log has
/// `initial_term_id` and `term_length`.
fn forged_heartbeat(
    session: i32,
    stream: i32,
    initial_term_id: i32,
    term_length: u32,
    position: i64,
    eos: bool,
) -> Vec<u8> {
    use affinity::wire::{flags, DataHeader, FrameType, DATA_HEADER_LENGTH};
    let bits = term_length.trailing_zeros();
    let mut bytes = vec![0u8; DATA_HEADER_LENGTH];
    DataHeader {
        frame_length: 0,
        flags: if eos { flags::UNFRAGMENTED | flags::EOS } else { flags::UNFRAGMENTED },
        frame_type: FrameType::Data,
        term_offset: (position & (i64::from(term_length) - 1)) as i32,
        session_id: session,
        stream_id: stream,
        term_id: initial_term_id.wrapping_add((position >> bits) as i32),
        reserved_value: 0,
    }
    .emit(&mut bytes);
    bytes
}

fn forged_setup(session: i32, stream: i32, initial_term_id: i32, active_term_id: i32) -> Vec<u8> {
    use affinity::wire::Setup;
    let mut bytes = vec![0u8; 64];
    let length = Setup {
        flags: 0,
        term_offset: 0,
        session_id: session,
        stream_id: stream,
        initial_term_id,
        active_term_id,
        term_length: 64 * 1024,
        mtu: 1408,
        ttl: 0,
    }
    .emit(&mut bytes);
    bytes.truncate(length);
    bytes
}

#[test]
fn hostile_datagrams_at_the_subscription_endpoint_do_not_kill_the_standalone_driver() {
    let dir = tempdir("hostile");
    let mut driver = start_driver(&dir, &[]);
    let port = free_udp_port().unwrap();
    let endpoint = format!("127.0.0.1:{port}");
    let channel = format!("aeron:udp?endpoint={endpoint}");
    let stream = 1001;
    let count = 300_000;
    let mut subscriber = client("subscribe", &dir, &channel, count, 64);
    subscriber.wait_for_line("ready");
    let attacker = UdpSocket::bind("127.0.0.1:0").expect("bind attacker");
    // A SETUP whose active term precedes its initial term (it once killed the driver), a SETUP
    // flood of distinct sessions, and garbage.
    attacker.send_to(&forged_setup(4242, stream, 1000, 999), &endpoint).expect("send");
    for session in 0..300 {
        attacker.send_to(&forged_setup(10_000 + session, stream, 5, 5), &endpoint).expect("send");
    }
    attacker.send_to(&[0xFF; 7], &endpoint).expect("send");
    attacker.send_to(&[0u8; 40], &endpoint).expect("send");
    let publisher = client("publish", &dir, &channel, count, 64);
    // The live session, once its publication exists: a heartbeat 100 terms ahead, end of stream
    // at, behind and ahead of the live position.
    let mut attacked = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !attacked && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        let Ok(cnc) = Cnc::open(&dir.join(CNC_FILE), false) else { continue };
        let Ok(counters) = cnc.counters() else { continue };
        let Ok(all) = counters.allocated() else { continue };
        let Some(position) = all.iter().find(|c| c.label.starts_with("snd-pos:")) else { continue };
        if position.value < 64 * 1024 {
            continue;
        }
        let session = i32::from_le_bytes(position.key[..4].try_into().expect("key"));
        let log = driver_logs(driver.0.id())
            .expect("driver fds")
            .into_iter()
            .find(|log| log.name.contains("publication-"))
            .expect("publication log");
        let log = affinity::shm::log_buffer::LogBuffer::open(&log.path).expect("open log");
        let (initial, term) = (log.initial_term_id(), log.term_length());
        let live = position.value & !31;
        for (delta, eos) in [(100 * i64::from(term), false), (0, true), (-4096, true), (32_000, true)] {
            let frame = forged_heartbeat(session, stream, initial, term, (live + delta).max(0) & !31, eos);
            attacker.send_to(&frame, &endpoint).expect("send");
        }
        attacked = true;
    }
    assert!(attacked, "the publication never started");
    assert!(output(publisher, Duration::from_secs(300)).contains(&format!("\"messages\":{count}")));
    assert!(output(subscriber, Duration::from_secs(300)).contains(&format!("\"messages\":{count}")));
    assert!(system(&dir, SystemCounter::SetupsRefused) >= 1, "the inconsistent SETUP was not refused");
    assert!(system(&dir, SystemCounter::InvalidDataFrames) >= 1, "garbage was not counted as malformed");
    // 300 forged sessions against a bound of 128 images per subscription (one is the live one).
    assert!(system(&dir, SystemCounter::ImagesRefused) >= 300 - 127, "the SETUP flood was not bounded");
    assert!(system(&dir, SystemCounter::Images) <= 128);
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success(), "the driver did not survive to shut down cleanly");
}

#[test]
fn multicast_through_the_standalone_driver_reaches_two_subscriber_processes() {
    if !in_private_netns("multicast_through_the_standalone_driver_reaches_two_subscriber_processes") {
        return;
    }
    let dir = tempdir("multicast");
    let mut driver = start_driver(&dir, &["--flow-control", "min"]);
    let channel = "aeron:udp?endpoint=224.20.30.41:24331|interface=127.0.0.1|term-length=65536";
    let count = 100_000;
    let mut first = client("subscribe", &dir, channel, count, 100);
    first.wait_for_line("ready");
    let mut second = client("subscribe", &dir, channel, count, 100);
    second.wait_for_line("ready");
    let publisher = client("publish", &dir, channel, count, 100);
    assert!(output(publisher, Duration::from_secs(300)).contains(&format!("\"messages\":{count}")));
    for subscriber in [first, second] {
        assert!(output(subscriber, Duration::from_secs(300)).contains(&format!("\"messages\":{count}")));
    }
    assert!(system(&dir, SystemCounter::BytesReceived) >= (count * 100) as i64);
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success());
}

/// The driver's error log, as `affinity stat --errors` reads it.
fn error_messages(dir: &Path) -> Vec<String> {
    let cnc = Cnc::open(&dir.join(CNC_FILE), false).expect("open cnc");
    affinity::shm::error_log::read_errors(cnc.error_log()).expect("error log").into_iter().map(|e| e.message).collect()
}

#[test]
fn a_loopback_mtu_below_the_datagrams_turns_offload_off_and_loses_nothing() {
    if !in_private_netns("a_loopback_mtu_below_the_datagrams_turns_offload_off_and_loses_nothing") {
        return;
    }
    // 1,408-byte datagrams (the default MTU) on a 1,280-byte device: the kernel refuses an
    // offloaded run whose segments exceed the device, and fragments single datagrams.
    let status = Command::new("ip").args(["link", "set", "lo", "mtu", "1280"]).status().expect("run ip");
    assert!(status.success(), "cannot set the namespace's loopback MTU");
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
    let (_dir, errors) = transfer("offload-mtu", &[], &channel, 50_000, 200);
    assert!(
        errors.iter().any(|e| e.contains("UDP segmentation offload refused") && e.contains(&channel)),
        "the fallback was not logged: {errors:?}"
    );
}

#[test]
fn offload_off_moves_data_in_order_and_offload_on_logs_no_fallback() {
    for offload in ["off", "on"] {
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{}", free_udp_port().unwrap());
        let (_dir, errors) =
            transfer(&format!("offload-{offload}"), &["--udp-offload", offload], &channel, 100_000, 200);
        assert_eq!(errors, Vec::<String>::new(), "--udp-offload {offload}");
    }
}
