//! `affinity-ipc`: publisher and subscriber processes for a standalone driver's channels
//! (`aeron:ipc` by default, any `aeron:udp` channel with `--channel`) — the cross-process tests (`rust/tests/standalone_driver.rs`) and the IPC benchmark
//! (`docs/benchmarks.md`, "Media driver") run it.
//!
//! ```text
//! affinity-ipc publish   --dir D [--stream S] [--channel URI] --count N [--size BYTES] [--hang 1]
//! affinity-ipc subscribe --dir D [--stream S] [--channel URI] --count N [--size BYTES]
//! affinity-ipc hold      --dir D [--stream S]      (a publication and a subscription, forever)
//! affinity-ipc attach    --dir D --count N         (median time of N attaches)
//! affinity-ipc idle-publications --dir D --count N (N publications on N streams: time, RSS)
//! ```
//!
//! Messages carry their sequence number in the first 8 bytes; the subscriber checks every
//! message arrives once and in order and prints one JSON line: `{"role":..,"messages":..,
//! "seconds":..,"rate":..}`. Exit status 1 on any error or gap. Loops are bounded by time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use affinity::client::attached::{AttachedClient, AttachedOffer};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
const RUN_TIMEOUT: Duration = Duration::from_secs(600);
const DRIVER_TIMEOUT: Duration = Duration::from_secs(2);

struct Args {
    role: String,
    dir: PathBuf,
    stream: i32,
    channel: String,
    count: u64,
    size: usize,
    /// `publish --hang 1`: after offering, keep the process (and its publication) alive until
    /// killed (the kill -9 tests), at most the run timeout.
    hang: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let role = args.next().ok_or("usage: affinity-ipc publish|subscribe|hold --dir D [--count N] [--size B]")?;
    let mut parsed = Args {
        role,
        dir: affinity::shm::directory::default_dir(),
        stream: 1001,
        channel: "aeron:ipc".into(),
        count: 1_000_000,
        size: 32,
        hang: false,
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag} {value:?}: {e}"));
        match flag.as_str() {
            "--dir" => parsed.dir = PathBuf::from(&value),
            "--stream" => parsed.stream = value.parse().map_err(|e| format!("--stream {value:?}: {e}"))?,
            "--channel" => parsed.channel = value.clone(),
            "--count" => parsed.count = number()?,
            "--size" => parsed.size = number()?.max(8) as usize,
            "--hang" => parsed.hang = number()? != 0,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(parsed)
}

fn main() {
    let result = parse().and_then(|args| match args.role.as_str() {
        "publish" => publish(&args),
        "subscribe" => subscribe(&args),
        "hold" => hold(&args),
        "attach" => attach(&args),
        "idle-publications" => idle_publications(&args),
        other => Err(format!("unknown role {other:?}")),
    });
    if let Err(message) = result {
        eprintln!("affinity-ipc: {message}");
        std::process::exit(1);
    }
}

fn report(role: &str, messages: u64, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    println!(
        "{{\"role\":\"{role}\",\"messages\":{messages},\"seconds\":{seconds:.6},\"rate\":{:.0}}}",
        messages as f64 / seconds.max(1e-9)
    );
}

fn publish(args: &Args) -> Result<(), String> {
    let client = AttachedClient::connect(&args.dir, DRIVER_TIMEOUT).map_err(|e| e.to_string())?;
    let publication = client.add_publication(&args.channel, args.stream).map_err(|e| e.to_string())?;
    let start = Instant::now();
    while !publication.is_connected().map_err(|e| e.to_string())? {
        if start.elapsed() > CONNECT_TIMEOUT {
            return Err("no subscriber connected".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut payload = vec![0u8; args.size];
    let start = Instant::now();
    let mut sequence = 0u64;
    let mut spins = 0u64;
    while sequence < args.count {
        payload[..8].copy_from_slice(&sequence.to_le_bytes());
        match publication.offer(&payload).map_err(|e| e.to_string())? {
            AttachedOffer::Position(_) => sequence += 1,
            AttachedOffer::BackPressured | AttachedOffer::AdminAction | AttachedOffer::NotConnected => {
                spins += 1;
                if spins % 1024 == 0 {
                    if start.elapsed() > RUN_TIMEOUT {
                        return Err(format!("timed out after {sequence} messages"));
                    }
                    std::thread::yield_now();
                }
            }
            AttachedOffer::MaxPositionExceeded => return Err("max position exceeded".into()),
        }
    }
    report("publish", sequence, start.elapsed());
    if args.hang {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let hung = Instant::now();
        while hung.elapsed() < RUN_TIMEOUT {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

fn subscribe(args: &Args) -> Result<(), String> {
    let client = AttachedClient::connect(&args.dir, DRIVER_TIMEOUT).map_err(|e| e.to_string())?;
    let mut subscription = client.add_subscription(&args.channel, args.stream).map_err(|e| e.to_string())?;
    println!("ready");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let mut next = 0u64;
    let mut error = None;
    let mut start = None;
    let began = Instant::now();
    let mut idle = 0u64;
    while next < args.count && error.is_none() {
        let fragments = subscription
            .poll(4096, |message| {
                let sequence = message.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
                if sequence != Some(next) || message.len() != args.size {
                    error.get_or_insert(format!(
                        "expected message {next} of {} bytes, got {sequence:?} of {}",
                        args.size,
                        message.len()
                    ));
                }
                next += 1;
            })
            .map_err(|e| e.to_string())?;
        if fragments > 0 && start.is_none() {
            start = Some(Instant::now());
        }
        if fragments == 0 {
            idle += 1;
            if idle % 1024 == 0 {
                if began.elapsed() > RUN_TIMEOUT {
                    return Err(format!("timed out after {next} messages"));
                }
                std::thread::yield_now();
            }
        }
    }
    if let Some(error) = error {
        return Err(error);
    }
    report("subscribe", next, start.map(|s| s.elapsed()).unwrap_or_default());
    Ok(())
}

fn hold(args: &Args) -> Result<(), String> {
    let client = AttachedClient::connect(&args.dir, DRIVER_TIMEOUT).map_err(|e| e.to_string())?;
    let _publication = client.add_publication(&args.channel, args.stream).map_err(|e| e.to_string())?;
    let _subscription = client.add_subscription(&args.channel, args.stream).map_err(|e| e.to_string())?;
    println!("ready");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    while start.elapsed() < RUN_TIMEOUT {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn attach(args: &Args) -> Result<(), String> {
    let mut times = Vec::new();
    for _ in 0..args.count.max(1) {
        let start = Instant::now();
        let client = AttachedClient::connect(&args.dir, DRIVER_TIMEOUT).map_err(|e| e.to_string())?;
        times.push(start.elapsed());
        drop(client);
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "{{\"role\":\"attach\",\"attaches\":{},\"median_ms\":{:.3},\"max_ms\":{:.3}}}",
        times.len(),
        median.as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
    Ok(())
}

/// Resident set size of process `pid` in KiB (from /proc).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn idle_publications(args: &Args) -> Result<(), String> {
    let client = AttachedClient::connect(&args.dir, DRIVER_TIMEOUT).map_err(|e| e.to_string())?;
    let driver_pid = u32::try_from(client.driver_pid()).map_err(|e| e.to_string())?;
    let driver_before = rss_kib(driver_pid).unwrap_or(0);
    let own_before = rss_kib(std::process::id()).unwrap_or(0);
    let start = Instant::now();
    let mut publications = Vec::new();
    for i in 0..args.count {
        let stream = args.stream.wrapping_add(i as i32);
        publications.push(client.add_publication(&args.channel, stream).map_err(|e| e.to_string())?);
    }
    let elapsed = start.elapsed();
    let driver_after = rss_kib(driver_pid).unwrap_or(0);
    let own_after = rss_kib(std::process::id()).unwrap_or(0);
    println!(
        "{{\"role\":\"idle-publications\",\"publications\":{},\"seconds\":{:.3},\"driver_rss_kib\":{driver_after},\"driver_rss_growth_kib\":{},\"client_rss_kib\":{own_after},\"client_rss_growth_kib\":{}}}",
        publications.len(),
        elapsed.as_secs_f64(),
        driver_after.saturating_sub(driver_before),
        own_after.saturating_sub(own_before)
    );
    Ok(())
}
