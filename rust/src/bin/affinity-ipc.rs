//! `affinity-ipc`: publisher and subscriber processes for a standalone driver's channels
//! (`aeron:ipc` by default, any `aeron:udp` channel with `--channel`) — the cross-process tests (`rust/tests/standalone_driver.rs`) and the IPC benchmark
//! (`docs/benchmarks.md`, "Media driver") run it.
//!
//! ```text
//! affinity-ipc publish   --dir D [--stream S] [--channel URI] --count N [--size BYTES] [--batch M] [--exclusive 1] [--hang 1]
//! affinity-ipc subscribe --dir D [--stream S] [--channel URI] --count N [--size BYTES] [--check seq|length]
//! affinity-ipc hold      --dir D [--stream S]      (a publication and a subscription, forever)
//! affinity-ipc attach    --dir D --count N         (median time of N attaches)
//! affinity-ipc idle-publications  --dir D [--channel URI] --count N [--hang 1] (N publications on N streams: time, RSS)
//! affinity-ipc idle-subscriptions --dir D [--channel URI] --count N [--hang 1] (N subscriptions on N streams: time, RSS)
//! affinity-ipc offer-alone --count N [--size BYTES] [--term-length BYTES] [--exclusive 1]   (the log's one-message appender alone: CPU per offer)
//! ```
//!
//! `offer-alone` needs no driver: N one-message `LogBuffer::offer`s into an anonymous log
//! (the default IPC term length unless `--term-length`, and the default MTU) in this one thread, nobody reading and no limit; it prints
//! `{"role":"offer-alone","messages":..,"cpu_seconds":..,"cpu_ns_per_offer":..}`. Without the
//! other processes' cache-line traffic and scheduling it measures what the appender's own
//! instructions cost, the figure a loaded machine moves least (`docs/benchmarks.md`). With
//! `--exclusive 1`, the exclusive appender's (`ExclusiveAppender::offer`).
//!
//! `subscribe --check length` checks only the count and length of messages (publishers that do
//! not number them: the Python benchmark's); the default checks the sequence numbers too.
//!
//! `publish --batch M` (M > 1) appends with `offer_batch`, M messages per call (one claim on the
//! log per call, up to the publisher limit and the term end); the default offers one at a time.
//! `publish --exclusive 1` offers into an exclusive publication
//! (`AttachedClient::add_exclusive_publication`: a log and session of its own, appended to
//! without atomic read-modify-writes); the default, a shared one (`add_publication`).
//!
//! Messages carry their sequence number in the first 8 bytes; the subscriber checks every
//! message arrives once and in order and prints one JSON line: `{"role":..,"messages":..,
//! "seconds":..,"rate":..,"cpu_seconds":..,"cpu_rate":..,"idle_calls":..}` (CPU time of the hot thread over the
//! timed interval: the rate per CPU-second does not depend on how busy the machine is; it
//! includes the `idle_calls`, refused offers or empty polls, a subscriber's from its start). Exit status 1 on any error or gap. Loops are bounded by time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use affinity::client::attached::{AttachedClient, AttachedOffer, AttachedPublication, ExclusivePublication};
use affinity::protocol::OfferError;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
const RUN_TIMEOUT: Duration = Duration::from_secs(600);
const DRIVER_TIMEOUT: Duration = Duration::from_secs(2);
/// Refused offers or empty polls in a row after which a client of a UDP channel yields its core
/// on every further one: through UDP the driver thread moves every byte, and on a machine with
/// fewer cores than busy threads a spinning client takes CPU time from it. IPC clients only
/// yield every 1,024 (there the other client, not the driver, does the work).
const UDP_SPINS_BEFORE_YIELD: u64 = 16;

/// Waits after the `in_row`-th refused offer or empty poll in a row (counted from 1).
fn idle_wait(udp: bool, in_row: u64) {
    if (udp && in_row > UDP_SPINS_BEFORE_YIELD) || in_row % 1024 == 0 {
        std::thread::yield_now();
    } else {
        // Re-reading the frame the other side is about to write takes its cache line away
        // from it: pause between empty polls.
        std::hint::spin_loop();
    }
}

/// Whether `channel` is a UDP channel (the driver's sender and receiver carry its data).
fn is_udp(channel: &str) -> bool {
    channel.starts_with("aeron:udp")
}

struct Args {
    role: String,
    dir: PathBuf,
    stream: i32,
    channel: String,
    count: u64,
    size: usize,
    /// `--hang 1`: after publishing (or adding idle handles), keep the process and its handles
    /// alive until killed (the kill -9 tests, memory of connected idle streams), at most the
    /// run timeout.
    hang: bool,
    batch: usize,
    /// `publish --exclusive 1`: an exclusive publication instead of a shared one.
    exclusive: bool,
    check_sequence: bool,
    /// `offer-alone --term-length BYTES`: the anonymous log's term length (a small one keeps the
    /// log in cache: the appender's instructions without its memory traffic).
    term_length: Option<u32>,
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
        batch: 1,
        exclusive: false,
        check_sequence: true,
        term_length: None,
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
            "--exclusive" => parsed.exclusive = number()? != 0,
            "--check" => {
                parsed.check_sequence = match value.as_str() {
                    "seq" => true,
                    "length" => false,
                    other => return Err(format!("--check {other:?}: seq or length")),
                }
            }
            "--batch" => parsed.batch = number()?.clamp(1, 1 << 20) as usize,
            "--term-length" => {
                parsed.term_length = Some(value.parse().map_err(|e| format!("--term-length {value:?}: {e}"))?)
            }
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
        "offer-alone" => offer_alone(&args),
        "idle-publications" => idle_handles(&args, "publications", |client, stream| {
            client.add_publication(&args.channel, stream).map(drop_later)
        }),
        "idle-subscriptions" => idle_handles(&args, "subscriptions", |client, stream| {
            client.add_subscription(&args.channel, stream).map(drop_later)
        }),
        other => Err(format!("unknown role {other:?}")),
    });
    if let Err(message) = result {
        eprintln!("affinity-ipc: {message}");
        std::process::exit(1);
    }
}

/// CPU time this thread has used (user + system), from `getrusage(RUSAGE_THREAD)`.
fn thread_cpu() -> Duration {
    // SAFETY: `getrusage` only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a zeroed `rusage`.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let time = |t: libc::timeval| Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// One JSON line: wall-clock rate, and the CPU time the hot thread used over the same interval
/// (`cpu_rate` = messages per CPU-second: what the process would do with a core of its own),
/// which includes its `idle_calls` (refused offers, empty polls: a publisher that outruns its
/// subscriber spends CPU waiting).
fn report(role: &str, messages: u64, elapsed: Duration, cpu: Duration, idle_calls: u64) {
    let seconds = elapsed.as_secs_f64();
    let cpu_seconds = cpu.as_secs_f64();
    println!(
        "{{\"role\":\"{role}\",\"messages\":{messages},\"seconds\":{seconds:.6},\"rate\":{:.0},\"cpu_seconds\":{cpu_seconds:.6},\"cpu_rate\":{:.0},\"idle_calls\":{idle_calls}}}",
        messages as f64 / seconds.max(1e-9),
        messages as f64 / cpu_seconds.max(1e-9)
    );
}

/// The publication `publish` offers into.
#[allow(clippy::large_enum_variant)] // one per process, offered into straight (no box to follow)
enum Publisher {
    /// `add_publication`: the log's many-writer appender.
    Shared(AttachedPublication),
    /// `add_exclusive_publication`: its one writer's appender.
    Exclusive(ExclusivePublication),
}

impl Publisher {
    fn is_connected(&self) -> Result<bool, affinity::error::Error> {
        match self {
            Publisher::Shared(publication) => publication.is_connected(),
            Publisher::Exclusive(publication) => publication.is_connected(),
        }
    }

    #[inline]
    fn offer(&mut self, payload: &[u8]) -> Result<AttachedOffer, affinity::error::Error> {
        match self {
            Publisher::Shared(publication) => publication.offer(payload),
            Publisher::Exclusive(publication) => publication.offer(payload),
        }
    }

    fn offer_batch(&mut self, messages: Vec<&[u8]>) -> Result<(usize, Option<OfferError>), affinity::error::Error> {
        match self {
            Publisher::Shared(publication) => publication.offer_batch(messages),
            Publisher::Exclusive(publication) => publication.offer_batch(messages),
        }
    }
}

fn publish(args: &Args) -> Result<(), String> {
    let client = AttachedClient::connect(&args.dir, DRIVER_TIMEOUT).map_err(|e| e.to_string())?;
    let mut publication = if args.exclusive {
        Publisher::Exclusive(client.add_exclusive_publication(&args.channel, args.stream).map_err(|e| e.to_string())?)
    } else {
        Publisher::Shared(client.add_publication(&args.channel, args.stream).map_err(|e| e.to_string())?)
    };
    let start = Instant::now();
    while !publication.is_connected().map_err(|e| e.to_string())? {
        if start.elapsed() > CONNECT_TIMEOUT {
            return Err("no subscriber connected".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut payload = vec![0u8; args.size];
    let mut batch = vec![0u8; args.size * args.batch];
    let start = Instant::now();
    let cpu_start = thread_cpu();
    let mut sequence = 0u64;
    let mut spins = 0u64;
    let mut in_row = 0u64;
    let udp = is_udp(&args.channel);
    while sequence < args.count {
        let progressed = if args.batch > 1 {
            let wanted = (args.count - sequence).min(args.batch as u64) as usize;
            let messages: Vec<&[u8]> = batch
                .chunks_mut(args.size)
                .take(wanted)
                .zip(sequence..)
                .map(|(message, number)| {
                    message[..8].copy_from_slice(&number.to_le_bytes());
                    &*message
                })
                .collect();
            let (taken, refusal) = publication.offer_batch(messages).map_err(|e| e.to_string())?;
            sequence += taken as u64;
            match refusal {
                Some(OfferError::MaxPositionExceeded) => return Err("max position exceeded".into()),
                Some(OfferError::MessageTooLong { length, max }) => {
                    return Err(format!("message of {length} bytes exceeds {max}"))
                }
                _ => taken > 0,
            }
        } else {
            payload[..8].copy_from_slice(&sequence.to_le_bytes());
            match publication.offer(&payload).map_err(|e| e.to_string())? {
                AttachedOffer::Position(_) => {
                    sequence += 1;
                    true
                }
                AttachedOffer::BackPressured | AttachedOffer::AdminAction | AttachedOffer::NotConnected => false,
                AttachedOffer::MaxPositionExceeded => return Err("max position exceeded".into()),
            }
        };
        if progressed {
            in_row = 0;
        } else {
            spins += 1;
            in_row += 1;
            if spins % 1024 == 0 && start.elapsed() > RUN_TIMEOUT {
                return Err(format!("timed out after {sequence} messages"));
            }
            idle_wait(udp, in_row);
        }
    }
    report("publish", sequence, start.elapsed(), thread_cpu().saturating_sub(cpu_start), spins);
    if args.hang {
        hang();
    }
    Ok(())
}

/// `offer-alone`: `args.count` one-message offers into an anonymous log, this thread's CPU time
/// per offer (the log rotates as a publisher's does; nothing cleans or reads it).
fn offer_alone(args: &Args) -> Result<(), String> {
    use affinity::channel::{DEFAULT_MTU, DEFAULT_TERM_LENGTH_IPC};
    use affinity::logbuffer::Offer;
    use affinity::shm::log_buffer::{ExclusiveAppender, LogBuffer, LogParams, PAGE_MIN_SIZE};
    let params = LogParams {
        term_length: args.term_length.unwrap_or(DEFAULT_TERM_LENGTH_IPC),
        mtu: DEFAULT_MTU,
        page_size: PAGE_MIN_SIZE,
        initial_term_id: 0,
        session_id: 1,
        stream_id: args.stream,
        correlation_id: 0,
    };
    let log = LogBuffer::anonymous(&params).map_err(|e| e.to_string())?;
    let mut exclusive =
        if args.exclusive { Some(ExclusiveAppender::new(log.clone()).map_err(|e| e.to_string())?) } else { None };
    let mut payload = vec![0u8; args.size];
    let start = Instant::now();
    let cpu_start = thread_cpu();
    let mut sequence = 0u64;
    let mut rotations = 0u64;
    while sequence < args.count {
        payload[..8].copy_from_slice(&sequence.to_le_bytes());
        let outcome = match exclusive.as_mut() {
            Some(appender) => appender.offer(&payload, 0, i64::MAX),
            None => log.offer(&payload, 0, i64::MAX),
        };
        match outcome.map_err(|e| e.to_string())? {
            Offer::Appended(_) => sequence += 1,
            // The claim crossed the term's end: the log rotated, offer again.
            Offer::AdminAction => rotations += 1,
            other => return Err(format!("offer {sequence} refused: {other:?}")),
        }
        if sequence % (1 << 20) == 0 && start.elapsed() > RUN_TIMEOUT {
            return Err(format!("timed out after {sequence} messages"));
        }
    }
    let cpu_seconds = thread_cpu().saturating_sub(cpu_start).as_secs_f64();
    println!(
        "{{\"role\":\"offer-alone\",\"messages\":{sequence},\"rotations\":{rotations},\"cpu_seconds\":{cpu_seconds:.6},\"cpu_ns_per_offer\":{:.3}}}",
        cpu_seconds * 1e9 / (sequence.max(1) as f64)
    );
    Ok(())
}

/// Keeps the process (and its handles) alive until killed, at most the run timeout.
fn hang() {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let hung = Instant::now();
    while hung.elapsed() < RUN_TIMEOUT {
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let mut in_row = 0u64;
    let udp = is_udp(&args.channel);
    while next < args.count && error.is_none() {
        let fragments = subscription
            .poll(4096, |message| {
                let sequence = message.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
                if (args.check_sequence && sequence != Some(next)) || message.len() != args.size {
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
            start = Some((Instant::now(), thread_cpu()));
        }
        if fragments == 0 {
            idle += 1;
            in_row += 1;
            if idle % 1024 == 0 && began.elapsed() > RUN_TIMEOUT {
                return Err(format!("timed out after {next} messages"));
            }
            idle_wait(udp, in_row);
        } else {
            in_row = 0;
        }
    }
    if let Some(error) = error {
        return Err(error);
    }
    let (elapsed, cpu) = start.map(|(s, c)| (s.elapsed(), thread_cpu().saturating_sub(c))).unwrap_or_default();
    report("subscribe", next, elapsed, cpu, idle);
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

/// Boxes a handle so that handles of either kind can be held in one list until the end.
fn drop_later<T: 'static>(handle: T) -> Box<dyn std::any::Any> {
    Box::new(handle)
}

/// Adds `--count` handles of one kind on consecutive streams from `--stream` and prints how
/// long that took and how much the driver's and this process's resident memory grew.
fn idle_handles(
    args: &Args,
    kind: &str,
    add: impl Fn(&AttachedClient, i32) -> Result<Box<dyn std::any::Any>, affinity::error::Error>,
) -> Result<(), String> {
    let client = AttachedClient::connect(&args.dir, DRIVER_TIMEOUT).map_err(|e| e.to_string())?;
    let driver_pid = u32::try_from(client.driver_pid()).map_err(|e| e.to_string())?;
    let driver_before = rss_kib(driver_pid).unwrap_or(0);
    let own_before = rss_kib(std::process::id()).unwrap_or(0);
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..args.count {
        let stream = args.stream.wrapping_add(i as i32);
        handles.push(add(&client, stream).map_err(|e| e.to_string())?);
    }
    let elapsed = start.elapsed();
    let driver_after = rss_kib(driver_pid).unwrap_or(0);
    let own_after = rss_kib(std::process::id()).unwrap_or(0);
    println!(
        "{{\"role\":\"idle-{kind}\",\"channel\":\"{}\",\"{kind}\":{},\"seconds\":{:.3},\"driver_rss_kib\":{driver_after},\"driver_rss_growth_kib\":{},\"client_rss_kib\":{own_after},\"client_rss_growth_kib\":{}}}",
        args.channel,
        handles.len(),
        elapsed.as_secs_f64(),
        driver_after.saturating_sub(driver_before),
        own_after.saturating_sub(own_before)
    );
    if args.hang {
        hang();
    }
    Ok(())
}
