//! Start time and idle-publication cost of the embedded driver: the shared-memory media driver
//! run in process (`embedded::start`, a private directory under `/dev/shm`). (The old
//! in-process driver it was compared with until it was removed is gone; its figures stay in
//! `docs/benchmarks.md`.)
//!
//! ```text
//! cargo run --release --example embedded_bench [PUBLICATIONS]
//! ```
//!
//! Median of 20 starts (start to a client ready for commands, then closed), then
//! `PUBLICATIONS` (default 1,000) idle `aeron:ipc` publications on distinct streams in one
//! client: the time to create them and the growth of the process's resident set (VmRSS).

use std::time::{Duration, Instant};

use affinity::embedded::{self, EmbeddedConfig};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn main() {
    let count: i32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let starts = |start: &dyn Fn()| {
        median(
            (0..20)
                .map(|_| {
                    let begun = Instant::now();
                    start();
                    begun.elapsed()
                })
                .collect(),
        )
    };

    let shm = starts(&|| {
        let client = embedded::start(EmbeddedConfig::default()).expect("embedded client");
        client.close();
    });
    println!("start+close median of 20: shm embedded {:.3} ms", ms(shm));

    let before = rss_kib();
    let begun = Instant::now();
    let client = embedded::start(EmbeddedConfig::default()).expect("embedded client");
    let publications: Vec<_> =
        (0..count).map(|i| client.add_publication("aeron:ipc", 10_000 + i).expect("publication")).collect();
    let took = begun.elapsed();
    println!(
        "shm embedded: {count} idle ipc publications in {:.3} s, RSS +{} MiB",
        took.as_secs_f64(),
        rss_kib().saturating_sub(before) / 1024
    );
    drop(publications);
    client.close();
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
