//! Transport benchmarks over loopback UDP with the publisher and the subscriber in two processes,
//! each running the shared-memory media driver in process (`embedded::start`).
//!
//! Subcommands (every option is `--name value`):
//!
//! * `throughput-sub --channel C --count N [--warmup W] [--mode M]` — receives `W + N` messages
//!   and prints one JSON line with the rate over the last `N` (wall time from the first measured
//!   message to the last one).
//! * `throughput-pub --channel C --size S --count N [--warmup W] [--mode M] [--batch B]` — offers
//!   `W + N` messages of `S` bytes (one `offer` each, or `offer_batch` of `B`), then lingers so
//!   the driver delivers the tail.
//! * `ping --channel-out A --channel-in B --count N --size S [--warmup W]` — sends one message at
//!   a time on `A` and waits for its echo on `B`; prints round-trip percentiles.
//! * `pong --channel-in A --channel-out B [--count N]` — echoes what arrives on `A` to `B`.
//! * `run-throughput --size S --count N [...]` and `run-pingpong --size S --count N [...]` — run
//!   the subscriber (or the pong) as a child process of this executable and print one JSON line.
//! * `idle-cycle --cycles N [--blocks B]` — the cost of an idle invoker duty cycle: one process
//!   with a publication and a subscription on a loopback channel (so its driver serves a network
//!   publication, an image and their sockets), nothing offered; times `N` `do_work()` calls in
//!   `B` blocks (default 20) and prints the median, fastest and slowest block's ns per cycle.
//! * `stalls --seconds S [--over-ns N]` — the machine's floor under a tail: one thread per core
//!   spins reading the monotonic clock, no driver, no system call, and counts the gaps between
//!   two readings longer than `N` ns (default 2,000): time the core was taken from a spinning
//!   thread (interrupts, the hypervisor). Prints the stalls per second per core, the share of
//!   time lost, the median, 90th percentile and longest stall, and the most common interval
//!   between two stalls of one core.
//!
//! Common options: `--mode shared|shared-network|dedicated|invoker` (embedded driver threading,
//! default `invoker`), `--idle
//! backoff|yield|busy-spin` (driver thread idle strategy in shared mode, default `backoff`),
//! `--app-idle spin|yield` (what the application thread does when a poll or offer found nothing,
//! default `spin`), `--stream` (default 1001), `--max-seconds` (give up after this long) and
//! `--params` (channel parameters appended to the loopback channels `run-throughput` and
//! `run-pingpong` make, e.g. `mtu=65504`), `--udp-offload on|off` (the driver's UDP GSO/GRO,
//! default on). `--trace PREFIX` (`run-pingpong`, `ping`, `pong`): one line per round trip in
//! `PREFIX.ping` and per echo in `PREFIX.pong` (timestamps, wait loops, page faults, context
//! switches; `benches/rtt_trace.py` joins them), to find where the tail comes from.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use affinity::client::attached::{
    AttachedClient as Client, AttachedPublication as Publication, AttachedSubscription as Subscription,
};
use affinity::client::MessageBatch;
use affinity::driver::IdleStrategy;
use affinity::driver::Threading;
use affinity::embedded::{self, EmbeddedConfig};
use affinity::protocol::OfferError;

/// Result type of the benchmark: errors are messages for the user.
type BenchResult<T> = Result<T, String>;

/// Parsed `--name value` options.
struct Options {
    values: HashMap<String, String>,
}

impl Options {
    fn parse(args: &[String]) -> BenchResult<Options> {
        let mut values = HashMap::new();
        let mut iter = args.iter();
        while let Some(name) = iter.next() {
            let key = name.strip_prefix("--").ok_or_else(|| format!("expected --option, got {name:?}"))?;
            let value = iter.next().ok_or_else(|| format!("option {name} needs a value"))?;
            values.insert(key.to_owned(), value.clone());
        }
        Ok(Options { values })
    }

    fn string(&self, key: &str, default: Option<&str>) -> BenchResult<String> {
        match (self.values.get(key), default) {
            (Some(value), _) => Ok(value.clone()),
            (None, Some(default)) => Ok(default.to_owned()),
            (None, None) => Err(format!("missing --{key}")),
        }
    }

    fn number(&self, key: &str, default: Option<u64>) -> BenchResult<u64> {
        match (self.values.get(key), default) {
            (Some(value), _) => value.parse().map_err(|e| format!("--{key} {value:?}: {e}")),
            (None, Some(default)) => Ok(default),
            (None, None) => Err(format!("missing --{key}")),
        }
    }

    /// The options that a child process inherits (everything but the role-specific ones).
    fn forward(&self, skip: &[&str]) -> Vec<String> {
        let mut args = Vec::new();
        for (key, value) in &self.values {
            if !skip.contains(&key.as_str()) {
                args.push(format!("--{key}"));
                args.push(value.clone());
            }
        }
        args
    }
}

/// How the benchmark's own thread waits when it found nothing to do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AppIdle {
    Spin,
    Yield,
}

/// Settings every role shares.
struct Common {
    mode: Threading,
    idle: IdleStrategy,
    app_idle: AppIdle,
    stream: i32,
    max_time: Duration,
    udp_offload: bool,
}

impl Common {
    fn from(options: &Options) -> BenchResult<Common> {
        let app_idle = match options.string("app-idle", Some("spin"))?.as_str() {
            "spin" => AppIdle::Spin,
            "yield" => AppIdle::Yield,
            other => return Err(format!("--app-idle {other:?} is not one of: spin, yield")),
        };
        Ok(Common {
            mode: options.string("mode", Some("invoker"))?.parse()?,
            idle: options.string("idle", Some("backoff"))?.parse()?,
            app_idle,
            stream: options.number("stream", Some(1001))? as i32,
            max_time: Duration::from_secs(options.number("max-seconds", Some(20))?),
            udp_offload: match options.string("udp-offload", Some("on"))?.as_str() {
                "on" => true,
                "off" => false,
                other => return Err(format!("--udp-offload {other:?} is not one of: on, off")),
            },
        })
    }

    fn client(&self) -> BenchResult<Client> {
        let mut config = EmbeddedConfig::default();
        (config.driver.threading, config.driver.idle, config.driver.udp_offload) =
            (self.mode, self.idle, self.udp_offload);
        embedded::start(config).map_err(|e| format!("cannot start the driver: {e}"))
    }

    fn mode_name(&self) -> &'static str {
        self.mode.name()
    }

    /// Called when a poll or offer made no progress.
    fn idle(&self, client: &Client) -> BenchResult<()> {
        if self.mode == Threading::Invoker {
            client.do_work().map_err(|e| e.to_string())?;
        }
        match self.app_idle {
            AppIdle::Spin => std::hint::spin_loop(),
            AppIdle::Yield => std::thread::yield_now(),
        }
        Ok(())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(command) = args.first() else {
        eprintln!("usage: affinity-bench <throughput-sub|throughput-pub|ping|pong|run-throughput|run-pingpong> [--option value]...");
        std::process::exit(2);
    };
    let result = Options::parse(&args[1..]).and_then(|options| match command.as_str() {
        "throughput-sub" => throughput_sub(&options).map(|json| println!("{json}")),
        "throughput-pub" => throughput_pub(&options, None).map(|json| println!("{json}")),
        "ping" => ping(&options).map(|json| println!("{json}")),
        "pong" => pong(&options),
        "run-throughput" => run_throughput(&options),
        "run-pingpong" => run_pingpong(&options),
        "idle-cycle" => idle_cycle(&options).map(|json| println!("{json}")),
        "stalls" => stalls(&options).map(|json| println!("{json}")),
        other => Err(format!("unknown subcommand {other:?}")),
    });
    if let Err(message) = result {
        eprintln!("affinity-bench: {message}");
        std::process::exit(1);
    }
}

/// A loopback channel on a port the OS just handed out, with the `--params` given (if any).
fn free_channel(options: &Options) -> BenchResult<String> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = socket.local_addr().map_err(|e| e.to_string())?.port();
    match options.values.get("params") {
        Some(params) if !params.is_empty() => Ok(format!("aeron:udp?endpoint=127.0.0.1:{port}|{params}")),
        _ => Ok(format!("aeron:udp?endpoint=127.0.0.1:{port}")),
    }
}

fn wait_connected(common: &Common, client: &Client, publication: &Publication) -> BenchResult<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !publication.is_connected().map_err(|e| e.to_string())? {
        if Instant::now() > deadline {
            return Err("the publication never connected".into());
        }
        client.do_work().map_err(|e| e.to_string())?;
        if common.mode != Threading::Invoker {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    Ok(())
}

/// Receives `warmup + count` messages; the rate covers the messages after the warm-up.
fn throughput_sub(options: &Options) -> BenchResult<String> {
    let common = Common::from(options)?;
    let channel = options.string("channel", None)?;
    let count = options.number("count", None)?;
    let warmup = options.number("warmup", Some(count / 10))?;
    let client = common.client()?;
    let mut subscription = client.add_subscription(&channel, common.stream).map_err(|e| e.to_string())?;
    let mut batch = MessageBatch::default();
    let total = warmup + count;
    let mut received = 0u64;
    let mut size = 0usize;
    let mut start: Option<(Instant, u64)> = None;
    let mut last = Instant::now();
    let deadline = Instant::now() + common.max_time;
    while received < total {
        batch.clear();
        let fragments = subscription.poll_into(&mut batch, 4096).map_err(|e| e.to_string())?;
        if batch.is_empty() {
            if fragments == 0 {
                if Instant::now() > deadline {
                    return Err(format!("timed out after {received} of {total} messages"));
                }
                common.idle(&client)?;
            }
            continue;
        }
        last = Instant::now();
        size = batch.message(batch.len() - 1).len();
        received += batch.len() as u64;
        if start.is_none() && received >= warmup {
            start = Some((last, received));
        }
    }
    let (first, at_start) = start.unwrap_or((last, 0));
    let messages = received - at_start;
    let seconds = last.duration_since(first).as_secs_f64().max(1e-9);
    let rate = messages as f64 / seconds;
    Ok(format!(
        "{{\"role\":\"sub\",\"mode\":\"{}\",\"size\":{size},\"messages\":{messages},\"seconds\":{seconds:.6},\
         \"msgs_per_sec\":{rate:.0},\"mb_per_sec\":{:.2}}}",
        common.mode_name(),
        rate * size as f64 / 1e6
    ))
}

/// Offers `warmup + count` messages, then keeps the driver going until `peer` exits (or for
/// `--linger-ms` without a peer).
fn throughput_pub(options: &Options, peer: Option<&mut Child>) -> BenchResult<String> {
    let common = Common::from(options)?;
    let channel = options.string("channel", None)?;
    let size = options.number("size", Some(32))? as usize;
    let count = options.number("count", None)?;
    let warmup = options.number("warmup", Some(count / 10))?;
    let batch_size = options.number("batch", Some(1))?.max(1) as usize;
    let linger = Duration::from_millis(options.number("linger-ms", Some(2000))?);
    let client = common.client()?;
    let publication = client.add_publication(&channel, common.stream).map_err(|e| e.to_string())?;
    wait_connected(&common, &client, &publication)?;
    let total = warmup + count;
    // Messages carry their sequence number in the first 8 bytes (when there is room).
    let mut messages = vec![vec![0xA5u8; size]; batch_size];
    let mut sent = 0u64;
    let mut refusals = 0u64;
    let deadline = Instant::now() + common.max_time;
    let started = Instant::now();
    while sent < total {
        let n = batch_size.min((total - sent) as usize);
        for (offset, message) in messages.iter_mut().take(n).enumerate() {
            if size >= 8 {
                message[..8].copy_from_slice(&(sent + offset as u64).to_le_bytes());
            }
        }
        let (taken, refusal) = if n == 1 {
            match publication.try_offer(&messages[0]).map_err(|e| e.to_string())? {
                Ok(_) => (1, None),
                Err(error) => (0, Some(error)),
            }
        } else {
            publication.offer_batch(messages[..n].iter().map(Vec::as_slice)).map_err(|e| e.to_string())?
        };
        sent += taken as u64;
        match refusal {
            None => {}
            Some(OfferError::BackPressured | OfferError::AdminAction) => {
                refusals += 1;
                if Instant::now() > deadline {
                    return Err(format!("timed out after offering {sent} of {total} messages"));
                }
                common.idle(&client)?;
            }
            Some(error) => return Err(format!("offer failed: {error:?}")),
        }
    }
    let offer_seconds = started.elapsed().as_secs_f64();
    match peer {
        Some(child) => loop {
            if child.try_wait().map_err(|e| e.to_string())?.is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err("the subscriber did not finish in time".into());
            }
            if client.do_work().map_err(|e| e.to_string())? == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        },
        None => {
            let until = Instant::now() + linger;
            while Instant::now() < until {
                if client.do_work().map_err(|e| e.to_string())? == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
    Ok(format!(
        "{{\"role\":\"pub\",\"mode\":\"{}\",\"size\":{size},\"batch\":{batch_size},\"offered\":{sent},\
         \"offer_seconds\":{offer_seconds:.6},\"refusals\":{refusals}}}",
        common.mode_name()
    ))
}

/// Offers one message, retrying while back pressured.
fn offer_blocking(common: &Common, client: &Client, publication: &Publication, message: &[u8]) -> BenchResult<()> {
    loop {
        match publication.try_offer(message).map_err(|e| e.to_string())? {
            Ok(_) => return Ok(()),
            Err(OfferError::BackPressured | OfferError::AdminAction) => common.idle(client)?,
            Err(error) => return Err(format!("offer failed: {error:?}")),
        }
    }
}

/// Polls until one message arrives and returns its first 8 bytes as a sequence number.
fn receive_one(
    common: &Common,
    client: &Client,
    subscription: &mut Subscription,
    batch: &mut MessageBatch,
    deadline: Instant,
    mut loops: Option<&mut LoopTrace>,
) -> BenchResult<u64> {
    loop {
        if let Some(loops) = loops.as_deref_mut() {
            loops.tick();
        }
        batch.clear();
        subscription.poll_into(batch, 16).map_err(|e| e.to_string())?;
        if !batch.is_empty() {
            let message = batch.message(0);
            let mut sequence = [0u8; 8];
            let n = message.len().min(8);
            sequence[..n].copy_from_slice(&message[..n]);
            return Ok(u64::from_le_bytes(sequence));
        }
        if Instant::now() > deadline {
            return Err("timed out waiting for a message".into());
        }
        common.idle(client)?;
    }
}

/// Ping side of the round-trip benchmark.
fn ping(options: &Options) -> BenchResult<String> {
    let common = Common::from(options)?;
    let channel_out = options.string("channel-out", None)?;
    let channel_in = options.string("channel-in", None)?;
    let count = options.number("count", None)?;
    let warmup = options.number("warmup", Some(count / 10))?;
    let size = (options.number("size", Some(32))? as usize).max(8);
    let budget = Duration::from_millis(options.number("budget-ms", Some(5000))?);
    let client = common.client()?;
    let mut subscription = client.add_subscription(&channel_in, common.stream).map_err(|e| e.to_string())?;
    let publication = client.add_publication(&channel_out, common.stream).map_err(|e| e.to_string())?;
    wait_connected(&common, &client, &publication)?;
    // The pong's publication connects to our subscription once it has seen our first message;
    // the first exchange (part of the warm-up) may wait for that.
    let deadline = Instant::now() + common.max_time;
    let mut message = vec![0x5Au8; size];
    let mut batch = MessageBatch::default();
    let mut rtts_ns: Vec<u64> = Vec::with_capacity(count as usize);
    let mut measure_start = None;
    let mut trace = Trace::from(options, "ping")?;
    for sequence in 0..warmup + count {
        message[..8].copy_from_slice(&sequence.to_le_bytes());
        let sent_at = Instant::now();
        let sent_ns = trace.as_ref().map(|_| monotonic_ns());
        offer_blocking(&common, &client, &publication, &message)?;
        let mut loops = trace.as_ref().map(|_| LoopTrace::new(sent_at));
        loop {
            if receive_one(&common, &client, &mut subscription, &mut batch, deadline, loops.as_mut())? == sequence {
                break;
            }
        }
        if sequence >= warmup {
            let now = Instant::now();
            let rtt_ns = now.duration_since(sent_at).as_nanos() as u64;
            rtts_ns.push(rtt_ns);
            if let (Some(trace), Some(sent_ns), Some(loops)) = (trace.as_mut(), sent_ns, loops) {
                trace.record(sequence, &[sent_ns, rtt_ns], &loops);
            }
            if now.duration_since(*measure_start.get_or_insert(now)) > budget {
                break;
            }
        }
    }
    if let Some(trace) = trace.as_mut() {
        trace.write()?;
    }
    rtts_ns.sort_unstable();
    let percentile = |p: f64| -> f64 {
        if rtts_ns.is_empty() {
            return 0.0;
        }
        let index = ((p / 100.0) * (rtts_ns.len() - 1) as f64).round() as usize;
        rtts_ns[index] as f64 / 1000.0
    };
    let mean = rtts_ns.iter().sum::<u64>() as f64 / rtts_ns.len().max(1) as f64 / 1000.0;
    Ok(format!(
        "{{\"role\":\"ping\",\"mode\":\"{}\",\"size\":{size},\"samples\":{},\"p50_us\":{:.1},\"p99_us\":{:.1},\
         \"p99_9_us\":{:.1},\"max_us\":{:.1},\"mean_us\":{mean:.1}}}",
        common.mode_name(),
        rtts_ns.len(),
        percentile(50.0),
        percentile(99.0),
        percentile(99.9),
        percentile(100.0),
    ))
}

/// Echoes messages from `--channel-in` to `--channel-out` until `--count` were echoed or nothing
/// arrived for `--max-seconds`.
fn pong(options: &Options) -> BenchResult<()> {
    let common = Common::from(options)?;
    let channel_in = options.string("channel-in", None)?;
    let channel_out = options.string("channel-out", None)?;
    let count = options.number("count", Some(u64::MAX))?;
    let client = common.client()?;
    let mut subscription = client.add_subscription(&channel_in, common.stream).map_err(|e| e.to_string())?;
    let publication = client.add_publication(&channel_out, common.stream).map_err(|e| e.to_string())?;
    let mut batch = MessageBatch::default();
    let mut echoed = 0u64;
    let mut last = Instant::now();
    let mut trace = Trace::from(options, "pong")?;
    let mut loops = LoopTrace::new(last);
    while echoed < count {
        if trace.is_some() {
            loops.tick();
        }
        batch.clear();
        subscription.poll_into(&mut batch, 16).map_err(|e| e.to_string())?;
        if batch.is_empty() {
            if last.elapsed() > common.max_time {
                return Err(format!("pong: nothing for {:?} after {echoed} echoes", common.max_time));
            }
            if let Some(trace) = trace.as_mut().filter(|_| last.elapsed() > TRACE_QUIET) {
                trace.write()?;
            }
            common.idle(&client)?;
            continue;
        }
        last = Instant::now();
        if let Some(trace) = trace.as_mut() {
            // What the echo found: when it arrived, and how the loop waited for it.
            let sequence =
                batch.message(0).get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
            trace.record(sequence, &[monotonic_ns()], &loops);
            loops = LoopTrace::new(last);
        }
        for index in 0..batch.len() {
            // Before the reverse path connects, echoes would be refused: wait for it.
            while !publication.is_connected().map_err(|e| e.to_string())? {
                if last.elapsed() > common.max_time {
                    return Err("pong: the reverse publication never connected".into());
                }
                common.idle(&client)?;
            }
            offer_blocking(&common, &client, &publication, batch.message(index))?;
            echoed += 1;
        }
    }
    Ok(())
}

/// How long a tracing pong waits with nothing arriving before it writes its trace.
const TRACE_QUIET: Duration = Duration::from_millis(100);

/// `CLOCK_MONOTONIC` in nanoseconds: the clock both processes of a traced ping-pong share.
fn monotonic_ns() -> u64 {
    let mut time = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `time` is a valid timespec for the call to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut time) };
    time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64
}

/// This thread's minor page faults and voluntary / involuntary context switches so far.
fn thread_usage() -> [u64; 3] {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid rusage for the call to write.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    [usage.ru_minflt as u64, usage.ru_nvcsw as u64, usage.ru_nivcsw as u64]
}

/// How a wait loop went: its iterations and the longest one (a stall: preempted, a page fault,
/// a slow system call).
struct LoopTrace {
    iterations: u64,
    longest_ns: u64,
    last: Instant,
}

impl LoopTrace {
    fn new(start: Instant) -> Self {
        LoopTrace { iterations: 0, longest_ns: 0, last: start }
    }

    /// Called at the top of each iteration.
    fn tick(&mut self) {
        let now = Instant::now();
        self.iterations += 1;
        self.longest_ns = self.longest_ns.max(now.duration_since(self.last).as_nanos() as u64);
        self.last = now;
    }
}

/// `--trace PREFIX`: one line per round trip (ping) or echo (pong) written to `PREFIX.<role>`,
/// for finding where the tail of the round trips comes from.
struct Trace {
    path: String,
    lines: String,
    usage: [u64; 3],
}

impl Trace {
    fn from(options: &Options, role: &str) -> BenchResult<Option<Trace>> {
        let Some(prefix) = options.values.get("trace") else { return Ok(None) };
        let path = format!("{prefix}.{role}");
        std::fs::write(&path, "").map_err(|e| format!("{path}: {e}"))?;
        Ok(Some(Trace { path, lines: String::new(), usage: thread_usage() }))
    }

    /// One line: the sequence number, `times`, the loop's iterations and longest one, and the
    /// page faults and context switches (voluntary, involuntary) since the last line.
    fn record(&mut self, sequence: u64, times: &[u64], loops: &LoopTrace) {
        use std::fmt::Write;
        let usage = thread_usage();
        let _ = write!(self.lines, "{sequence}");
        for value in times.iter().chain([loops.iterations, loops.longest_ns].iter()) {
            let _ = write!(self.lines, " {value}");
        }
        for (now, before) in usage.iter().zip(self.usage) {
            let _ = write!(self.lines, " {}", now - before);
        }
        self.lines.push('\n');
        self.usage = usage;
    }

    /// Appends the lines recorded since the last write to the file.
    fn write(&mut self) -> BenchResult<()> {
        use std::io::Write;
        if !self.lines.is_empty() {
            let mut file = std::fs::OpenOptions::new().append(true).open(&self.path);
            file.as_mut()
                .map(|file| file.write_all(self.lines.as_bytes()))
                .map_err(|e| format!("{}: {e}", self.path))?
                .map_err(|e| format!("{}: {e}", self.path))?;
            self.lines.clear();
        }
        Ok(())
    }
}

/// Starts this executable with `args`, its stdout piped.
fn spawn_self(args: &[String]) -> BenchResult<Child> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the child process: {e}"))
}

/// The last line the child printed (after it exited).
fn child_line(child: Child) -> BenchResult<String> {
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text.lines().last().unwrap_or("").to_owned();
    if !output.status.success() || line.is_empty() {
        return Err(format!("the child process failed ({}): {line}", output.status));
    }
    Ok(line)
}

/// `{"a":1}` + `{"b":2}` → `{"a":1,"b":2}` (prefixing the second object's keys).
fn merge_json(first: &str, second: &str, prefix: &str) -> String {
    let head = first.trim().trim_end_matches('}');
    let tail = second.trim().trim_start_matches('{').trim_end_matches('}');
    let tail = tail.replace(",\"", &format!(",\"{prefix}")).replacen('"', &format!("\"{prefix}"), 1);
    format!("{head},{tail}}}")
}

/// `{"a":1}` → `{"a":1,"params":"mtu=65504"}`: the `--params` the channels carried ("" if none).
fn with_params(json: &str, options: &Options) -> String {
    let params = options.values.get("params").map_or("", String::as_str).replace(['"', '\\'], "");
    format!("{},\"params\":\"{params}\"}}", json.trim().trim_end_matches('}'))
}

/// Subscriber in a child process, publisher here; prints the subscriber's figures.
fn run_throughput(options: &Options) -> BenchResult<()> {
    let channel = match options.values.get("channel") {
        Some(channel) => channel.clone(),
        None => free_channel(options)?,
    };
    let count = options.number("count", None)?;
    let warmup = options.number("warmup", Some(count / 10))?;
    let mut sub_args = vec!["throughput-sub".to_owned(), "--channel".into(), channel.clone()];
    sub_args.extend(options.forward(&["channel", "size", "batch", "linger-ms", "warmup", "params"]));
    sub_args.extend(["--warmup".to_owned(), warmup.to_string()]);
    let mut child = spawn_self(&sub_args)?;
    let mut pub_options = Options { values: options.values.clone() };
    pub_options.values.insert("channel".into(), channel);
    pub_options.values.insert("warmup".into(), warmup.to_string());
    let publisher = throughput_pub(&pub_options, Some(&mut child));
    let subscriber = child_line(child)?;
    let publisher = publisher?;
    let merged = merge_json(
        &subscriber.replacen("\"role\":\"sub\"", "\"bench\":\"throughput\",\"lang\":\"rust\"", 1),
        &publisher,
        "pub_",
    );
    println!("{}", with_params(&merged, options));
    Ok(())
}

/// ns per idle invoker duty cycle with one network publication and image served.
fn idle_cycle(options: &Options) -> BenchResult<String> {
    let common = Common { mode: Threading::Invoker, ..Common::from(options)? };
    let cycles = options.number("cycles", Some(1_000_000))?.max(1);
    let blocks = options.number("blocks", Some(20))?.clamp(1, cycles);
    let channel = free_channel(options)?;
    let client = common.client()?;
    let _subscription = client.add_subscription(&channel, common.stream).map_err(|e| e.to_string())?;
    let publication = client.add_publication(&channel, common.stream).map_err(|e| e.to_string())?;
    wait_connected(&common, &client, &publication)?;
    // Past the first lap's page population and the connection's first status messages.
    for _ in 0..cycles / 10 {
        client.do_work().map_err(|e| e.to_string())?;
    }
    let per_block = cycles / blocks;
    let mut block_ns = Vec::with_capacity(blocks as usize);
    for _ in 0..blocks {
        let started = Instant::now();
        for _ in 0..per_block {
            client.do_work().map_err(|e| e.to_string())?;
        }
        block_ns.push(started.elapsed().as_nanos() as f64 / per_block as f64);
    }
    block_ns.sort_by(f64::total_cmp);
    Ok(format!(
        "{{\"bench\":\"idle-cycle\",\"cycles\":{},\"ns_per_cycle\":{:.0},\"min_ns\":{:.0},\"max_ns\":{:.0}}}",
        per_block * blocks,
        block_ns[block_ns.len() / 2],
        block_ns[0],
        block_ns[block_ns.len() - 1]
    ))
}

/// `stalls`: one spinning thread per core for `--seconds`, each recording when and for how long
/// two consecutive clock readings were more than `--over-ns` apart; one JSON line of the totals.
fn stalls(options: &Options) -> BenchResult<String> {
    let seconds = options.number("seconds", Some(2))?.clamp(1, 60);
    let over = Duration::from_nanos(options.number("over-ns", Some(2_000))?.max(100));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let spin = Duration::from_secs(seconds);
    let threads: Vec<_> = (0..cores)
        .map(|_| {
            std::thread::spawn(move || {
                // (start of the stall since the thread's start, its length), both in ns.
                let mut found: Vec<(u64, u64)> = Vec::new();
                let start = Instant::now();
                let mut last = start;
                while last.duration_since(start) < spin {
                    let now = Instant::now();
                    let gap = now.duration_since(last);
                    if gap > over {
                        found.push((last.duration_since(start).as_nanos() as u64, gap.as_nanos() as u64));
                    }
                    last = now;
                }
                found
            })
        })
        .collect();
    let per_core: Vec<Vec<(u64, u64)>> = threads
        .into_iter()
        .map(|t| t.join().map_err(|_| "a spinning thread panicked".to_string()))
        .collect::<Result<_, _>>()?;
    let mut lengths: Vec<u64> = per_core.iter().flatten().map(|&(_, length)| length).collect();
    lengths.sort_unstable();
    // The most common interval between two stalls of one core, in tenths of a millisecond.
    let mut intervals: HashMap<u64, usize> = HashMap::new();
    for core in &per_core {
        for pair in core.windows(2) {
            *intervals.entry((pair[1].0 - pair[0].0 + 50_000) / 100_000).or_default() += 1;
        }
    }
    let common_interval = intervals.iter().max_by_key(|&(interval, count)| (*count, std::cmp::Reverse(*interval)));
    let core_seconds = (cores as u64 * seconds) as f64;
    let at =
        |q: f64| lengths.get(((lengths.len() as f64 - 1.0) * q).round() as usize).map_or(0.0, |&ns| ns as f64 / 1000.0);
    Ok(format!(
        "{{\"bench\":\"stalls\",\"cores\":{cores},\"seconds\":{seconds},\"over_ns\":{},\"per_core_per_s\":{:.0},\
         \"lost_share\":{:.4},\"median_us\":{:.1},\"p90_us\":{:.1},\"max_us\":{:.1},\"common_interval_ms\":{:.1}}}",
        over.as_nanos(),
        lengths.len() as f64 / core_seconds,
        lengths.iter().sum::<u64>() as f64 / 1e9 / core_seconds,
        at(0.5),
        at(0.9),
        at(1.0),
        common_interval.map_or(0.0, |(interval, _)| *interval as f64 / 10.0),
    ))
}

/// Pong in a child process, ping here; prints the round-trip percentiles.
fn run_pingpong(options: &Options) -> BenchResult<()> {
    let out = free_channel(options)?;
    let back = free_channel(options)?;
    let mut pong_args = vec![
        "pong".to_owned(),
        "--channel-in".into(),
        out.clone(),
        "--channel-out".into(),
        back.clone(),
        "--max-seconds".into(),
        "10".into(),
    ];
    pong_args.extend(options.forward(&["count", "size", "warmup", "budget-ms", "max-seconds", "params"]));
    let mut child = spawn_self(&pong_args)?;
    let mut ping_options = Options { values: options.values.clone() };
    ping_options.values.insert("channel-out".into(), out);
    ping_options.values.insert("channel-in".into(), back);
    let result = ping(&ping_options);
    if options.values.contains_key("trace") {
        // The pong writes its trace once nothing arrived for a while.
        std::thread::sleep(TRACE_QUIET * 3);
    }
    let _ = child.kill();
    let _ = child.wait();
    let line = result?;
    let line = line.replacen("\"role\":\"ping\"", "\"bench\":\"pingpong\",\"lang\":\"rust\"", 1);
    println!("{}", with_params(&line, options));
    Ok(())
}
