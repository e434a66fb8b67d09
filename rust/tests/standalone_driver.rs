//! The standalone driver with real processes: `affinity-driver` in one process, publishers and
//! subscribers (`affinity-ipc`) in others, over `aeron:ipc` logs they all map. Kill -9 of a
//! client and of the driver, two drivers on one directory, permissions, a corrupt cnc.
//! Every wait is bounded by time.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use affinity::client::attached::{AttachedClient, AttachedOffer, AttachedPublication, ExclusivePublication};
use affinity::shm::cnc::{Cnc, CNC_FILE};
use affinity::shm::log_buffer::driver_logs;

#[path = "support/processes.rs"]
mod processes;

use processes::{output, tempdir as temp_dir, Proc, TempDir, DRIVER, IPC};

fn tempdir(name: &str) -> TempDir {
    temp_dir("standalone", name)
}

fn start_driver(dir: &Path, extra: &[&str]) -> Proc {
    processes::start_driver(dir, extra, Stdio::piped())
}

fn ipc(role: &str, dir: &Path, count: u64, size: usize) -> Proc {
    ipc_with(role, dir, count, size, &[])
}

fn ipc_with(role: &str, dir: &Path, count: u64, size: usize, extra: &[&str]) -> Proc {
    Proc(
        Command::new(IPC)
            .arg(role)
            .arg("--dir")
            .arg(dir)
            .args(["--count", &count.to_string(), "--size", &size.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn affinity-ipc"),
    )
}

/// Value of the first allocated counter whose label starts with `label`.
fn counter(dir: &Path, label: &str) -> Option<i64> {
    let cnc = Cnc::open(&dir.join(CNC_FILE), false).ok()?;
    cnc.counters().ok()?.allocated().ok()?.into_iter().find(|c| c.label.starts_with(label)).map(|c| c.value)
}

/// A shared or an exclusive publication, offered into the same way.
#[allow(clippy::large_enum_variant)] // one per test
enum Publication {
    Shared(AttachedPublication),
    Exclusive(ExclusivePublication),
}

impl Publication {
    fn offer(&mut self, payload: &[u8]) -> AttachedOffer {
        match self {
            Publication::Shared(publication) => publication.offer(payload).unwrap(),
            Publication::Exclusive(publication) => publication.offer(payload).unwrap(),
        }
    }

    fn is_connected(&self) -> bool {
        match self {
            Publication::Shared(publication) => publication.is_connected().unwrap(),
            Publication::Exclusive(publication) => publication.is_connected().unwrap(),
        }
    }
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
fn a_million_ipc_messages_between_processes_arrive_in_order() {
    let dir = tempdir("million");
    let driver = start_driver(&dir, &[]);
    let mut subscriber = ipc("subscribe", &dir, 1_000_000, 32);
    subscriber.wait_for_line("ready");
    let publisher = ipc("publish", &dir, 1_000_000, 32);
    let sent = output(publisher, Duration::from_secs(300));
    let received = output(subscriber, Duration::from_secs(300));
    assert!(sent.contains("\"messages\":1000000"), "{sent}");
    assert!(received.contains("\"messages\":1000000"), "{received}");
    drop(driver);
}

/// `affinity-ipc offer-alone` (the benchmark's CPU per offer, no driver): every message is
/// appended across term ends, and a message the log cannot take fails the run, named.
#[test]
fn offer_alone_appends_every_message_and_names_a_refusal() {
    let run = |count: u64, size: usize| {
        Command::new(IPC)
            .args(["offer-alone", "--count", &count.to_string(), "--size", &size.to_string()])
            .output()
            .expect("run affinity-ipc offer-alone")
    };
    // Default IPC terms of 64 MiB, 64-byte frames: 2.2 M offers cross two term ends.
    let done = run(2_200_000, 32);
    let out = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{out} {}", String::from_utf8_lossy(&done.stderr));
    assert!(out.contains("\"messages\":2200000,\"rotations\":2,"), "{out}");
    // The largest message of a 64 MiB term is 8 MiB.
    let refused = run(1, 8 * 1024 * 1024 + 1);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("message of 8388609 bytes exceeds the maximum of 8388608"), "{err}");
}

#[test]
fn batch_offers_between_processes_arrive_in_order_small_and_fragmented() {
    let dir = tempdir("batch");
    let driver = start_driver(&dir, &["--term-length", "1m"]);
    // Small messages: many claims of up to 1024 messages, across many term rotations; then
    // messages longer than the MTU (fragmented inside a batch claim).
    for (count, size) in [(1_000_000u64, 40usize), (20_000, 5000)] {
        publish_and_receive_every_message(&dir, count, size, &["--batch", "3000"]);
    }
    drop(driver);
}

/// A subscriber process, then a publisher process (`affinity-ipc publish` with `extra`) of
/// `count` messages of `size` bytes: both report every message (the subscriber checks order).
fn publish_and_receive_every_message(dir: &Path, count: u64, size: usize, extra: &[&str]) {
    let mut subscriber = ipc("subscribe", dir, count, size);
    subscriber.wait_for_line("ready");
    let publisher = ipc_with("publish", dir, count, size, extra);
    let sent = output(publisher, Duration::from_secs(300));
    let received = output(subscriber, Duration::from_secs(300));
    assert!(sent.contains(&format!("\"messages\":{count},")), "{sent}");
    assert!(received.contains(&format!("\"messages\":{count},")), "{received}");
}

#[test]
fn exclusive_publishers_in_processes_deliver_in_order_one_message_and_batched() {
    let dir = tempdir("exclusive");
    let driver = start_driver(&dir, &["--term-length", "1m"]);
    // One message per offer across many rotations; batches of small messages; batches of
    // messages longer than the MTU (fragmented inside one append).
    for (count, size, batch) in [(1_000_000u64, 32usize, "1"), (1_000_000, 40, "3000"), (20_000, 5000, "3000")] {
        publish_and_receive_every_message(&dir, count, size, &["--exclusive", "1", "--batch", batch]);
    }
    drop(driver);
}

#[test]
fn exclusive_and_shared_publications_of_one_stream_are_separate_sessions_and_all_arrive() {
    let dir = tempdir("exclusive-and-shared");
    let driver = start_driver(&dir, &["--term-length", "64k"]);
    let client = AttachedClient::connect(&dir, Duration::from_secs(2)).unwrap();
    let mut subscription = client.add_subscription("aeron:ipc", 5).unwrap();
    let shared = client.add_publication("aeron:ipc", 5).unwrap();
    let mut first = client.add_exclusive_publication("aeron:ipc", 5).unwrap();
    let mut second = client.add_exclusive_publication("aeron:ipc", 5).unwrap();
    let joined = client.add_publication("aeron:ipc", 5).unwrap();
    let sessions = [shared.session_id(), first.session_id(), second.session_id()];
    assert!(sessions[0] != sessions[1] && sessions[1] != sessions[2] && sessions[0] != sessions[2], "{sessions:?}");
    assert_eq!(joined.registration_id(), shared.registration_id(), "a shared publication joins only the shared log");
    assert_eq!(counter(&dir, "IPC publications"), Some(3));
    assert!(wait_until(Duration::from_secs(5), || first.is_connected().unwrap() && second.is_connected().unwrap()));
    // Each publisher numbers its own messages: tag (1 byte) + sequence; every stream in order.
    let per_publisher = 30_000u64;
    let mut next = [0u64; 3];
    let mut sent = [0u64; 3];
    let start = Instant::now();
    while next.iter().any(|n| *n < per_publisher) {
        assert!(start.elapsed() < Duration::from_secs(60), "stuck: sent {sent:?}, received {next:?}");
        for (tag, sent) in sent.iter_mut().enumerate() {
            if *sent == per_publisher {
                continue;
            }
            let mut message = [tag as u8; 16];
            message[8..].copy_from_slice(&sent.to_le_bytes());
            let outcome = match tag {
                0 => shared.offer(&message).unwrap(),
                1 => first.offer(&message).unwrap(),
                _ => second.offer(&message).unwrap(),
            };
            if let AttachedOffer::Position(_) = outcome {
                *sent += 1;
            }
        }
        subscription
            .poll(usize::MAX, |message| {
                let tag = message[0] as usize;
                assert_eq!(u64::from_le_bytes(message[8..16].try_into().unwrap()), next[tag], "publisher {tag}");
                next[tag] += 1;
            })
            .unwrap();
    }
    // The driver reads the exclusive publisher's position from the tail it stores.
    let status = first.status().unwrap();
    assert_eq!((status.session_id, status.position), (first.session_id(), first.position()));
    drop((shared, joined, first, second, subscription, client));
    drop(driver);
}

#[test]
fn a_killed_exclusive_publisher_is_reclaimed_and_a_new_one_delivers_on_the_stream() {
    let dir = tempdir("kill-exclusive");
    let driver = start_driver(&dir, &["--client-timeout", "1s", "--linger", "1s"]);
    let mut subscriber = ipc("subscribe", &dir, 100_000, 64);
    subscriber.wait_for_line("ready");
    let mut publisher = ipc_with("publish", &dir, 100_000, 64, &["--exclusive", "1", "--hang", "1"]);
    assert!(output(subscriber, Duration::from_secs(120)).contains("\"messages\":100000,"));
    assert_eq!(counter(&dir, "IPC publications"), Some(1));
    publisher.signal(libc::SIGKILL);
    publisher.wait_exit(Duration::from_secs(5));
    assert!(
        wait_until(Duration::from_secs(10), || counter(&dir, "IPC publications") == Some(0)
            && counter(&dir, "Clients") == Some(0)),
        "the killed publisher's log was not reclaimed"
    );
    assert_eq!(driver_logs(driver.0.id()).unwrap(), vec![], "log memfd closed");
    // The stream goes on with a new exclusive publisher (a new session and log).
    publish_and_receive_every_message(&dir, 100_000, 64, &["--exclusive", "1"]);
}

#[test]
fn two_subscribers_each_get_every_message_and_the_slowest_paces_the_publisher() {
    let dir = tempdir("two-subscribers");
    let _driver = start_driver(&dir, &[]);
    let mut a = ipc("subscribe", &dir, 200_000, 200);
    a.wait_for_line("ready");
    let mut b = ipc("subscribe", &dir, 200_000, 200);
    b.wait_for_line("ready");
    // Both images exist before the publisher writes (the publisher waits only for one).
    assert!(wait_until(Duration::from_secs(5), || counter(&dir, "Subscriptions") == Some(2)));
    let publisher = ipc("publish", &dir, 200_000, 200);
    output(publisher, Duration::from_secs(300));
    for subscriber in [a, b] {
        assert!(output(subscriber, Duration::from_secs(300)).contains("\"messages\":200000"));
    }
}

#[test]
fn a_killed_client_is_reclaimed_after_the_client_timeout() {
    let dir = tempdir("kill-client");
    let driver = start_driver(&dir, &["--client-timeout", "1s", "--linger", "1s"]);
    let mut client = ipc("hold", &dir, 0, 32);
    client.wait_for_line("ready");
    assert_eq!(counter(&dir, "Clients"), Some(1));
    assert_eq!(counter(&dir, "IPC publications"), Some(1));
    assert_eq!(counter(&dir, "Subscriptions"), Some(1));
    assert!(counter(&dir, "sub-pos:").is_some());
    client.signal(libc::SIGKILL);
    client.wait_exit(Duration::from_secs(5));
    let killed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(6), || counter(&dir, "Client timeouts") == Some(1)
            && counter(&dir, "Clients") == Some(0)
            && counter(&dir, "IPC publications") == Some(0)
            && counter(&dir, "Subscriptions") == Some(0)),
        "resources not reclaimed"
    );
    assert!(killed.elapsed() >= Duration::from_millis(800), "reclaimed before the client timeout");
    assert!(counter(&dir, "sub-pos:").is_none() && counter(&dir, "pub-lmt:").is_none(), "counters freed");
    assert_eq!(driver_logs(driver.0.id()).unwrap(), vec![], "log memfd closed");
}

#[test]
fn a_client_cannot_truncate_a_log_and_the_driver_and_the_stream_survive_the_attempt() {
    let dir = tempdir("truncate-log");
    let mut driver = start_driver(&dir, &[]);
    let client = AttachedClient::connect(&dir, Duration::from_secs(2)).unwrap();
    let mut subscription = client.add_subscription("aeron:ipc", 31).unwrap();
    let publication = client.add_publication("aeron:ipc", 31).unwrap();
    assert!(wait_until(Duration::from_secs(5), || subscription.image_count().unwrap_or(0) == 1));
    let logs = driver_logs(driver.0.id()).unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    // What any client can do with the name it was given: truncate(2) by path (O_TRUNC) and
    // ftruncate(2), shorter and longer. Before the logs were sealed, the first one made the
    // driver (and this process, which maps the log too) die of SIGBUS.
    let opened = std::fs::OpenOptions::new().write(true).truncate(true).open(&logs[0].path);
    assert_eq!(opened.unwrap_err().raw_os_error(), Some(libc::EPERM), "O_TRUNC");
    let file = std::fs::OpenOptions::new().write(true).open(&logs[0].path).unwrap();
    let length = file.metadata().unwrap().len();
    for len in [0, length / 2, length + 1] {
        assert_eq!(file.set_len(len).unwrap_err().raw_os_error(), Some(libc::EPERM), "set_len({len})");
    }
    let mut got = 0;
    let flowing = wait_until(Duration::from_secs(5), || {
        let _ = publication.offer(b"after the attempt");
        let _ = subscription.poll(10, |_| got += 1);
        got >= 100
    });
    assert!(flowing, "the stream stopped after {got} messages");
    assert!(driver.0.try_wait().unwrap().is_none(), "the driver died");
    drop((publication, subscription, client));
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(5)).success());
}

#[test]
fn a_killed_driver_makes_clients_time_out_and_a_restart_takes_over() {
    let dir = tempdir("kill-driver");
    let driver = start_driver(&dir, &[]);
    let client = AttachedClient::connect(&dir, Duration::from_millis(500)).unwrap();
    let publication = client.add_publication("aeron:ipc", 5).unwrap();
    assert_eq!(publication.offer(b"x").unwrap(), AttachedOffer::NotConnected);
    driver.signal(libc::SIGKILL);
    let mut driver = driver;
    driver.wait_exit(Duration::from_secs(5));
    let killed = Instant::now();
    let timed_out = wait_until(Duration::from_secs(3), || {
        matches!(publication.offer(b"x"), Err(affinity::error::Error::Timeout(_)))
    });
    assert!(timed_out, "no timeout error after the driver died");
    assert!(killed.elapsed() < Duration::from_secs(2));
    let message = publication.offer(b"x").unwrap_err().to_string();
    assert!(message.contains("has not beaten"), "{message}");
    drop(publication);
    drop(client);
    // The pid is gone: a new driver takes the directory over.
    let mut restarted = start_driver(&dir, &[]);
    let client = AttachedClient::connect(&dir, Duration::from_secs(2)).unwrap();
    assert!(client.add_subscription("aeron:ipc", 5).is_ok());
    drop(client);
    restarted.signal(libc::SIGTERM);
    assert!(restarted.wait_exit(Duration::from_secs(5)).success());
}

#[test]
fn a_second_driver_on_a_live_directory_refuses_and_names_the_pid() {
    let dir = tempdir("two-drivers");
    let first = start_driver(&dir, &[]);
    let second = Command::new(DRIVER).arg("--dir").arg(dir.path()).output().expect("run second driver");
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains(&format!("pid {}", first.0.id())), "{stderr}");
    drop(first);
}

#[test]
fn sigterm_shuts_down_cleanly_ends_streams_and_removes_files() {
    let dir = tempdir("sigterm");
    let mut driver = start_driver(&dir, &[]);
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700, "directory 0700");
    assert_eq!(std::fs::metadata(dir.join(CNC_FILE)).unwrap().mode() & 0o777, 0o600, "cnc 0600");
    let client = AttachedClient::connect(&dir, Duration::from_secs(2)).unwrap();
    let mut subscription = client.add_subscription("aeron:ipc", 9).unwrap();
    let publication = client.add_publication("aeron:ipc", 9).unwrap();
    assert!(wait_until(Duration::from_secs(5), || subscription.image_count().unwrap_or(0) == 1));
    let logs = driver_logs(driver.0.id()).unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let log = logs[0].path.clone();
    assert_eq!(std::fs::metadata(&log).unwrap().mode() & 0o777, 0o600, "log 0600");
    assert!(wait_until(Duration::from_secs(5), || matches!(
        publication.offer(b"last words"),
        Ok(AttachedOffer::Position(_))
    )));
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(5)).success());
    assert!(!dir.join(CNC_FILE).exists() && !log.exists(), "files removed");
    // The subscriber still drains what was written, then the image ends (end of stream).
    let mut got = Vec::new();
    let drained = wait_until(Duration::from_secs(3), || {
        let _ = subscription.poll(10, |m| got.push(m.to_vec()));
        got.len() == 1 && subscription.image_count().unwrap_or(1) == 0
    });
    assert!(drained, "got {got:?}");
}

#[test]
fn a_corrupt_or_truncated_cnc_is_a_clear_error_and_a_new_driver_replaces_it() {
    let dir = tempdir("corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(CNC_FILE), vec![7u8; 200]).unwrap();
    let error = AttachedClient::connect(&dir, Duration::from_secs(1)).err().expect("must fail").to_string();
    assert!(error.contains("cnc") && error.contains("magic"), "{error}");
    std::fs::write(dir.join(CNC_FILE), b"short").unwrap();
    let error = AttachedClient::connect(&dir, Duration::from_secs(1)).err().expect("must fail").to_string();
    assert!(error.contains("truncated"), "{error}");
    let mut driver = start_driver(&dir, &[]);
    assert!(AttachedClient::connect(&dir, Duration::from_secs(1)).is_ok());
    driver.signal(libc::SIGINT);
    assert!(driver.wait_exit(Duration::from_secs(5)).success());
}

/// One message per `offer` through every outcome of the log: appends up to the publisher limit
/// (half a term ahead of the subscriber), back pressure there (not "not connected"), the limit
/// moved by the driver once the subscriber reads, the rotation at each term end
/// (`AdminAction`, then the next term), with every position accounted for: each append ends
/// 64 bytes (a 32 B message framed) after the one before, or at the start of the next term
/// after a rotation, and the subscriber gets every message once, in order.
#[test]
fn one_message_offers_report_back_pressure_and_rotation_and_lose_nothing() {
    offers_report_back_pressure_and_rotation_and_lose_nothing(false);
}

#[test]
fn exclusive_offers_report_back_pressure_and_rotation_and_lose_nothing() {
    offers_report_back_pressure_and_rotation_and_lose_nothing(true);
}

/// One message per offer into a shared or an `exclusive` publication, the subscriber reading
/// only once the publisher is refused: back pressure at the limit, rotations, every message.
fn offers_report_back_pressure_and_rotation_and_lose_nothing(exclusive: bool) {
    const TERM: i64 = 64 * 1024;
    const FRAME: i64 = 64;
    let dir = tempdir(if exclusive { "exclusive-outcomes" } else { "offer-outcomes" });
    let driver = start_driver(&dir, &["--term-length", "64k"]);
    let client = AttachedClient::connect(&dir, Duration::from_secs(2)).unwrap();
    let mut publication = if exclusive {
        Publication::Exclusive(client.add_exclusive_publication("aeron:ipc", 9).unwrap())
    } else {
        Publication::Shared(client.add_publication("aeron:ipc", 9).unwrap())
    };
    let mut subscription = client.add_subscription("aeron:ipc", 9).unwrap();
    assert!(wait_until(Duration::from_secs(5), || publication.is_connected()), "never connected");
    let total = 4 * (TERM / FRAME) as u64;
    let (mut sent, mut received, mut position) = (0u64, 0u64, 0i64);
    let (mut back_pressured, mut rotations) = (0u64, 0u64);
    let mut first_refusal = None;
    let start = Instant::now();
    while received < total {
        assert!(start.elapsed() < Duration::from_secs(60), "stuck at {sent} sent, {received} received");
        // The subscriber reads only once the publisher is refused: the limit is reached first.
        while sent < total {
            let mut message = [0u8; 32];
            message[..8].copy_from_slice(&sent.to_le_bytes());
            match publication.offer(&message) {
                AttachedOffer::Position(end) => {
                    let expected = position + FRAME;
                    let next_term = (position / TERM + 1) * TERM + FRAME;
                    assert!(end == expected || end == next_term, "message {sent} ended at {end} after {position}");
                    position = end;
                    sent += 1;
                }
                AttachedOffer::BackPressured => {
                    first_refusal.get_or_insert(position);
                    back_pressured += 1;
                    break;
                }
                AttachedOffer::AdminAction => rotations += 1,
                other => panic!("offer {sent} at {position}: {other:?}"),
            }
        }
        subscription
            .poll(usize::MAX, |message| {
                let number = u64::from_le_bytes(message[..8].try_into().unwrap());
                assert_eq!((number, message.len()), (received, 32));
                received += 1;
            })
            .unwrap();
    }
    // The first refusal is at the publisher limit: the window, half a term, past the start.
    assert_eq!(first_refusal, Some(TERM / 2), "the first back pressure");
    assert!(back_pressured > 0 && rotations >= 3, "{back_pressured} refusals, {rotations} rotations");
    assert!(position > 3 * TERM, "ended at {position}");
    drop((publication, subscription, client));
    drop(driver);
}
