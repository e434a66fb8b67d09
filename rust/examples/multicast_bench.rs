//! Multicast throughput and receiver-loss stall benchmark.
//!
//! Run inside a private network namespace only (multicast must not reach a real network):
//!
//! ```text
//! rust/tests/support/netns-run cargo run --release --example multicast_bench
//! ```
//!
//! Prints one JSON line per run and measurement (`MULTICAST_RUNS` runs, default 3; medians are
//! rendered by `benches/transport_table.py multicast`): messages per second delivered to every
//! receiver (1 and 3 receivers, 32 B and 1 KiB messages, `max`, `min`, `tagged`), and the
//! longest publisher stall after a receiver process is SIGKILLed under `min` with receiver
//! timeouts of 100 ms, 500 ms and 2 s. Every publisher and receiver runs the shared-memory
//! media driver in process (`embedded::start`); the stall loop reads the sender position from
//! the driver's status answer (one command round trip per sample).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use affinity::client::attached::{AttachedClient, AttachedPublication};
use affinity::client::MessageBatch;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::protocol::OfferError;

const STREAM: i32 = 10;
const RUNS: usize = 3;
const SEND_TIME: Duration = Duration::from_millis(500);

fn channel(port: u16, extra: &str) -> String {
    format!("aeron:udp?endpoint=224.20.30.39:{port}|interface=127.0.0.1{extra}")
}

/// Whether this process's network namespace has nothing but loopback (as under netns-run).
fn in_private_netns() -> bool {
    let Ok(devices) = std::fs::read_to_string("/proc/self/net/dev") else { return false };
    let names: Vec<&str> = devices.lines().skip(2).filter_map(|line| line.split(':').next()).map(str::trim).collect();
    names == ["lo"]
}

fn client() -> AttachedClient {
    embedded::start(EmbeddedConfig::default()).expect("embedded client")
}

fn add_publication(client: &AttachedClient, channel: &str) -> AttachedPublication {
    client.add_publication(channel, STREAM).expect("add publication")
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// Spawns a receiver thread on its own driver; returns its message counter.
fn receiver(channel: String, stop: Arc<AtomicBool>) -> (Arc<AtomicU64>, std::thread::JoinHandle<()>) {
    let count = Arc::new(AtomicU64::new(0));
    let counter = count.clone();
    let thread = std::thread::spawn(move || {
        let client = client();
        let mut subscription = client.add_subscription(&channel, STREAM).expect("subscription");
        let mut batch = MessageBatch::default();
        while !stop.load(Ordering::Acquire) {
            batch.clear();
            let fragments = subscription.poll_into(&mut batch, 1024).unwrap_or(0);
            counter.fetch_add(batch.len() as u64, Ordering::Release);
            if fragments == 0 {
                std::thread::yield_now();
            }
        }
    });
    (count, thread)
}

/// Messages per second that reached every receiver.
fn throughput(port: u16, receivers: usize, size: usize, strategy: &str) -> f64 {
    let (fc, gtag) = match strategy {
        "tagged" => ("|fc=tagged,g:1001", "|gtag=1001"),
        other => (if other == "min" { "|fc=min" } else { "|fc=max" }, ""),
    };
    let driver = client();
    let publication = add_publication(&driver, &channel(port, fc));
    let stop = Arc::new(AtomicBool::new(false));
    let subs: Vec<_> = (0..receivers).map(|_| receiver(channel(port, gtag), stop.clone())).collect();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let status = publication.status().expect("status");
            status.connected && status.live_receivers.len() == receivers
        }),
        "receivers did not connect"
    );
    let payload = vec![7u8; size];
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < SEND_TIME {
        for _ in 0..64 {
            match publication.try_offer(&payload).expect("offer") {
                Ok(_) => sent += 1,
                Err(OfferError::BackPressured | OfferError::AdminAction) => break,
                Err(error) => panic!("offer: {error:?}"),
            }
        }
        std::thread::yield_now();
    }
    wait_until(Duration::from_secs(10), || subs.iter().all(|(count, _)| count.load(Ordering::Acquire) >= sent));
    let elapsed = start.elapsed();
    let delivered = subs.iter().map(|(count, _)| count.load(Ordering::Acquire)).min().unwrap_or(0);
    stop.store(true, Ordering::Release);
    for (_, thread) in subs {
        let _ = thread.join();
    }
    delivered as f64 / elapsed.as_secs_f64()
}

/// Longest interval without sender progress after a receiver process was SIGKILLed (`min`).
fn stall_after_kill(port: u16, timeout: &str) -> Duration {
    let driver = client();
    let publication = add_publication(&driver, &channel(port, &format!("|fc=min,t:{timeout}")));
    let stop = Arc::new(AtomicBool::new(false));
    let survivor = receiver(channel(port, ""), stop.clone());
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .args(["--receiver", &channel(port, "")])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn receiver process");
    assert!(
        wait_until(Duration::from_secs(10), || publication.status().expect("status").receivers.len() == 2),
        "receivers did not join"
    );
    let payload = [1u8; 256];
    let start = Instant::now();
    let mut killed = false;
    let mut last_position = publication.status().expect("status").sender_position;
    let mut last_advance = Instant::now();
    let mut longest = Duration::ZERO;
    let mut recovered_at = None;
    while recovered_at.is_none_or(|at: Instant| at.elapsed() < Duration::from_millis(200))
        && start.elapsed() < Duration::from_secs(10)
    {
        let _ = publication.try_offer(&payload).expect("offer");
        let status = publication.status().expect("status");
        let (position, group) = (status.sender_position, status.receivers.len());
        if position != last_position {
            if killed {
                longest = longest.max(last_advance.elapsed());
                if group == 1 && recovered_at.is_none() {
                    recovered_at = Some(Instant::now());
                }
            }
            last_position = position;
            last_advance = Instant::now();
        }
        if !killed && start.elapsed() > Duration::from_millis(300) {
            child.kill().expect("kill");
            killed = true;
            last_advance = Instant::now();
        }
        std::thread::sleep(Duration::from_micros(20));
    }
    let _ = child.kill(); // no-op when already killed
    let _ = child.wait();
    stop.store(true, Ordering::Release);
    let _ = survivor.1.join();
    longest
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--receiver") {
        let client = client();
        let mut subscription = client.add_subscription(&args[2], STREAM).expect("subscription");
        let mut batch = MessageBatch::default();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            batch.clear();
            if subscription.poll_into(&mut batch, 1024).unwrap_or(0) == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        return;
    }
    if !in_private_netns() {
        eprintln!("refusing to send multicast outside a private network namespace; run under netns-run");
        std::process::exit(2);
    }
    // One JSON line per run (benches/run_all.sh records them with the machine load);
    // MULTICAST_RUNS sets the number of runs (default 3).
    let runs: usize = std::env::var("MULTICAST_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(RUNS).max(1);
    let mut port = 24_000;
    for run in 0..runs {
        for receivers in [1, 3] {
            for size in [32usize, 1024] {
                for strategy in ["max", "min", "tagged"] {
                    port += 2;
                    let rate = throughput(port, receivers, size, strategy);
                    println!(
                        "{{\"bench\":\"multicast\",\"run\":{run},\"measurement\":\"{receivers} receiver(s), {size} B, fc={strategy}: msgs/s to every receiver\",\"value\":{rate:.0},\"unit\":\"/s\",\"mb_per_sec\":{:.1}}}",
                        rate * size as f64 / 1e6
                    );
                }
            }
        }
        for timeout in ["100ms", "500ms", "2s"] {
            port += 2;
            let stall = stall_after_kill(port, timeout).as_secs_f64() * 1000.0;
            println!(
                "{{\"bench\":\"multicast-stall\",\"run\":{run},\"measurement\":\"fc=min, receiver timeout {timeout}: longest publisher stall after SIGKILL\",\"value\":{stall:.1},\"unit\":\"ms\"}}"
            );
        }
    }
}
