//! `aeron:udp` through the standalone media driver with real processes: `affinity-driver` in
//! one process, a publisher and a subscriber (`affinity-ipc --channel aeron:udp?...`) in
//! others, each attached to the driver over shared memory; the driver's sender and receiver
//! agents carry the stream over loopback UDP. Every wait is bounded by time.

use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use affinity::shm::cnc::{Cnc, CNC_FILE};
use affinity::shm::status::SystemCounter;

const DRIVER: &str = env!("CARGO_BIN_EXE_affinity-driver");
const IPC: &str = env!("CARGO_BIN_EXE_affinity-ipc");

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("affinity-udp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A child process killed (SIGKILL) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    fn wait_for_line(&mut self, marker: &str) -> String {
        let stdout = self.0.stdout.as_mut().expect("stdout piped");
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        for _ in 0..100 {
            line.clear();
            let read = reader.read_line(&mut line).expect("read child stdout");
            assert!(read > 0, "child exited before printing {marker:?}");
            if line.contains(marker) {
                return line;
            }
        }
        panic!("no {marker:?} in the child's first 100 lines");
    }

    fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(start.elapsed() < timeout, "process did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child.
        unsafe { libc::kill(self.0.id() as i32, signal) };
    }
}

fn start_driver(dir: &Path, extra: &[&str]) -> Proc {
    let mut child = Proc(
        Command::new(DRIVER)
            .arg("--dir")
            .arg(dir)
            .args(["--term-length", "1m"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn affinity-driver"),
    );
    child.wait_for_line("ready in");
    child
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
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

fn output(mut child: Proc, timeout: Duration) -> String {
    let status = child.wait_exit(timeout);
    let mut text = String::new();
    child.0.stdout.take().expect("stdout").read_to_string(&mut text).expect("read stdout");
    assert!(status.success(), "child failed ({status}): {text}");
    text
}

fn system(dir: &Path, counter: SystemCounter) -> i64 {
    let cnc = Cnc::open(&dir.join(CNC_FILE), false).expect("open cnc");
    counter.read(&cnc.counters().expect("counters")).expect("system counter")
}

/// Publisher and subscriber processes over `channel` through a driver started with `extra`.
fn transfer(name: &str, extra: &[&str], channel: &str, count: u64, size: usize) -> PathBuf {
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
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success());
    dir
}

#[test]
fn a_million_udp_messages_between_processes_arrive_in_order() {
    let port = free_port();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let dir = transfer("million", &[], &channel, 1_000_000, 32);
    assert!(!dir.join(CNC_FILE).exists(), "SIGTERM removes the driver's files");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_threading_mode_moves_data_in_order() {
    for mode in ["dedicated", "shared-network", "shared"] {
        let port = free_port();
        let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
        let dir = transfer(mode, &["--threading", mode], &channel, 100_000, 200);
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn loss_through_a_relay_is_repaired_by_naks_through_the_standalone_driver() {
    use affinity::media::relay::{Impairment, LossyRelay};
    use std::sync::atomic::Ordering;
    let port = free_port();
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
    let _ = std::fs::remove_dir_all(dir);
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
    let port = free_port();
    let channel = format!("aeron:udp?endpoint=127.0.0.1:{port}");
    let count = 50_000;
    let mut subscriber = client("subscribe", &dir, &channel, count, 64);
    subscriber.wait_for_line("ready");
    let mut publisher = Proc(
        Command::new(IPC)
            .args(["publish", "--dir"])
            .arg(&dir)
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
    assert!(!std::fs::read_dir(dir.join("publications"))
        .expect("publications")
        .any(|e| e.map(|e| !e.file_name().to_string_lossy().starts_with("image-")).unwrap_or(false)));
    driver.signal(libc::SIGTERM);
    assert!(driver.wait_exit(Duration::from_secs(10)).success());
    let _ = std::fs::remove_dir_all(dir);
}
