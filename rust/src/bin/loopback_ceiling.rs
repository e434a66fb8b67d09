//! Loopback ceiling: how many datagrams of the transport's sizes a minimal `sendmmsg` /
//! `recvmmsg` pair moves over 127.0.0.1 between two processes, with no protocol at all.
//!
//! ```text
//! loopback-ceiling run --payload 32 --mtu 1408 [--seconds 1] [--batch 64] [--rcvbuf 2097152] [--wait best|backoff|block|spin] [--offload off|on]
//! ```
//!
//! Datagram size is what the transport's sender produces for a stream of `--payload`-byte
//! messages: each message is one frame of a 32-byte data header plus the payload, padded to the
//! 32-byte frame alignment, and the sender packs as many whole frames into one datagram as fit
//! in `--mtu`. The sender (this process) sends such datagrams with `sendmmsg` in batches of
//! `--batch` for `--seconds`; the receiver (a child process, `recv`) drains them with `recvmmsg`
//! into buffers of `--mtu` bytes, with the transport's default `SO_RCVBUF`, and reports the
//! rate over wall time from its first datagram to its last.
//!
//! Both sides poll non-blocking sockets and, when there is nothing, wait by one of three
//! strategies (`--wait`): `spin` (poll again at once), `block` (sleep in `poll(2)`), or `backoff`
//! (spin, yield, then sleep: the transport's default idle strategy). Which is fastest depends
//! on the CPUs: spinning wins when each side has a core of its own, blocking when the two share
//! one with other work (each datagram batch then waits for a wake-up). The default, `best`,
//! runs once with each and reports the fastest, with every strategy's rate beside it
//! (`backoff_msgs_per_sec`, ...): the earlier ceiling blocked only, and on a busy machine came
//! out below the transport cells it was meant to bound. Flow control is the least that keeps
//! the kernel from dropping datagrams: after each `recvmmsg` the receiver sends its running
//! count back (8 bytes, a second socket), and the sender keeps at most half the receive buffer
//! in flight, polling for the count when the window is full. Datagrams still lost (no count for
//! 50 ms while the window is full lets the sender go on) are not counted: the JSON line reports
//! `sent_datagrams` and `lost_fraction`. Messages per second = datagrams received per second ×
//! frames per datagram.
//!
//! `--offload on` sends and receives with the driver's own batched I/O (`driver::agent::mmsg`):
//! each batch of equal datagrams leaves as offloaded runs (UDP GSO) and arrives whole (GRO), as
//! the driver's do; the sender then sends whole batches only (it waits for a batch's room). The
//! default, `off`, is one kernel traversal per datagram: the bound of a sender without offload.
//!
//! Prints one JSON line: `{"bench":"ceiling","payload":..,"mtu":..,"frame":..,
//! "frames_per_datagram":..,"datagram":..,"datagrams":..,"seconds":..,"datagrams_per_sec":..,
//! "msgs_per_sec":..,"mb_per_sec":..,"offload":..,"sent_datagrams":..,"lost_fraction":..,"wait":..}`, and with
//! `--wait best` also `"backoff_msgs_per_sec"`, `"block_msgs_per_sec"`, `"spin_msgs_per_sec"`.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use affinity::driver::agent::mmsg::{enable_receive_offload, ReceiveBatch, SegmentOffload, SendBatch};

/// Aeron data frame header length.
const HEADER: usize = 32;
/// Frames start on 32-byte boundaries.
const ALIGNMENT: usize = 32;
/// First byte of the datagrams that tell the receiver the sender is done.
const END_MARK: u8 = 0xEE;
/// How long the sender waits for the receiver's count before it takes what is in flight as lost.
const ACK_WAIT: Duration = Duration::from_millis(50);
/// The receiver gives up after this long without a datagram (once it had some, or at the start).
const IDLE_LIMIT: Duration = Duration::from_secs(5);

/// Result type of the tool: errors are messages for the user.
type CeilingResult<T> = Result<T, String>;

/// Parsed `--name value` options with defaults.
struct Options {
    payload: usize,
    mtu: usize,
    seconds: f64,
    batch: usize,
    rcvbuf: usize,
    port: u16,
    ack_port: u16,
    /// What each side does when its socket has nothing for it; `None` (`--wait best`): run
    /// once with each and report the fastest.
    wait: Option<Wait>,
    /// `--offload on`: UDP GSO/GRO through the driver's batched I/O.
    offload: bool,
}

/// What a side does when its (non-blocking) socket has nothing for it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wait {
    /// Poll again at once.
    Spin,
    /// Sleep in `poll(2)` until the socket is readable.
    Block,
    /// Spin, then yield, then sleep in `poll(2)`: the transport's default idle strategy.
    Backoff,
}

impl Wait {
    /// Every strategy, in the order `--wait best` runs them.
    const ALL: [Wait; 3] = [Wait::Backoff, Wait::Block, Wait::Spin];

    fn name(self) -> &'static str {
        match self {
            Wait::Spin => "spin",
            Wait::Block => "block",
            Wait::Backoff => "backoff",
        }
    }
}

/// Empty polls a backing-off side spins through before it yields.
const BACKOFF_SPINS: u32 = 100;
/// Empty polls (after the spins) a backing-off side yields through before it sleeps.
const BACKOFF_YIELDS: u32 = 20;
/// Longest sleep in `poll(2)`; the caller then checks its time limits.
const POLL_SLEEP_MS: i32 = 1;

/// Counts a side's empty polls and waits the way its [`Wait`] says.
struct Idler {
    wait: Wait,
    empty: u32,
}

impl Idler {
    /// What the side does after its `empty_polls`-th empty poll in a row (counted from 1).
    fn step(wait: Wait, empty_polls: u32) -> Step {
        match wait {
            Wait::Spin => Step::Spin,
            Wait::Block => Step::Sleep,
            Wait::Backoff if empty_polls <= BACKOFF_SPINS => Step::Spin,
            Wait::Backoff if empty_polls <= BACKOFF_SPINS + BACKOFF_YIELDS => Step::Yield,
            Wait::Backoff => Step::Sleep,
        }
    }

    /// The socket `fd` had nothing: wait before polling it again.
    fn idle(&mut self, fd: std::os::fd::RawFd) {
        self.empty = self.empty.saturating_add(1);
        match Idler::step(self.wait, self.empty) {
            Step::Spin => std::hint::spin_loop(),
            Step::Yield => std::thread::yield_now(),
            Step::Sleep => {
                let mut poll = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd for the duration of the call. An error or a
                // timeout only means the caller polls its socket again.
                unsafe { libc::poll(&mut poll, 1, POLL_SLEEP_MS) };
            }
        }
    }

    /// The socket had something: the next empty poll starts the backoff again.
    fn reset(&mut self) {
        self.empty = 0;
    }
}

/// One step of an [`Idler`].
#[derive(Debug, PartialEq)]
enum Step {
    Spin,
    Yield,
    Sleep,
}

impl Options {
    fn parse(args: &[String]) -> CeilingResult<Options> {
        let mut options = Options {
            payload: 32,
            mtu: 1408,
            seconds: 1.0,
            batch: 64,
            rcvbuf: 2 * 1024 * 1024,
            port: 0,
            ack_port: 0,
            wait: None,
            offload: false,
        };
        let mut iter = args.iter();
        while let Some(name) = iter.next() {
            let value = iter.next().ok_or_else(|| format!("option {name} needs a value"))?;
            let number = || value.parse::<usize>().map_err(|e| format!("{name} {value:?}: {e}"));
            match name.as_str() {
                "--payload" => options.payload = number()?,
                "--mtu" => options.mtu = number()?,
                "--batch" => options.batch = number()?.clamp(1, 1024),
                "--rcvbuf" => options.rcvbuf = number()?,
                "--port" => options.port = u16::try_from(number()?).map_err(|e| format!("--port: {e}"))?,
                "--ack-port" => options.ack_port = u16::try_from(number()?).map_err(|e| format!("--ack-port: {e}"))?,
                "--wait" => {
                    options.wait = match value.as_str() {
                        "spin" => Some(Wait::Spin),
                        "block" => Some(Wait::Block),
                        "backoff" => Some(Wait::Backoff),
                        "best" => None,
                        other => return Err(format!("--wait {other:?}: best, backoff, block or spin")),
                    }
                }
                "--offload" => {
                    options.offload = match value.as_str() {
                        "on" => true,
                        "off" => false,
                        other => return Err(format!("--offload {other:?}: on or off")),
                    }
                }
                "--seconds" => options.seconds = value.parse().map_err(|e| format!("--seconds {value:?}: {e}"))?,
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        if options.frame() > options.mtu {
            return Err(format!("a {}-byte payload does not fit one frame in --mtu {}", options.payload, options.mtu));
        }
        Ok(options)
    }

    /// Length of one message's frame: header + payload, aligned.
    fn frame(&self) -> usize {
        (HEADER + self.payload).div_ceil(ALIGNMENT) * ALIGNMENT
    }

    fn frames_per_datagram(&self) -> usize {
        (self.mtu / self.frame()).max(1)
    }

    fn datagram(&self) -> usize {
        self.frames_per_datagram() * self.frame()
    }

    /// Datagrams the sender keeps in flight at most: half the receive buffer's worth.
    fn window(&self) -> u64 {
        (self.rcvbuf / 2 / self.datagram()).max(1) as u64
    }
}

/// Datagrams the sender may send now: the window less what is in flight (`sent - acked`).
fn room(window: u64, sent: u64, acked: u64) -> u64 {
    window.saturating_sub(sent.saturating_sub(acked))
}

/// Fraction of the sent datagrams the receiver did not count (0 when nothing was sent).
fn lost_fraction(sent: u64, received: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        1.0 - (received as f64 / sent as f64).min(1.0)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => Options::parse(&args[1..]).and_then(|o| match o.wait {
            Some(wait) => run(&o, wait),
            None => run_best(&o),
        }),
        Some("recv") => Options::parse(&args[1..]).and_then(|o| receive(&o, o.wait.unwrap_or(Wait::Backoff))),
        _ => Err("usage: loopback-ceiling run|recv [--payload B] [--mtu B] [--seconds S] [--batch N] \
                   [--rcvbuf B] [--wait best|backoff|block|spin] [--offload off|on]"
            .to_owned()),
    };
    match result {
        Ok(line) => println!("{line}"),
        Err(message) => {
            eprintln!("loopback-ceiling: {message}");
            std::process::exit(1);
        }
    }
}

/// One `mmsghdr` per iovec, each pointing at its iovec (no name, no control data).
fn message_headers(iovecs: &mut [libc::iovec]) -> Vec<libc::mmsghdr> {
    iovecs
        .iter_mut()
        .map(|iov| {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut header: libc::mmsghdr = unsafe { std::mem::zeroed() };
            header.msg_hdr.msg_iov = iov;
            header.msg_hdr.msg_iovlen = 1;
            header
        })
        .collect()
}

/// Sends the first `batch` of `headers` (datagrams built once, before the timed loop) with one
/// `sendmmsg`; returns how many the kernel took.
fn send_batch(socket: &UdpSocket, headers: &mut [libc::mmsghdr], batch: usize) -> CeilingResult<usize> {
    let count = u32::try_from(batch.min(headers.len())).map_err(|e| e.to_string())?;
    // SAFETY: `headers` holds at least `count` initialised headers whose iovecs point into the
    // caller's buffer, all alive for the call; the socket is connected, so no address is needed.
    let sent = unsafe { libc::sendmmsg(socket.as_raw_fd(), headers.as_mut_ptr(), count, 0) };
    if sent < 0 {
        let error = std::io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::ENOBUFS | libc::EAGAIN) => Ok(0),
            _ => Err(format!("sendmmsg: {error}")),
        };
    }
    usize::try_from(sent).map_err(|e| e.to_string())
}

/// Sender here, receiver in a child process; prints the receiver's figures.
fn run(options: &Options, wait: Wait) -> CeilingResult<String> {
    let probe = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = probe.local_addr().map_err(|e| e.to_string())?.port();
    drop(probe);
    // The receiver's running count comes back on this socket.
    let acks = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let ack_port = acks.local_addr().map_err(|e| e.to_string())?.port();
    acks.set_nonblocking(true).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["recv", "--payload", &options.payload.to_string(), "--mtu", &options.mtu.to_string()])
        .args(["--batch", &options.batch.to_string(), "--rcvbuf", &options.rcvbuf.to_string(), "--wait", wait.name()])
        .args(["--port", &port.to_string(), "--ack-port", &ack_port.to_string()])
        .args(["--offload", if options.offload { "on" } else { "off" }])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the receiver: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no receiver stdout")?;
    // The receiver prints "ready" once bound.
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(&mut stdout, &mut ready).map_err(|e| format!("receiver did not start: {e}"))?;
    let socket = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    socket.connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    let buffer = vec![0xA5u8; options.datagram()];
    let mut iovecs: Vec<libc::iovec> = (0..options.batch)
        .map(|_| libc::iovec { iov_base: buffer.as_ptr() as *mut libc::c_void, iov_len: buffer.len() })
        .collect();
    let mut headers = message_headers(&mut iovecs);
    // With --offload on: the same datagrams, queued once, sent as offloaded runs.
    let mut offloaded = SendBatch::default();
    let mut offload = SegmentOffload::default();
    if options.offload {
        for _ in 0..options.batch {
            offloaded.push_with(|slot| {
                let datagram = slot.get_mut(..buffer.len())?;
                datagram.copy_from_slice(&buffer);
                Some(datagram.len())
            });
        }
    }
    let window = options.window();
    let mut sent = 0u64;
    let mut acked = 0u64;
    let mut count = [0u8; 8];
    let start = Instant::now();
    let duration = Duration::from_secs_f64(options.seconds.max(0.01));
    // When the window last had room or a count last arrived: a full window with no count for
    // ACK_WAIT means what is in flight was dropped.
    let mut progress = start;
    let mut idler = Idler { wait, empty: 0 };
    while start.elapsed() < duration {
        // Every count that has arrived (the latest is the largest).
        while matches!(acks.recv(&mut count), Ok(8)) {
            acked = acked.max(u64::from_le_bytes(count));
            progress = Instant::now();
        }
        let room = room(window, sent, acked);
        // Offloaded batches go whole: wait for a batch's room.
        let needed = if options.offload { offloaded.len() as u64 } else { 1 };
        if room < needed {
            if progress.elapsed() > ACK_WAIT {
                // No count for ACK_WAIT with the window full: what is in flight was dropped.
                acked = sent;
                progress = Instant::now();
            }
            idler.idle(acks.as_raw_fd());
            continue;
        }
        idler.reset();
        progress = Instant::now();
        if options.offload {
            let outcome = offloaded.send(&socket, None, &mut offload);
            if let Some(errno) = outcome.offload_refused {
                return Err(format!("offload refused: {}", std::io::Error::from_raw_os_error(errno)));
            }
            sent += outcome.datagrams as u64;
            continue;
        }
        let batch = options.batch.min(usize::try_from(room).unwrap_or(options.batch));
        sent += send_batch(&socket, &mut headers, batch)? as u64;
    }
    // End marks, repeated: one may be dropped like any datagram.
    let end = [END_MARK; 8];
    for _ in 0..200 {
        let _ = socket.send(&end);
        std::thread::sleep(Duration::from_micros(500));
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).map_err(|e| e.to_string())?;
    let status = child.wait().map_err(|e| e.to_string())?;
    let line = text.lines().last().unwrap_or("").trim().to_owned();
    if !status.success() || !line.starts_with('{') {
        return Err(format!("the receiver failed ({status}): {line}"));
    }
    let received: u64 = json_number(&line, "datagrams").unwrap_or(0.0) as u64;
    let lost = lost_fraction(sent, received);
    Ok(format!(
        "{},\"sent_datagrams\":{sent},\"lost_fraction\":{lost:.4},\"wait\":\"{}\"}}",
        line.trim_end_matches('}'),
        wait.name()
    ))
}

/// Runs once with each [`Wait`] strategy and reports the fastest run's line, with every
/// strategy's rate added (`<wait>_msgs_per_sec`): which one wins depends on how busy the CPUs
/// are (spinning when each side has a core, blocking when they share one), and a ceiling must
/// be the best the bare path does in the same minute.
fn run_best(options: &Options) -> CeilingResult<String> {
    let mut lines = Vec::new();
    for wait in Wait::ALL {
        lines.push((wait, run(options, wait)?));
    }
    best_of(&lines).ok_or_else(|| "no run reported a rate".to_owned())
}

/// The line with the highest `msgs_per_sec`, extended with each line's rate as
/// `<wait>_msgs_per_sec`; `None` when no line has a rate.
fn best_of(lines: &[(Wait, String)]) -> Option<String> {
    let rate = |line: &String| json_number(line, "msgs_per_sec");
    let best = lines.iter().filter(|(_, line)| rate(line).is_some()).max_by(|a, b| {
        let (a, b) = (rate(&a.1).unwrap_or(0.0), rate(&b.1).unwrap_or(0.0));
        a.total_cmp(&b)
    })?;
    let rates: String = lines
        .iter()
        .map(|(wait, line)| format!(",\"{}_msgs_per_sec\":{:.0}", wait.name(), rate(line).unwrap_or(0.0)))
        .collect();
    Some(format!("{}{rates}}}", best.1.trim_end_matches('}')))
}

/// The number after `"key":` in a flat JSON object.
fn json_number(line: &str, key: &str) -> Option<f64> {
    let start = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

/// Receives until an end mark (or silence), then prints the rate.
fn receive(options: &Options, wait: Wait) -> CeilingResult<String> {
    let socket = UdpSocket::bind(("127.0.0.1", options.port)).map_err(|e| format!("bind: {e}"))?;
    let sock = socket2::SockRef::from(&socket);
    sock.set_recv_buffer_size(options.rcvbuf).map_err(|e| format!("SO_RCVBUF: {e}"))?;
    socket.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut idler = Idler { wait, empty: 0 };
    let acks = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    acks.connect(("127.0.0.1", options.ack_port)).map_err(|e| format!("connect: {e}"))?;
    println!("ready");
    if options.offload {
        return receive_offloaded(options, &socket, &acks, &mut idler);
    }
    let batch = options.batch;
    let size = options.mtu.max(64);
    let mut buffers = vec![0u8; batch * size];
    let mut datagrams = 0u64;
    let mut bytes = 0u64;
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let started = Instant::now();
    let mut iovecs: Vec<libc::iovec> = buffers
        .chunks_mut(size)
        .map(|chunk| libc::iovec { iov_base: chunk.as_mut_ptr().cast(), iov_len: chunk.len() })
        .collect();
    let mut headers = message_headers(&mut iovecs);
    'outer: loop {
        let count = u32::try_from(headers.len()).map_err(|e| e.to_string())?;
        // SAFETY: `count` headers, each pointing at its own `size`-byte chunk of `buffers`, all
        // alive for the call. The socket is non-blocking: an empty queue returns EAGAIN at once.
        let got = unsafe {
            libc::recvmmsg(socket.as_raw_fd(), headers.as_mut_ptr(), count, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if got < 0 {
            let error = std::io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => {
                    let idle = first.map_or(started, |_| last).elapsed();
                    if idle > IDLE_LIMIT {
                        break;
                    }
                    idler.idle(socket.as_raw_fd());
                    continue;
                }
                _ => return Err(format!("recvmmsg: {error}")),
            }
        }
        idler.reset();
        let now = Instant::now();
        for (header, chunk) in headers.iter().zip(buffers.chunks(size)).take(usize::try_from(got).unwrap_or(0)) {
            let length = header.msg_len as usize;
            if length < 64 && chunk.first() == Some(&END_MARK) {
                break 'outer;
            }
            if first.is_none() {
                first = Some(now);
            }
            datagrams += 1;
            bytes += length as u64;
            last = now;
        }
        // Best effort: a lost count only makes the sender wait ACK_WAIT.
        let _ = acks.send(&datagrams.to_le_bytes());
    }
    let seconds = first.map_or(0.0, |first| last.duration_since(first).as_secs_f64());
    Ok(report(options, datagrams, bytes, seconds))
}

/// The receiver with `--offload on`: the driver's [`ReceiveBatch`] on a socket with receive
/// offload, counting the datagrams it cuts each delivery into.
fn receive_offloaded(
    options: &Options,
    socket: &UdpSocket,
    acks: &UdpSocket,
    idler: &mut Idler,
) -> CeilingResult<String> {
    if !enable_receive_offload(socket) {
        return Err("UDP_GRO refused by this kernel".to_owned());
    }
    let mut batch = ReceiveBatch::new(options.batch);
    let (mut datagrams, mut bytes) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let started = Instant::now();
    'outer: loop {
        if batch.receive(socket) == 0 {
            if first.map_or(started, |_| last).elapsed() > IDLE_LIMIT {
                break;
            }
            idler.idle(socket.as_raw_fd());
            continue;
        }
        idler.reset();
        let now = Instant::now();
        for (datagram, _) in batch.datagrams() {
            if datagram.len() < 64 && datagram.first() == Some(&END_MARK) {
                break 'outer;
            }
            first.get_or_insert(now);
            datagrams += 1;
            bytes += datagram.len() as u64;
            last = now;
        }
        // Best effort: a lost count only makes the sender wait ACK_WAIT.
        let _ = acks.send(&datagrams.to_le_bytes());
    }
    let seconds = first.map_or(0.0, |first| last.duration_since(first).as_secs_f64());
    Ok(report(options, datagrams, bytes, seconds))
}

/// The receiver's JSON line: `datagrams` of `bytes` over `seconds` (first to last datagram).
fn report(options: &Options, datagrams: u64, bytes: u64, seconds: f64) -> String {
    let seconds = seconds.max(1e-9);
    let per_second = datagrams as f64 / seconds;
    let messages = per_second * options.frames_per_datagram() as f64;
    format!(
        "{{\"bench\":\"ceiling\",\"payload\":{},\"mtu\":{},\"frame\":{},\"frames_per_datagram\":{},\"datagram\":{},\
         \"datagrams\":{datagrams},\"bytes\":{bytes},\"seconds\":{seconds:.6},\"datagrams_per_sec\":{per_second:.0},\
         \"msgs_per_sec\":{messages:.0},\"mb_per_sec\":{:.2},\"offload\":{}}}",
        options.payload,
        options.mtu,
        options.frame(),
        options.frames_per_datagram(),
        options.datagram(),
        messages * options.payload as f64 / 1e6,
        options.offload,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(payload: usize, mtu: usize) -> Options {
        let args: Vec<String> =
            ["--payload", &payload.to_string(), "--mtu", &mtu.to_string()].iter().map(|s| s.to_string()).collect();
        match Options::parse(&args) {
            Ok(options) => options,
            Err(message) => panic!("{message}"),
        }
    }

    #[test]
    fn a_1k_message_fills_one_datagram_of_its_aligned_frame_at_the_default_mtu() {
        let o = options(1024, 1408);
        assert_eq!((o.frame(), o.frames_per_datagram(), o.datagram()), (1056, 1, 1056));
    }

    #[test]
    fn small_messages_are_packed_as_whole_frames_up_to_the_mtu() {
        let o = options(32, 1408);
        assert_eq!((o.frame(), o.frames_per_datagram(), o.datagram()), (64, 22, 1408));
        let o = options(32, 65504);
        assert_eq!((o.frames_per_datagram(), o.datagram()), (1023, 65472));
        let o = options(1024, 65504);
        assert_eq!((o.frames_per_datagram(), o.datagram()), (62, 65472));
    }

    #[test]
    fn offload_is_off_unless_asked_and_only_on_or_off_is_taken() {
        assert!(!options(32, 1408).offload);
        let parse = |value: &str| Options::parse(&["--offload".to_owned(), value.to_owned()]);
        assert!(parse("on").map(|o| o.offload).unwrap_or(false));
        assert!(parse("off").map(|o| !o.offload).unwrap_or(false));
        assert_eq!(parse("yes").err().as_deref(), Some("--offload \"yes\": on or off"));
    }

    #[test]
    fn a_payload_larger_than_the_mtu_is_refused() {
        let args: Vec<String> = ["--payload", "1400", "--mtu", "1408"].iter().map(|s| s.to_string()).collect();
        assert!(Options::parse(&args).is_err());
    }

    #[test]
    fn the_window_is_half_the_receive_buffer_in_datagrams_and_at_least_one() {
        let mut o = options(1024, 1408);
        assert_eq!(o.window(), 1024 * 1024 / 1056);
        o.rcvbuf = 100;
        assert_eq!(o.window(), 1);
    }

    #[test]
    fn room_is_the_window_less_what_is_in_flight_and_never_negative() {
        assert_eq!(room(10, 4, 0), 6);
        assert_eq!(room(10, 14, 4), 0);
        assert_eq!(room(10, 30, 4), 0);
        // A count ahead of the sender (a stale or forged one) leaves the whole window.
        assert_eq!(room(10, 4, 9), 10);
    }

    #[test]
    fn best_reports_the_fastest_strategy_with_every_strategys_rate() {
        let lines = vec![
            (Wait::Backoff, r#"{"bench":"ceiling","msgs_per_sec":300,"wait":"backoff"}"#.to_owned()),
            (Wait::Block, r#"{"bench":"ceiling","msgs_per_sec":450,"wait":"block"}"#.to_owned()),
            (Wait::Spin, r#"{"bench":"ceiling","msgs_per_sec":200,"wait":"spin"}"#.to_owned()),
        ];
        assert_eq!(
            best_of(&lines).as_deref(),
            Some(
                r#"{"bench":"ceiling","msgs_per_sec":450,"wait":"block","backoff_msgs_per_sec":300,"block_msgs_per_sec":450,"spin_msgs_per_sec":200}"#
            )
        );
        assert_eq!(best_of(&[(Wait::Spin, "{}".to_owned())]), None);
    }

    #[test]
    fn backoff_spins_then_yields_then_sleeps_and_the_others_do_one_thing() {
        assert_eq!(Idler::step(Wait::Backoff, 1), Step::Spin);
        assert_eq!(Idler::step(Wait::Backoff, BACKOFF_SPINS), Step::Spin);
        assert_eq!(Idler::step(Wait::Backoff, BACKOFF_SPINS + 1), Step::Yield);
        assert_eq!(Idler::step(Wait::Backoff, BACKOFF_SPINS + BACKOFF_YIELDS + 1), Step::Sleep);
        assert_eq!(Idler::step(Wait::Spin, u32::MAX), Step::Spin);
        assert_eq!(Idler::step(Wait::Block, 1), Step::Sleep);
    }

    #[test]
    fn lost_fraction_counts_what_the_receiver_did_not_see() {
        assert_eq!(lost_fraction(0, 0), 0.0);
        assert_eq!(lost_fraction(100, 100), 0.0);
        assert!((lost_fraction(100, 75) - 0.25).abs() < 1e-12);
        assert_eq!(lost_fraction(100, 120), 0.0);
    }
}
